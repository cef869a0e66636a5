/* The core's checkpoint metadata document (meta in the manifest): what gives the saved numbers
 * their meaning, parsed as untrusted input. Every field is type- and range-checked here, once,
 * so the resume code reads plain C values (tests/unit/check_ckpt_fuzz.c mutates it).
 *
 * Format "loom-checkpoint-2" (JSON object):
 *   step, world_size, dp, tp, pp          ints; stages: [{first_unit, last_unit}] under pp > 1
 *   model {vocab_size, padded_vocab_size, context_length, n_layer, n_head, n_embd}
 *        the resolved model keys; padded_vocab_size (wte's rows, >= vocab_size) is absent in
 *        checkpoints before it: then wte's rows in `tensors` (stage 0's under pp > 1), or
 *        vocab_size (unpadded) where no table says
 *   tokenizer {type, vocab_size, fingerprint}   fingerprint: FNV-1a 64 of the vocabulary file's
 *                                               canonical JSON, 16 hex digits
 *   data {units: "tokens", pattern, seq_len, micro_batch_size, grad_accum_steps, global_batch,
 *         epoch, shard_index, shard, shard_tokens, token}
 *        the position: `token` is the offset in shard `shard` (index shard_index, shard_tokens
 *        long) of the first token not yet used as input, in epoch `epoch`; optional (absent in
 *        checkpoints before them): fingerprint (that shard's content, loom_shard_fingerprint)
 *        and segment {step, cursor, stream_sequences}: since step `step` the run read with
 *        these data, seq_len and global_batch, from sequence number `cursor` of a stream of
 *        `stream_sequences` sequences, so the position must be sequence cursor + (step -
 *        segment.step) x global_batch of that stream
 *   schedule {steps, horizon, warmup_steps, decay, lr, min_lr, last_lr}
 *        horizon: the step the cosine reaches min_lr (lr_schedule.decay_steps or train.steps);
 *        last_lr: the lr step `step` ran at (the schedule counts steps taken: step - skipped_steps)
 *   optimizer {beta1, beta2, eps, weight_decay, grad_clip}, seed, precision_plugin
 *   precision (the precision plugin's state or null: fp16's loss scaler), skipped_steps
 *        (optional int in [0, step]: steps skipped on gradient overflow), config (as loaded),
 *   tensors (the tensor table, tools only), items (optional: "global" when the items are one per
 *        global tensor and state kind, "params/h.0.attn.qkv.weight", each chunk a slice of it,
 *        which any mesh can load; absent or "per-rank" in checkpoints before it: flat items per
 *        tp rank and stage, "params@pp0of2@tp1of2", loadable by the same tp and pp only) */
#ifndef LOOM_CORE_CKPT_META_H
#define LOOM_CORE_CKPT_META_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define LOOM_CKPT_META_FORMAT "loom-checkpoint-2"

typedef struct loom_ckpt_meta {
  json_t *root; /* owned; the borrowed pointers below live in it */
  int step, world_size, dp, tp, pp;
  json_t *stages; /* pp > 1: array of pp objects with int first_unit, last_unit; else NULL */
  struct { int vocab_size, padded_vocab_size, context_length, n_layer, n_head, n_embd; } model;
  struct { int type, vocab_size; const char *fingerprint; } tokenizer;
  struct {
    const char *pattern, *shard;
    int seq_len, micro_batch_size, grad_accum_steps, shard_index;
    uint64_t global_batch, epoch, shard_tokens, token;
    const char *fingerprint; /* NULL when absent */
    int has_segment;         /* segment_* below are set */
    int segment_step;
    uint64_t segment_cursor, segment_stream;
  } data;
  struct {
    int steps, horizon, warmup_steps, cosine;
    double lr, min_lr, last_lr;
  } schedule;
  struct { double beta1, beta2, eps, weight_decay, grad_clip; } optimizer;
  uint64_t seed;
  const char *precision_plugin;
  json_t *precision; /* the precision plugin's state: an object, or NULL */
  int skipped_steps; /* steps skipped on gradient overflow (optional key; 0 when absent) */
  int global_items;  /* 1: items are global tensors' slices (any mesh loads them); 0: per rank */
} loom_ckpt_meta;

/* Parse and check `text`. Returns 0, or -1 with err naming the field and what was expected
 * ("data.token: expected an integer in [0, 4611686018427387904], got a string"); *m is then
 * empty (nothing to free). */
int loom__ckpt_meta_parse(const char *text, loom_ckpt_meta *m, char *err, size_t errlen);
void loom__ckpt_meta_free(loom_ckpt_meta *m);

/* FNV-1a 64 of n bytes, as 16 hex digits into out[17]. */
void loom__fnv1a_hex(const void *data, size_t n, char out[17]);

#endif
