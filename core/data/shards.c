/* Token shards (llm.c's .bin format) and the deterministic, resumable loader of shards.h.
 *
 * B = batch rows per micro-batch, T = sequence length, dp = data-parallel ranks, m = micro-step,
 * r = data-parallel rank, k = global sequence number, s = k mod n_seqs (position in the epoch).
 *
 * Every shard is mmap'ed read-only for the loader's lifetime and validated once at open (header,
 * size, every token id), so fill() is pure pointer arithmetic: no I/O, no failure path. The only
 * state is the cursor, which makes resume exact (save the cursor, set it on a fresh loader). */
#define _GNU_SOURCE
#include "data/shards.h"
#include "util/atomic_file.h"
#include "util/input_file.h"
#include "../util/fs_util.h"

#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc64.h>
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "llm.c token shards are little-endian; this loader reads them in place"
#endif

#define HEADER_BYTES ((size_t)LOOM_SHARD_HEADER_INTS * sizeof(int32_t))


static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void shard_unmap(loom_shard *sh) {
  if (sh->map) munmap(sh->map, sh->map_bytes);
  free(sh->path);
  memset(sh, 0, sizeof(*sh));
}

/* Map one shard and check it: header, size, token ids, length >= T+1. */
static int shard_open(loom_shard *sh, const char *path, int T, int vocab_size, char *err,
                      size_t errlen) {
  memset(sh, 0, sizeof(*sh));
  sh->path = strdup(path);
  if (!sh->path) {
    loom__set_err(err, errlen, "%s: out of memory", path);
    return -1;
  }
  /* never a blocking open: a FIFO matched by the glob is refused, not waited on */
  off_t size;
  int fd = loom__open_regular(path, &size, err, errlen);
  if (fd < 0) return -1;
  size_t file_bytes = (size_t)size;
  if (file_bytes < HEADER_BYTES) {
    loom__set_err(err, errlen,
            "%s: truncated: file holds %zu bytes, less than the %zu-byte header of an llm.c "
            "token shard",
            path, file_bytes, HEADER_BYTES);
    close(fd);
    return -1;
  }
  void *map = mmap(NULL, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd); /* the mapping keeps the file alive */
  if (map == MAP_FAILED) {
    loom__set_err(err, errlen, "%s: cannot mmap: %s", path, strerror(errno));
    return -1;
  }
  sh->map = map;
  sh->map_bytes = file_bytes;

  const int32_t *hdr = (const int32_t *)map;
  if (hdr[0] != LOOM_SHARD_MAGIC) {
    loom__set_err(err, errlen, "%s: bad magic %d (expected %d: an llm.c token shard)", path,
            (int)hdr[0], LOOM_SHARD_MAGIC);
    return -1;
  }
  if (hdr[1] != LOOM_SHARD_VERSION) {
    loom__set_err(err, errlen, "%s: unsupported version %d (expected %d)", path, (int)hdr[1],
            LOOM_SHARD_VERSION);
    return -1;
  }
  if (hdr[2] < 0) {
    loom__set_err(err, errlen, "%s: bad header: negative token count %d", path, (int)hdr[2]);
    return -1;
  }
  size_t n_tokens = (size_t)hdr[2];
  size_t body = file_bytes - HEADER_BYTES;
  size_t held = body / sizeof(uint16_t);
  if (held < n_tokens) {
    loom__set_err(err, errlen, "%s: truncated: header says %zu tokens, file holds %zu", path, n_tokens,
            held);
    return -1;
  }
  if (body != n_tokens * sizeof(uint16_t)) {
    loom__set_err(err, errlen, "%s: size mismatch: header says %zu tokens, file holds %zu bytes after "
            "the header (%zu tokens%s)", path, n_tokens, body, held,
            body % 2 ? " and a stray byte" : "");
    return -1;
  }
  sh->n_tokens = n_tokens;
  sh->tokens = (uint16_t *)((char *)map + HEADER_BYTES);

  for (size_t i = 0; i < n_tokens; i++) {
    if (sh->tokens[i] >= vocab_size) {
      loom__set_err(err, errlen, "%s: token %u at position %zu >= vocab_size %d", path,
              (unsigned)sh->tokens[i], i, vocab_size);
      return -1;
    }
  }
  if (n_tokens < (size_t)T + 1) {
    loom__set_err(err, errlen,
            "%s: shard holds %zu tokens, fewer than T+1 = %d (one sequence of T = %d)", path,
            n_tokens, T + 1, T);
    return -1;
  }
  sh->n_seqs = (n_tokens - 1) / (size_t)T;
  return 0;
}

