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
  /* ---- ABI 1.4 (read only when struct_size covers it; absent or NULL = flat items) ---- */
  /* The global view, for a plugin declaring LOOM_CKPT_CAP_GLOBAL_VIEW (the host sets it only
   * for such a plugin): n_items slice descriptors, element i describing items[i]; index with
   * LOOM_CKPT_SLICE_AT. With it, item i is the element range [offset, offset + count) of one
   * rank's slice of the global tensor `name` (row-major, the slice's own layout), and
   * global_numel is the global tensor's element count; a load may ask for any slice of a
   * tensor saved under any other slicing, and the plugin reassembles it (the host, not the
   * plugin, knows which slice each rank of a new mesh needs). */
  const struct loom_ckpt_slice_v1 *slices;
} loom_ckpt_state_v1;

/* Which part of a global tensor an item holds (ABI 1.4). Tensor-parallel slicing of a 1-D or
 * 2-D tensor of global `shape`: split_dim (0 rows, 1 columns) is cut into split_parts equal
 * blocks (attn.qkv: 3 — q, k, v), and each block into split_size equal slices; slice
 * split_index holds slice split_index of every block, blocks in order, row-major. split_dim
 * -1 (or split_size 1) is the whole tensor. Example: qkv.weight (3C, C), split_dim 0,
 * split_parts 3, split_size 2, split_index 1 holds rows [C/2, C), [3C/2, 2C), [5C/2, 3C). */
typedef struct loom_ckpt_slice_v1 {
  uint32_t struct_size;
  int ndim;          /* 1 or 2 */
  int64_t shape[4];  /* the global shape; its product is the item's global_numel */
  int split_dim;     /* -1 whole tensor, else 0 or 1 (< ndim) */
  int split_parts;   /* >= 1; shape[split_dim] divisible by split_parts * split_size */
  int split_index;   /* 0 .. split_size - 1 */
  int split_size;    /* >= 1 (the tensor-parallel size the slice was cut for) */
} loom_ckpt_slice_v1;

/* Element i of state->slices; the host's struct_size is the stride (a later minor may append
 * fields). */
#define LOOM_CKPT_SLICE_AT(state, i)                                                    \
  ((const loom_ckpt_slice_v1 *)((const char *)(state)->slices +                       \
                                (size_t)(i) * (state)->slices[0].struct_size))

/* Whether a state struct from this host carries the global view (ABI 1.4). */
#define LOOM_CKPT_HAS_SLICES(state)                                                     \
  ((state)->struct_size >= offsetof(loom_ckpt_state_v1, slices) + sizeof(void *) &&    \
   (state)->slices != NULL)

/* Caps */
#define LOOM_CKPT_CAP_RESHARD (1u << 0) /* can load chunks saved by a different world size */
/* ABI 1.4: understands loom_ckpt_state_v1.slices — loads any slice of a tensor saved under
 * another tensor-parallel slicing, stage split or partition (cross-mesh resume). Without it the
 * host names items per tp rank and stage ("params@pp0of2@tp1of2") and refuses a resume on
 * another tp or pp size. */
#define LOOM_CKPT_CAP_GLOBAL_VIEW (1u << 1)

/* ---- ABI 1.6: reading a checkpoint outside a job ---- */
/* What a reader says about the checkpoint step it selected (reader_select). Strings are owned
 * by the reader and valid until the next reader_select or reader_close. */
typedef struct loom_ckpt_info_v1 {
  uint32_t struct_size;  /* the host's sizeof; a plugin fills only the fields it covers */
  int step;              /* the step selected */
  const char *where;     /* where that step lies, for messages and records
                            ("runs/x/ckpt/step-00000100", a URL); never NULL */
  const char *meta_json; /* the host's metadata as saved (loom_ckpt_state_v1.meta_json) */
  int n_tensors;         /* saved tensors, for reader_tensor */
} loom_ckpt_info_v1;

