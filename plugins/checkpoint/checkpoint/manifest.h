/* The checkpoint manifest as untrusted input: its checksum file and the type and range of every
 * field the loader uses, checked once before any of them is read (so a renamed key, a wrong
 * type or a huge number is a message, never a crash or an out-of-range read). */
#ifndef LOOM_CKPT_MANIFEST_H
#define LOOM_CKPT_MANIFEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "slice.h"

/* Format 3 (written): every chunk says which slice of which global tensor it holds ("shape",
 * "split_dim", "split_parts", "split_index", "split_size"; offset and count are in the slice's
 * own layout). Format 2 (still read): chunks are flat ranges of a flat item, offset and count
 * global. */
#define CKPT_MANIFEST_FORMAT "loom-checkpoint-3"
#define CKPT_MANIFEST_FORMAT_FLAT "loom-checkpoint-2"
#define CKPT_MAX_WORLD (1 << 20)            /* ranks a manifest may describe */
#define CKPT_MAX_BLOB_BYTES (1 << 20)       /* a rank's private blob (RNG streams) */
#define CKPT_MAX_ELEMENTS (INT64_C(1) << 50) /* elements of one logical tensor */
#define CKPT_MAX_OFFSET (INT64_C(1) << 62)  /* byte offsets inside a shard file */
#define CKPT_MAX_MANIFEST_BYTES (256u << 20)

/* The shard file name of `rank` ("rank-00001.bin") into out[32]. */
void ckpt_shard_name(char out[32], int rank);

/* The step of a directory named exactly "step-%08d", or -1 (".tmp-step-…", "step-5x", …). */
int ckpt_step_of(const char *name);

/* Parse the checksum file's text ("%08x" and an optional newline, nothing else) into *crc.
 * 0, or -1 when it is anything else. */
int ckpt_parse_crc_text(const char *text, size_t len, uint32_t *crc);

/* The slice a chunk of a checked manifest holds (a format-2 chunk: the whole flat tensor). */
void ckpt_chunk_slice(json_t *chunk, ckpt_slice *out);

/* Check the parsed manifest `man` of checkpoint `step`: format, step, world_size (1 ..
 * CKPT_MAX_WORLD), meta (an object), and one shard per rank with its chunks and blob fields,
 * every field of the right type and range and every chunk's file the shard's own; format 3:
 * every chunk's slice well formed (slice.h), its shape's product its global_numel, and its
 * offset and count inside the slice. Returns 0,
 * or -1 with why[] naming the field ("shards[1].chunks[0].count: expected an integer in
 * [0, 1024], got -5"). */
int ckpt_manifest_check(json_t *man, int step, char *why, size_t whylen);

#endif