/* glob's error callback has no user pointer: the failing directory is kept here (start-up is
 * single-threaded; the loader is opened once per data set). */
static _Thread_local char glob_failed_path[512];
static _Thread_local int glob_failed_errno;

static int on_glob_error(const char *epath, int eerrno) {
  snprintf(glob_failed_path, sizeof glob_failed_path, "%s", epath);
  glob_failed_errno = eerrno;
  return 1; /* stop: GLOB_ERR */
}

/* Nothing matched: say what is missing (the directory, or only the files) and what makes them. */
static void no_match_error(const char *pattern, char *err, size_t errlen) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s", pattern);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  struct stat st;
  int plain_dir = slash && slash != dir && !strpbrk(dir, "*?[");
  if (plain_dir && stat(dir, &st) != 0)
    loom__set_err(err, errlen, "no files match '%s': directory %s does not exist; token shards are "
            "made by tools/main_job.sh (README command 1, into data/) or by "
            "`build/bin/loom-prepare --out %s TEXT...`", pattern, dir, dir);
  else if (plain_dir && !S_ISDIR(st.st_mode))
    loom__set_err(err, errlen, "no files match '%s': %s is not a directory", pattern, dir);
  else
    loom__set_err(err, errlen, "no files match '%s'; token shards are made by tools/main_job.sh "
            "(README) or by `build/bin/loom-prepare --out DIR TEXT...`", pattern);
}

int loom_loader_open(loom_loader *ld, const char *pattern, int T, int vocab_size, char *err,
                     size_t errlen) {
  memset(ld, 0, sizeof(*ld));
  if (!pattern || !*pattern) {
    loom__set_err(err, errlen, "no shard pattern given");
    return -1;
  }
  if (T < 1) {
    loom__set_err(err, errlen, "%s: sequence length T = %d (must be >= 1)", pattern, T);
    return -1;
  }
  if (vocab_size < 1 || vocab_size > 65536) {
    loom__set_err(err, errlen, "%s: vocab_size %d does not fit uint16 tokens (1..65536)", pattern,
            vocab_size);
    return -1;
  }
  glob_t g;
  glob_failed_path[0] = '\0';
  int rc = glob(pattern, GLOB_ERR, on_glob_error, &g);
  if (rc == GLOB_NOMATCH || (rc == GLOB_ABORTED && glob_failed_errno == ENOENT)) {
    if (rc != GLOB_NOMATCH) globfree(&g);
    no_match_error(pattern, err, errlen);
    return -1;
  }
  if (rc != 0) {
    if (rc == GLOB_NOSPACE)
      loom__set_err(err, errlen, "'%s': out of memory while matching", pattern);
    else
      loom__set_err(err, errlen, "'%s': cannot read directory %s: %s", pattern,
              glob_failed_path[0] ? glob_failed_path : "(unknown)", strerror(glob_failed_errno));
    globfree(&g);
    return -1;
  }
  /* sorted by byte value, whatever the locale's collation says */
  qsort(g.gl_pathv, g.gl_pathc, sizeof(char *), cmp_str);

  ld->shards = calloc(g.gl_pathc, sizeof(loom_shard));
  if (!ld->shards) {
    loom__set_err(err, errlen, "'%s': out of memory", pattern);
    globfree(&g);
    return -1;
  }
  ld->T = T;
  ld->vocab_size = vocab_size;
  for (size_t i = 0; i < g.gl_pathc; i++) {
    loom_shard *sh = &ld->shards[i];
    int ok = shard_open(sh, g.gl_pathv[i], T, vocab_size, err, errlen);
    ld->n_shards = (int)i + 1; /* so close() releases this one too */
    if (ok != 0) {
      globfree(&g);
      loom_loader_close(ld);
      return -1;
    }
    sh->first_seq = ld->n_seqs;
    ld->n_seqs += sh->n_seqs;
  }
  globfree(&g);
  ld->cursor = 0;
  return 0;
}

