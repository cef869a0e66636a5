/* GPT-2's byte-level BPE on token ids (see gpt2_bpe.h). */
#include "data/gpt2_bpe.h"
#include "data/gpt2_pretok.h"
#include "util/fs_util.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Pieces up to this many bytes are cached (a word; longer pieces are rare runs of spaces or
 * symbols). The cache is direct-mapped: a new piece replaces whatever shared its slot, so it
 * stays 6 MiB however much text goes through. */
#define CACHE_KEY_MAX 32
#define CACHE_SLOTS (1u << 16)

typedef struct cache_slot {
  uint8_t klen, ntok; /* klen 0 = empty */
  unsigned char key[CACHE_KEY_MAX];
  uint16_t toks[CACHE_KEY_MAX]; /* a piece encodes to at most its byte count */
} cache_slot;

/* (left, right) -> (rank, merged): open addressing, linear probing, key 0 never used (left and
 * right are < 65536, so key = left << 32 | right | 1 << 63 is never 0). */
typedef struct pair_ent { uint64_t key; int32_t rank, merged; } pair_ent;

struct loom_gpt2 {
  int n_vocab;
  uint32_t *tok_off;      /* n_vocab + 1 offsets into tok_bytes */
  unsigned char *tok_bytes;
  int32_t byte_id[256];   /* the single-byte tokens */
  pair_ent *pairs;
  size_t pair_cap;        /* a power of two, at least twice the merges */
  cache_slot *cache;
  int32_t *scratch;       /* a piece's symbols while merging */
  size_t scratch_cap;
  loom_gpt2_pretok *pretok;
};

/* ---- bytes_to_unicode (encoder.py): printable Latin-1 bytes stand for themselves, the other
 * 68 bytes for U+0100.. in byte order, so every byte has a visible, non-space character ---- */

