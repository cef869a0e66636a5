/* Token shards in llm.c's format and a deterministic, resumable data loader.
 *
 * Shard file: a header of 256 int32 (magic 20240520, version 1, token count, rest 0) followed by
 * `token count` uint16 tokens.
 *
 * Sequences: the shards matched by a glob, sorted by name, are one token stream. Sequence k
 * (k = 0, 1, ...) is tokens [k*T, k*T + T] (T+1 tokens: inputs are the first T, targets the last
 * T), cut from within one shard (a shard contributes floor((ntok-1)/T) sequences); the stream
 * wraps around at its end (a new epoch).
 *
 * Global batches: optimizer step s consumes G = B * accum * dp consecutive sequences starting at
 * the cursor. The sequence for (micro-step m, data-parallel rank r, row b) is number
 * cursor + (m*dp + r)*B + b, so every data-parallel size and accumulation split of the same G
 * sees the same G sequences (what the equivalence tests rely on). */
#ifndef LOOM_CORE_SHARDS_H
#define LOOM_CORE_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#define LOOM_SHARD_MAGIC 20240520
#define LOOM_SHARD_VERSION 1
#define LOOM_SHARD_HEADER_INTS 256

typedef struct loom_shard {
  char *path;
  size_t n_tokens;
  size_t n_seqs;       /* sequences of length T this shard contributes */
  size_t first_seq;    /* index of its first sequence in the stream */
  uint16_t *tokens;    /* mmap'ed or read tokens (n_tokens) */
  void *map; size_t map_bytes; /* mmap bookkeeping */
  char fingerprint[24]; /* "crc64:" + 16 hex digits once loom_shard_fingerprint computed it */
} loom_shard;

typedef struct loom_loader {
  int T;
  int n_shards;
  loom_shard *shards;
  size_t n_seqs;        /* sequences per epoch (sum over shards) */
  uint64_t cursor;      /* next sequence number (monotonic; modulo n_seqs picks it) */
  int vocab_size;       /* for validation of token ids; tokens >= vocab_size are an error */
} loom_loader;

/* Open every shard matching `pattern` (glob), validate headers and sizes, and set the cursor to
 * 0. Returns 0, or -1 with a message naming the file and what is wrong (no match, bad magic,
 * truncated, token >= vocab_size, shard shorter than T+1 tokens). */
int loom_loader_open(loom_loader *ld, const char *pattern, int T, int vocab_size, char *err,
                     size_t errlen);
void loom_loader_close(loom_loader *ld);

/* Fill inputs and targets (each B*T int32, host memory) for (micro m, dp rank r) of the global
 * batch that starts at the cursor, per the rule above. Does not move the cursor. */
void loom_loader_fill(const loom_loader *ld, int B, int dp, int m, int r, int32_t *inputs,
                      int32_t *targets);
/* Move the cursor past one global batch of G sequences. */
void loom_loader_advance(loom_loader *ld, uint64_t G);

/* A data position in units that survive a change of sequence length or world size: the
 * epoch, the shard, and the offset in that shard of the first token no sequence has used as
 * input yet. This is what checkpoints keep (the sequence cursor alone means different tokens
 * under another T). */
typedef struct loom_data_pos {
  uint64_t epoch;
  int shard;      /* index into loom_loader.shards (sorted by name) */
  uint64_t token; /* token offset in that shard */
} loom_data_pos;

/* The position of the cursor. */
void loom_loader_position(const loom_loader *ld, loom_data_pos *pos);
/* The position of sequence number k (k = cursor + i for the i-th sequence of a batch). */
void loom_loader_seq_position(const loom_loader *ld, uint64_t k, loom_data_pos *pos);
/* Move the cursor to the first sequence of this loader's T that starts at or after `pos`: with
 * the T the position was taken with, exactly that sequence; with another T, the next one on
 * the new T's grid, and *skipped (may be NULL) gets the tokens between pos and its start
 * (0 when pos->token is a multiple of T, as after a change 64 -> 32). A position at or past
 * the shard's last sequence moves to the next shard (after the last: the next epoch), like the
 * uninterrupted stream. pos->shard must be a valid index. */
void loom_loader_seek(loom_loader *ld, const loom_data_pos *pos, uint64_t *skipped);

/* The shard's content fingerprint, "crc64:<16 hex digits>": CRC-64/ECMA-182 (reflected,
 * ISA-L's crc64_ecma_refl) of its token bytes, computed on the first call (a pass over the
 * mapped tokens: ~0.1 s per 100 M tokens) and kept. What a checkpoint records of the shard its
 * data position points into, so that a shard rewritten with the same name and size is told
 * apart from the one the run read. The string lives as long as the loader. */
const char *loom_shard_fingerprint(loom_shard *sh);

/* Write a shard file (header + tokens); used by loom-prepare and tests. Writes to a temporary
 * name and renames. Returns 0 or -1 with a message. */
int loom_shard_write(const char *path, const uint16_t *tokens, size_t n_tokens, char *err,
                     size_t errlen);

#endif