/* One saved tensor as a whole, however many ranks wrote pieces of it and under whichever
 * slicing. Its name is the item name it was saved under: "KIND/TENSOR" for the global view
 * ("params/wte", "optim.m/h.0.attn.qkv.weight"), "KIND" or "KIND@..." for a flat item
 * ("params", "params@pp1of2@tp0of2"); KIND (the state kind: "params", "optim.m", ...) is the
 * name up to the first '/' or '@' (loom_ckpt_kind_len). */
typedef struct loom_ckpt_tensor_v1 {
  uint32_t struct_size;
  const char *name;  /* owned by the reader, valid until the next reader_select or close */
  loom_dtype dtype;  /* as saved */
  uint64_t numel;    /* elements of the whole tensor */
  int ndim;          /* 1 or 2: the global shape saved with it (a flat item: 1, {numel}) */
  int64_t shape[4];
} loom_ckpt_tensor_v1;

/* The length of the state kind at the start of a saved tensor's name ("optim.m/wte": 7). */
static inline size_t loom_ckpt_kind_len(const char *name) {
  size_t n = 0;
  while (name[n] && name[n] != '/' && name[n] != '@') n++;
  return n;
}

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

  /* ---- ABI 1.6 (each slot NULL when the plugin's struct_size does not cover it) ---- */
  /* Where this instance keeps its checkpoints, for people ("runs/x/ckpt", a URL): the host
   * prints it when the run ends. Owned by the plugin, valid until destroy. A NULL slot or
   * result: the host says "see the checkpoint plugin's options". */
  const char *(*where)(void *ctx);

  /* The reader: a command (loom export, any tool) opens a checkpoint with no job — no ranks,
   * no communicators, no device — and reads its tensors into host memory. Nothing is created,
   * locked or written. The `host` passed to reader_open answers log, set_error and the option
   * getters only (api->rank, comm, device and the collectives must not be called on it) and
   * outlives the reader; every error is a message set on it. All reader slots come together:
   * a plugin with reader_open NULL cannot be read by loom export ("has no reader").
   *
   * Open the checkpoints at `path` as the user named them (whatever the plugin accepts: a run
   * directory, a checkpoint directory, one step's directory, a URL), or, path NULL, where
   * `opts` (the plugin's options from a config's checkpoint section; may be empty) say. Only
   * finds them: reader_select reads. *reader: the plugin's handle. Errors: LOOM_IO (nothing
   * there: say what was expected), LOOM_INVALID_CONFIG (options). */
  int (*reader_open)(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                     const char *path, void **reader);
  void (*reader_close)(void *reader);
  /* The steps with a complete checkpoint, ascending: the first min(*n, max) into steps[],
   * their count into *n (path naming one step: that one). */
  int (*reader_steps)(void *reader, int *steps, int max, int *n);
  /* Select and verify checkpoint `step` (0: the newest complete one, the one a resume would
   * take; when it fails verification that is the error, never a fall-back to an older one),
   * and describe it in *info (the host sets info->struct_size). Errors: LOOM_CORRUPT
   * (checksums, fields: named), LOOM_IO, LOOM_INVALID_USAGE (no such step). */
  int (*reader_select)(void *reader, int step, loom_ckpt_info_v1 *info);
  /* Saved tensor i (0 .. info.n_tensors - 1) of the selected step into *out (the host sets
   * out->struct_size). */
  int (*reader_tensor)(void *reader, int i, loom_ckpt_tensor_v1 *out);
  /* Elements [first, first + count) of saved tensor `name` — row-major over its global shape,
   * whatever slicing or ranks wrote it — into host memory `dst` in the saved dtype
   * (count * dtype size bytes), each byte verified as the plugin verifies a load. Errors:
   * LOOM_INVALID_USAGE (no such tensor, range past its end), LOOM_CORRUPT (a checksum, a
   * missing piece), LOOM_IO. */
  int (*reader_read)(void *reader, const char *name, uint64_t first, uint64_t count,
                     void *dst);
} loom_checkpoint_v1;

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CHECKPOINT_V1_H */