static int byte_is_printable(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* code point -> byte, -1 where no byte maps there; covers U+0000..U+0143 */
#define UNI_SPAN 0x144
static void unicode_to_bytes(int16_t inv[UNI_SPAN]) {
  for (int c = 0; c < UNI_SPAN; c++) inv[c] = -1;
  int n = 0;
  for (int b = 0; b < 256; b++) {
    if (byte_is_printable(b)) inv[b] = (int16_t)b;
    else inv[256 + n++] = (int16_t)b;
  }
}

/* Decode one UTF-8 code point from s[*i..len); -1 when malformed. */
static int32_t utf8_next(const unsigned char *s, size_t len, size_t *i) {
  unsigned c = s[*i];
  int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
  if (n < 0 || *i + (size_t)n >= len) return -1;
  int32_t cp = n == 0 ? (int32_t)c : (int32_t)(c & (0x3Fu >> n));
  for (int k = 1; k <= n; k++) {
    unsigned d = s[*i + (size_t)k];
    if ((d & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (int32_t)(d & 0x3F);
  }
  *i += (size_t)n + 1;
  return cp;
}

/* The bytes a vocabulary string stands for, into out (room for len bytes); -1 if a character
 * is not one of bytes_to_unicode's. */
static int vocab_string_bytes(const int16_t inv[UNI_SPAN], const char *s, size_t len,
                              unsigned char *out, size_t *n_out) {
  size_t i = 0, n = 0;
  while (i < len) {
    int32_t cp = utf8_next((const unsigned char *)s, len, &i);
    if (cp < 0 || cp >= UNI_SPAN || inv[cp] < 0) return -1;
    out[n++] = (unsigned char)inv[cp];
  }
  *n_out = n;
  return 0;
}

/* ---- the pair table ---- */

static uint64_t pair_key(int32_t a, int32_t b) {
  return (uint64_t)1 << 63 | (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

static size_t pair_hash(uint64_t k, size_t cap) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return (size_t)k & (cap - 1);
}

static pair_ent *pair_slot(const loom_gpt2 *g, uint64_t key) {
  size_t i = pair_hash(key, g->pair_cap);
  while (g->pairs[i].key && g->pairs[i].key != key) i = (i + 1) & (g->pair_cap - 1);
  return &g->pairs[i];
}

/* ---- construction ---- */

void loom_gpt2_free(loom_gpt2 *g) {
  if (!g) return;
  free(g->tok_off);
  free(g->tok_bytes);
  free(g->pairs);
  free(g->cache);
  free(g->scratch);
  loom_gpt2_pretok_free(g->pretok);
  free(g);
}

loom_gpt2 *loom_gpt2_create(json_t *encoder, json_t *merges, const char *what, char *err,
                            size_t errlen) {
  if (!json_is_object(encoder)) {
    loom__set_err(err, errlen, "%s: \"encoder\" must be an object (token string -> id)", what);
    return NULL;
  }
  if (!json_is_array(merges)) {
    loom__set_err(err, errlen, "%s: \"merges\" must be an array of \"LEFT RIGHT\" strings", what);
    return NULL;
  }
  size_t n = json_object_size(encoder);
  if (n < 256 || n > 65536) {
    loom__set_err(err, errlen, "%s: the encoder holds %zu tokens; byte-level BPE needs 256 to "
                  "65536 (uint16 token shards)", what, n);
    return NULL;
  }
  loom_gpt2 *g = calloc(1, sizeof *g);
  if (!g) goto oom;
  g->n_vocab = (int)n;
  int16_t inv[UNI_SPAN];
  unicode_to_bytes(inv);

  /* 1. every id's bytes: the ids must be exactly 0..n-1 */
  unsigned char (*bytes)[LOOM_GPT2_MAX_TOKEN_BYTES] = NULL;
  uint8_t *blen = NULL;
  bytes = malloc(n * sizeof *bytes);
  blen = calloc(n, 1);
  uint8_t *seen = calloc(n, 1);
  if (!bytes || !blen || !seen) {
    free(bytes); free(blen); free(seen);
    goto oom;
  }
  const char *key;
  json_t *val;
  int bad = 0;
  size_t total = 0;
  for (int b = 0; b < 256; b++) g->byte_id[b] = -1;
  json_object_foreach(encoder, key, val) {
    json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
    size_t klen = strlen(key), nb = 0;
    unsigned char tmp[4 * LOOM_GPT2_MAX_TOKEN_BYTES];
    if (id < 0 || id >= (json_int_t)n) {
      loom__set_err(err, errlen, "%s: encoder[\"%.64s\"]: expected an id in 0..%zu", what, key,
                    n - 1);
      bad = 1;
    } else if (seen[id]) {
      loom__set_err(err, errlen, "%s: encoder[\"%.64s\"]: id %lld given twice", what, key,
                    (long long)id);
      bad = 1;
    } else if (klen > sizeof tmp || vocab_string_bytes(inv, key, klen, tmp, &nb) != 0 ||
               nb == 0 || nb > LOOM_GPT2_MAX_TOKEN_BYTES) {
      /* <|endoftext|> is spelled in ASCII that bytes_to_unicode also uses: it decodes to its
       * own 13 bytes, which is what showing it should print */
      loom__set_err(err, errlen, "%s: encoder[\"%.64s\"]: not 1..%d bytes in GPT-2's "
                    "bytes_to_unicode spelling", what, key, LOOM_GPT2_MAX_TOKEN_BYTES);
      bad = 1;
    }
    if (bad) break;
    seen[id] = 1;
    memcpy(bytes[id], tmp, nb);
    blen[id] = (uint8_t)nb;
    total += nb;
    if (nb == 1 && g->byte_id[tmp[0]] < 0) g->byte_id[tmp[0]] = (int32_t)id;
  }
  free(seen);
  for (int b = 0; !bad && b < 256; b++)
    if (g->byte_id[b] < 0) {
      loom__set_err(err, errlen, "%s: the encoder has no token for byte 0x%02x", what, b);
      bad = 1;
    }
  if (!bad) {
    g->tok_off = malloc((n + 1) * sizeof *g->tok_off);
    g->tok_bytes = malloc(total);
    if (g->tok_off && g->tok_bytes) {
      size_t o = 0;
      for (size_t i = 0; i < n; i++) {
        g->tok_off[i] = (uint32_t)o;
        memcpy(g->tok_bytes + o, bytes[i], blen[i]);
        o += blen[i];
      }
      g->tok_off[n] = (uint32_t)o;
    }
  }
  free(bytes);
  free(blen);
  if (bad) {
    loom_gpt2_free(g);
    return NULL;
  }
  if (!g->tok_off || !g->tok_bytes) goto oom;

  /* 2. the merges, by rank: both parts and their concatenation must be tokens */
  size_t n_merges = json_array_size(merges);
  g->pair_cap = 1024;
  while (g->pair_cap < 2 * n_merges) g->pair_cap *= 2;
  g->pairs = calloc(g->pair_cap, sizeof *g->pairs);
  if (!g->pairs) goto oom;
  for (size_t r = 0; r < n_merges; r++) {
    const char *m = json_string_value(json_array_get(merges, r));
    const char *sp = m ? strchr(m, ' ') : NULL;
    if (!sp || sp == m || !sp[1] || strchr(sp + 1, ' ')) {
      loom__set_err(err, errlen, "%s: merges[%zu]: expected \"LEFT RIGHT\" (two tokens, one "
                    "space)", what, r);
      loom_gpt2_free(g);
      return NULL;
    }
    char left[4 * LOOM_GPT2_MAX_TOKEN_BYTES + 1], joined[8 * LOOM_GPT2_MAX_TOKEN_BYTES + 1];
    size_t ll = (size_t)(sp - m), rl = strlen(sp + 1);
    json_t *a = NULL, *b = NULL, *c = NULL;
    if (ll < sizeof left && ll + rl < sizeof joined) {
      memcpy(left, m, ll);
      left[ll] = '\0';
      memcpy(joined, m, ll);
      memcpy(joined + ll, sp + 1, rl + 1);
      a = json_object_get(encoder, left);
      b = json_object_get(encoder, sp + 1);
      c = json_object_get(encoder, joined);
    }
    if (!a || !b || !c) {
      loom__set_err(err, errlen, "%s: merges[%zu] \"%.64s\": %s is not in the encoder", what, r,
                    m, !a ? "its left part" : !b ? "its right part" : "the merged token");
      loom_gpt2_free(g);
      return NULL;
    }
    /* a pair listed twice takes its last rank, as the references' dict(zip(merges, ranks)) */
    pair_ent *e = pair_slot(g, pair_key((int32_t)json_integer_value(a),
                                        (int32_t)json_integer_value(b)));
    e->key = pair_key((int32_t)json_integer_value(a), (int32_t)json_integer_value(b));
    e->rank = (int32_t)r;
    e->merged = (int32_t)json_integer_value(c);
  }

  g->cache = calloc(CACHE_SLOTS, sizeof *g->cache);
  if (!g->cache) goto oom;
  g->pretok = loom_gpt2_pretok_create(err, errlen);
  if (!g->pretok) {
    loom_gpt2_free(g);
    return NULL;
  }
  return g;
oom:
  loom_gpt2_free(g);
  loom__set_err(err, errlen, "%s: out of memory building the BPE tables", what);
  return NULL;
}

int loom_gpt2_vocab_size(const loom_gpt2 *g) { return g->n_vocab; }

const unsigned char *loom_gpt2_token_bytes(const loom_gpt2 *g, int id, size_t *len) {
  if (id < 0 || id >= g->n_vocab) {
    *len = 0;
    return NULL;
  }
  *len = g->tok_off[id + 1] - g->tok_off[id];
  return g->tok_bytes + g->tok_off[id];
}

struct loom_gpt2_pretok *loom_gpt2_get_pretok(loom_gpt2 *g) { return g->pretok; }

/* ---- encoding ---- */

/* Merge the symbols of one piece in place; returns their new count. The lowest-ranked adjacent
 * pair is merged at every occurrence, left to right, until no adjacent pair has a rank: the
 * reference's loop, on ids. O(n^2) in the piece length, which the cache makes rare. */
static size_t bpe_merge(const loom_gpt2 *g, int32_t *s, size_t n) {
  while (n > 1) {
    int32_t best = INT32_MAX, a = -1, b = -1, merged = -1;
    for (size_t i = 0; i + 1 < n; i++) {
      const pair_ent *e = pair_slot(g, pair_key(s[i], s[i + 1]));
      if (e->key && e->rank < best) {
        best = e->rank;
        a = s[i];
        b = s[i + 1];
        merged = e->merged;
      }
    }
    if (merged < 0) break;
    size_t j = 0;
    for (size_t i = 0; i < n;) {
      if (i + 1 < n && s[i] == a && s[i + 1] == b) {
        s[j++] = merged;
        i += 2;
      } else {
        s[j++] = s[i++];
      }
    }
    n = j;
  }
  return n;
}

static uint32_t fnv1a(const unsigned char *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
  return h;
}

size_t loom_gpt2_encode_piece(loom_gpt2 *g, const unsigned char *piece, size_t len,
                              int32_t *out) {
  cache_slot *slot = NULL;
  if (len <= CACHE_KEY_MAX) {
    slot = &g->cache[fnv1a(piece, len) & (CACHE_SLOTS - 1)];
    if (slot->klen == len && memcmp(slot->key, piece, len) == 0) {
      for (size_t i = 0; i < slot->ntok; i++) out[i] = slot->toks[i];
      return slot->ntok;
    }
  }
  for (size_t i = 0; i < len; i++) out[i] = g->byte_id[piece[i]];
  size_t n = bpe_merge(g, out, len);
  if (slot) {
    slot->klen = (uint8_t)len;
    slot->ntok = (uint8_t)n;
    memcpy(slot->key, piece, len);
    for (size_t i = 0; i < n; i++) slot->toks[i] = (uint16_t)out[i];
  }
  return n;
}

size_t loom_gpt2_encode(loom_gpt2 *g, const char *text, size_t len, int32_t *out, size_t max) {
  size_t pos = 0, start, plen, total = 0;
  while (loom_gpt2_pretok_next(g->pretok, text, len, &pos, &start, &plen)) {
    int32_t *dst = out + total;
    if (total + plen > max) { /* may not fit: encode aside, copy what fits */
      if (g->scratch_cap < plen) {
        int32_t *s = realloc(g->scratch, plen * sizeof *s);
        if (!s) return SIZE_MAX;
        g->scratch = s;
        g->scratch_cap = plen;
      }
      dst = g->scratch;
    }
    size_t k = loom_gpt2_encode_piece(g, (const unsigned char *)text + start, plen, dst);
    if (dst != out + total)
      for (size_t i = 0; i < k && total + i < max; i++) out[total + i] = dst[i];
    total += k;
  }
  return total;
}