const char *loom_shard_fingerprint(loom_shard *sh) {
  if (!sh->fingerprint[0])
    snprintf(sh->fingerprint, sizeof sh->fingerprint, "crc64:%016llx",
             (unsigned long long)crc64_ecma_refl(0, (const unsigned char *)sh->tokens,
                                                 (uint64_t)sh->n_tokens * sizeof(uint16_t)));
  return sh->fingerprint;
}

void loom_loader_close(loom_loader *ld) {
  if (!ld) return;
  for (int i = 0; i < ld->n_shards; i++) shard_unmap(&ld->shards[i]);
  free(ld->shards);
  memset(ld, 0, sizeof(*ld));
}

/* The shard holding epoch position s: the last one with first_seq <= s. */
static const loom_shard *find_shard(const loom_loader *ld, size_t s) {
  int lo = 0, hi = ld->n_shards - 1;
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (ld->shards[mid].first_seq <= s) lo = mid;
    else hi = mid - 1;
  }
  return &ld->shards[lo];
}

void loom_loader_fill(const loom_loader *ld, int B, int dp, int m, int r, int32_t *inputs,
                      int32_t *targets) {
  const int T = ld->T;
  const uint64_t base = ld->cursor + ((uint64_t)m * (uint64_t)dp + (uint64_t)r) * (uint64_t)B;
  for (int b = 0; b < B; b++) {
    size_t s = (size_t)((base + (uint64_t)b) % ld->n_seqs);
    const loom_shard *sh = find_shard(ld, s);
    const uint16_t *seq = sh->tokens + (s - sh->first_seq) * (size_t)T; /* T+1 tokens */
    int32_t *inp = inputs + (size_t)b * T;
    int32_t *tgt = targets + (size_t)b * T;
    for (int t = 0; t < T; t++) {
      inp[t] = seq[t];
      tgt[t] = seq[t + 1];
    }
  }
}

void loom_loader_advance(loom_loader *ld, uint64_t G) { ld->cursor += G; }

void loom_loader_seq_position(const loom_loader *ld, uint64_t k, loom_data_pos *pos) {
  size_t s = (size_t)(k % ld->n_seqs);
  const loom_shard *sh = find_shard(ld, s);
  pos->epoch = k / ld->n_seqs;
  pos->shard = (int)(sh - ld->shards);
  pos->token = (uint64_t)(s - sh->first_seq) * (uint64_t)ld->T;
}

void loom_loader_position(const loom_loader *ld, loom_data_pos *pos) {
  loom_loader_seq_position(ld, ld->cursor, pos);
}

void loom_loader_seek(loom_loader *ld, const loom_data_pos *pos, uint64_t *skipped) {
  const loom_shard *sh = &ld->shards[pos->shard];
  const uint64_t T = (uint64_t)ld->T;
  uint64_t i = (pos->token + T - 1) / T; /* the first sequence starting at or after it */
  if (skipped) *skipped = 0;
  if (i < sh->n_seqs) {
    if (skipped) *skipped = i * T - pos->token;
    ld->cursor = pos->epoch * ld->n_seqs + sh->first_seq + i;
  } else { /* the shard's tail is shorter than a sequence: on to the next shard */
    ld->cursor = pos->epoch * ld->n_seqs + sh->first_seq + sh->n_seqs;
  }
}

int loom_shard_write(const char *path, const uint16_t *tokens, size_t n_tokens, char *err,
                     size_t errlen) {
  if (n_tokens > (size_t)INT32_MAX) {
    loom__set_err(err, errlen, "%s: %zu tokens do not fit the int32 count of an llm.c shard", path,
            n_tokens);
    return -1;
  }
  int32_t hdr[LOOM_SHARD_HEADER_INTS] = {0};
  hdr[0] = LOOM_SHARD_MAGIC;
  hdr[1] = LOOM_SHARD_VERSION;
  hdr[2] = (int32_t)n_tokens;
  const void *parts[2] = {hdr, tokens};
  size_t lens[2] = {sizeof hdr, n_tokens * sizeof(uint16_t)};
  return loom__write_file_atomic(path, parts, lens, 2, err, errlen);
}
