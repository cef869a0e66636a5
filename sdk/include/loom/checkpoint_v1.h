/* loom ABI v1 — checkpoint plugins.
 *
 * The host describes the training state as a list of items — flat tensors that may be split
 * into chunks across ranks (PyTorch DCP's idea: each chunk carries its offset into the global
 * tensor, which is what makes save-on-N / load-on-M possible) — plus a JSON metadata document
 * (same on every rank: step, config, lr schedule, data cursor, loss scaler) and a per-rank blob
 * (that rank's RNG). The plugin decides where and how bytes are stored, and when to save. */
#ifndef LOOM_CHECKPOINT_V1_H
#define LOOM_CHECKPOINT_V1_H

#include "host_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One chunk of a logical flat tensor held by this rank. */
typedef struct loom_ckpt_item_v1 {
  uint32_t struct_size;
  const char *name;      /* logical tensor: "params", "optim.m", "optim.v", ... */
  loom_dtype dtype;
  uint64_t global_numel; /* elements of the whole logical tensor */
  uint64_t offset;       /* first element of this chunk within it */
  uint64_t count;        /* elements in this chunk */
  void *data;            /* device memory of the chunk (read on save, written on load) */
  int writer;            /* save: 1 if this rank writes the chunk (replicas: exactly one does) */
} loom_ckpt_item_v1;

typedef struct loom_ckpt_state_v1 {
  uint32_t struct_size;
  int step;                   /* optimizer steps completed */
  int n_items;
  loom_ckpt_item_v1 *items;
  const char *meta_json;      /* save: host metadata, identical on every rank */
  void *rank_blob;            /* this rank's private state (RNG); save reads, load fills */
  size_t rank_blob_bytes;
} loom_ckpt_state_v1;

/* Caps */
#define LOOM_CKPT_CAP_RESHARD (1u << 0) /* can load chunks saved by a different world size */

typedef struct loom_checkpoint_v1 {
  loom_plugin_header hdr;

  int (*create)(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                void **ctx);
  void (*destroy)(void *ctx);

  /* 1 if the host should save after optimizer step `step` (last = 1 on the final step). */
  int (*should_save)(void *ctx, int step, int last);
  /* Collective: every rank calls it with its items. The checkpoint appears whole or not at
   * all (write elsewhere, then publish atomically). */
  int (*save)(void *ctx, const loom_ckpt_state_v1 *state);
  /* Collective: the step to resume from, or 0 when there is none / resuming is off. */
  int (*resume_step)(void *ctx, int *step);
  /* Collective: load checkpoint `step` into the items' buffers (every chunk this rank asks for,
   * from whichever ranks wrote it) and the rank blob. *meta_json gets the saved metadata (owned
   * by the plugin, valid until the next call or destroy). Errors: LOOM_CORRUPT (checksum or
   * shape mismatch, named), LOOM_IO. */
  int (*load)(void *ctx, int step, loom_ckpt_state_v1 *state, const char **meta_json);
} loom_checkpoint_v1;

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CHECKPOINT_V1_H */
