/* The GPT-2 tensor layouts loom exchanges with other tools, and the map between a global
 * tensor and one rank's local piece of it.
 *
 * Legend: V = vocab_size, Vp = V padded up to a multiple of 128 (llm.c), maxT = context
 * length, L = layers, C = n_embd. loom stores 2-D weights (out, in) like torch.nn.Linear and
 * llm.c; Hugging Face's GPT-2 uses Conv1D, whose weights are (in, out): c_attn (C, 3C), c_proj
 * (C, C), c_fc (C, 4C), mlp.c_proj (4C, C). Embeddings (wte (V, C), wpe (maxT, C)) are the same
 * everywhere. */
#ifndef LOOM_CORE_EXPORT_GPT2_LAYOUT_H
#define LOOM_CORE_EXPORT_GPT2_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"

#define LOOM_LLMC_MAGIC 20240326 /* llm.c's model file (train_gpt2.c, gpt2_build_from_checkpoint) */
#define LOOM_LLMC_VERSION 3      /* fp32 parameters */
#define LOOM_LLMC_HEADER_INTS 256

/* The whole model's parameter table (one rank, no tensor or pipeline split, no storage) for
 * these dimensions: names, roles and global shapes in loom's flat order. Returns 0, or -1
 * with why in err (dimensions gpt_init refuses). Free with gpt_free. */
int loom__gpt2_table(gpt_model *m, int vocab_size, int context_length, int n_layer, int n_head,
                     int n_embd, char *err, size_t errlen);

/* llm.c's padded vocabulary: V rounded up to a multiple of 128 (50257 -> 50304). */
int loom__llmc_padded_vocab(int vocab_size);

/* Hugging Face GPT-2's name of loom tensor `p` ("h.3.attn.c_attn.weight") into out, and
 * whether HF stores it transposed ((in, out), Conv1D). */
void loom__hf_name(const gpt_param *p, char *out, size_t n, int *transposed);

/* The layer of a block tensor (0..L-1), -1 for embeddings and ln_f. */
int loom__param_layer(const gpt_param *p);

/* Where global element (r, c) of `p` lives in tensor-parallel rank tp_rank's local piece
 * (row-major, p->lshape as gpt_init_ex computes it for tp), or -1 when another rank holds
 * it; split_dim / split_parts as in gpt_param. The same map gpt.c's initialisation uses. */
int64_t loom__tp_local_index(int64_t rows, int64_t cols, int split_dim, int split_parts, int tp,
                             int tp_rank, int64_t r, int64_t c);

#endif
