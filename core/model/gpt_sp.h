/* Sequence parallel (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
 * Transformer Models", §4.2.2): the communication and layout helpers gpt.c's block, embedding
 * and head call under gpt_config.sequence_parallel.
 *
 * Layout: a sequence-parallel activation is the rank's (B, T/tp, C) shard, rank r holding
 * positions [r*T/tp, (r+1)*T/tp) of each of the B sequences, contiguous; a full one is the
 * ordinary (B, T, C). The comm's all-gather and reduce-scatter move rank-major blocks, so for
 * B > 1 the full tensor is staged as (tp, B, T/tp, C) and permuted (B*tp device copies of
 * T/tp*C floats; none for B = 1). All buffers are fp32 device memory. */
#ifndef LOOM_CORE_GPT_SP_H
#define LOOM_CORE_GPT_SP_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"

/* 1 when a forward at sequence length T runs sequence parallel: the config asks for it, tp > 1
 * and T % tp == 0 (else the plain tensor-parallel path, e.g. sampling's growing window). */
int gpt_sp_on(const gpt_config *c, int T);

/* Rows of the residual region per rank at (B, T): B*T/tp under gpt_sp_on, else B*T. */
size_t gpt_sp_rows(const gpt_config *c, int B, int T);

/* full (B,T,C) = the ranks' (B,T/tp,C) shards gathered along T (Megatron's ḡ forward, g
 * backward). stage: B*T*C floats of scratch (unused for B = 1); neither aliases shard. Returns
 * LOOM_OK or the hook's error (LOOM_INVALID_USAGE without the hook). */
int gpt_sp_all_gather(gpt_model *m, const gpt_hooks *h, const float *shard, float *full,
                      float *stage);

/* shard (B,T/tp,C) = this rank's rows of the sum over tp of the ranks' partial full (B,T,C)
 * (Megatron's g forward, ḡ backward). For B > 1 full is permuted into stage first; shard
 * aliases neither. */
int gpt_sp_reduce_scatter(gpt_model *m, const gpt_hooks *h, const float *full, float *shard,
                          float *stage);

/* shard (B,T/tp,C) = this rank's rows of a full (B,T,C) that is the same on every rank (the
 * replicated head's input gradient): the backward of a gather whose output is replicated. */
void gpt_sp_take(gpt_model *m, const float *full, float *shard);

/* x (B,T/tp,C) += rows [r*T/tp, (r+1)*T/tp) of wpe (maxT, C): the shard's positions. */
void gpt_sp_add_positions(gpt_model *m, float *x, const float *wpe);

/* The embedding's shard (B,T/tp,C) = wte[ids] + wpe[t] for the rank's positions, from the
 * whole (replicated) tables: no communication (its backward gathers the gradient). */
void gpt_sp_embed_forward(gpt_model *m, float *out, const float *wte, const float *wpe);

/* The LayerNorms' weight and bias gradients from 1/tp of the rows are partial sums: for the n
 * tensors ps, gpt_sp_grads_begin points their gacc at buf (their total floats, zeroed) for
 * the unit's backward; gpt_sp_grads_end restores them, all-reduces buf over tp (tp_reduce)
 * and adds it into each gradient (accumulation-safe: only this micro-step's part is summed). */
typedef struct gpt_sp_grads {
  gpt_param *p[4];
  float *saved[4];
  int n;
  float *buf;
  size_t floats;
} gpt_sp_grads;
void gpt_sp_grads_begin(gpt_model *m, gpt_sp_grads *g, gpt_param **ps, int n, float *buf);
int gpt_sp_grads_end(gpt_model *m, const gpt_hooks *h, gpt_sp_grads *g);

/* Bytes one rank sends over tp per micro-step at (B, T) under gpt_sp_on, as the host counts
 * them (all-gather / reduce-scatter: (tp-1) x the shard's bytes; all-reduce 2(tp-1)/tp x the
 * buffer's), for n_blocks blocks of which n_recomputed are fully recomputed, with the embedding
 * and the head (one stage holds all, which sp requires); elem: bytes an activation element
 * travels in (4, or 2 under bf16/fp16). With h = one gather of a (B,T,C) activation: 10h per block (forward 2 all-gathers + 2 reduce-scatters; backward
 * 2 all-gathers, 2 reduce-scatters and the 2 regathers of the saved LayerNorm outputs), 3h per
 * recomputed block, (1 + vp)h for the embedding and for the head, the LayerNorm weight
 * gradients' all-reduces (4C floats per block, 2C for ln_f) and under vocab_parallel the row
 * statistics' (3 B*T fp64). 0 when sp is off at T. */
uint64_t gpt_sp_comm_bytes(const gpt_config *c, int B, int T, int n_blocks, int n_recomputed,
                           int elem);

#endif
