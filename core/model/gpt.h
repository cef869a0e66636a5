/* GPT-2 model: parameters, activations, forward and backward, on any device backend.
 *
 * Legend: B = micro-batch, T = sequence length (<= max_seq_len), C = n_embd, NH = n_head,
 * L = n_layer, V = vocab_size, N = B*T.
 *
 * The model is split into units, the granularity at which parallel plugins hook in:
 *   unit 0        embedding: wte (V,C), wpe (maxT,C)
 *   unit 1..L     transformer block l-1
 *   unit L+1      head: final LayerNorm; logits use the tied wte; cross-entropy loss
 * Parameters live in one flat fp32 buffer laid out unit by unit (the order of
 * gpt_param_table below), so a unit's parameters — and its gradients — are one contiguous
 * range [unit_offset[u], unit_offset[u+1]). Backward visits units in reverse, so after unit u's
 * backward every gradient at offset >= unit_offset[u] is final for the micro-step: this is what
 * lets DDP launch gradient buckets during backward.
 *
 * The tied embedding: wte belongs to unit 0 but the head (unit L+1) reads it for the logits and
 * adds into its gradient, so wte's gradient is final only after unit 0's backward (which the
 * layout rule above already implies); a plugin that releases parameters between units (ZeRO-3)
 * must keep wte available for the head, and a pipeline must sum wte's gradient between the first
 * and the last stage.
 *
 * Gradient contract: backward ACCUMULATES (+=) into the gradient buffer, so gradient
 * accumulation over micro-steps is free; gpt_zero_grad clears it. */
#ifndef LOOM_CORE_GPT_H
#define LOOM_CORE_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "../device/device.h"

#define GPT_MAX_CHUNKS 16 /* model chunks per pipeline rank (gpt_config.pp_chunks) */

typedef struct gpt_config {
  int vocab_size;  /* V: token ids and targets are < V */
  int max_seq_len; /* maximum T (size of wpe) */
  int n_layer;     /* L */
  int n_head;      /* NH; n_embd % n_head == 0 */
  int n_embd;      /* C */
  /* Tensor parallel (Megatron-LM, Shoeybi et al. 2019, §3): this rank holds 1/tp_size of every
   * block's qkv, attn.proj, mlp.fc and mlp.proj (heads [tp_rank*NH/tp, (tp_rank+1)*NH/tp) and
   * the matching 4C/tp hidden units); 0 means 1 (no split). n_head % tp_size == 0. */
  int tp_size;
  int tp_rank;
  /* Pipeline parallel: this rank's stage holds units [pp_first, pp_end) only (contiguous;
   * unit 0 embedding, 1..L blocks, L+1 head). pp_end 0 means up to the head (0, 0: the whole
   * model). A stage that holds
   * the head but not the embedding keeps a copy of the tied wte (gpt_param.tied_copy) at the
   * end of its flat buffer: the host sums its gradient with the first stage's. */
  int pp_first;
  int pp_end;
  /* Interleaved pipeline (Narayanan et al. 2021, §2.2.1; gpt_chunks.c): pp_chunks v > 1 model
   * chunks on this rank, chunk k holding units [pp_chunk_first[k], pp_chunk_end[k]) in
   * ascending, disjoint ranges; pp_first/pp_end is then their hull (chunk 0's first, the last
   * chunk's end). The flat buffers hold every chunk's units in unit order (the units between
   * chunks are empty), so data parallel and AdamW see one buffer as without chunks. 0 or 1:
   * one contiguous range. */
  int pp_chunks;
  int pp_chunk_first[GPT_MAX_CHUNKS], pp_chunk_end[GPT_MAX_CHUNKS];
  /* Activation checkpointing (gpt_ckpt_policy): which blocks keep less for backward and
   * recompute the rest there. ckpt_every k >= 1 applies the policy to the blocks whose global
   * index is a multiple of k (k = 1, or 0 meaning 1: every block). */
  int ckpt_policy;
  int ckpt_every;
  /* Mixed precision (a loom_dtype; 0 = LOOM_F32): with LOOM_BF16 or LOOM_F16 the kernels see
   * 16-bit weights and store 16-bit activations and activation gradients — every value at those
   * points is rounded to the dtype (round to nearest even) while the kernels accumulate in fp32
   * (the device's round_to). The flat parameter buffer stays the fp32 master copy (what the
   * optimizer updates and ZeRO partitions); each unit's 16-bit working weights are rounded from
   * it into one shared buffer when the unit runs. Parameter gradients accumulate in fp32 from
   * the fp32 GEMM accumulators (DeepSpeed's grad_accum_dtype = fp32). The attention core
   * (scores, softmax, probabilities @ V) is one fused fp32 kernel whose output is rounded. */
  int dtype;
  /* Storage (loom_dtype; 0 = LOOM_F32), ABI 1.4's real 16-bit layout: param_dtype is the
   * element type of the flat parameter buffer (and every data view), grad_dtype that of the
   * flat gradient buffer (and every grad view). Both F32 keeps the layout above (fp32 buffers,
   * the parameter buffer being the master). With param_dtype bf16/fp16 (== dtype) the buffer
   * is 2 bytes per parameter and the optimizer's fp32 master lives outside the model (the
   * host's partition.master); each unit's fp32 working weights are widened from it (exact).
   * With grad_dtype bf16/fp16 the kernels accumulate a unit's gradients into an fp32 scratch
   * (gpt_model.gwork) that is added into the 16-bit buffer at the unit's end, rounded once
   * (the tied wte: head and embedding contributions summed in fp32, rounded at unit 0's end);
   * callers use it only with one micro-batch per step (accumulation stays fp32). */
  int param_dtype;
  int grad_dtype;
  /* Vp >= V (0 means V): rows of wte and columns of the logits. As llm.c does for GPT-2's
   * 50257 (-> 50304), a vocabulary padded to a multiple of 128 keeps the head's GEMM on aligned
   * sizes; the logits of columns V..Vp-1 get a -inf bias, so softmax gives them probability 0,
   * the loss and every gradient (their wte rows' included) are those of the unpadded model, and
   * sampling never picks them. */
  int padded_vocab_size;
  /* Saved activations under bf16/fp16 (dtype != F32): 0 (the default) stores each block's
   * saved values (ln_1, qkv, attention output, residual2, ln_2, mlp.fc, GELU) as 2 bytes per
   * element, widened into one block's fp32 scratch (gpt_model.recompute) for the kernels;
   * 1 keeps them as fp32 buffers holding the same 16-bit values (the layout before 16-bit
   * activation storage; tests compare the two bit for bit). Ignored in fp32. */
  int acts_f32;
  /* Under bf16/fp16 (dtype != F32, acts_f32 0): 1 asks for 16-bit activations end to end — every
   * activation buffer (the residual stream, LayerNorm outputs, qkv, attention output, MLP
   * hidden layer, logits, their gradients and the backward scratch) holds 2-byte elements and
   * the device's ABI 1.8 kernels (acts16) read and write them directly; fp32 stays for
   * LayerNorm's statistics, the attention probabilities, the losses and every parameter
   * gradient. Same bits as acts_f32 1 where the device's GEMMs sum in the same order. Taken only
   * for the whole model without tensor parallel (tp's region hooks and the pipeline's boundary
   * buffers carry fp32): elsewhere the saved values alone are 16-bit, as with 0. gpt_init_ex
   * refuses it on a device without acts16 for dtype. */
  int acts_typed;
  /* Attention's saved state (device ABI 1.9; config model.attention): 1 keeps the row
   * log-sum-exp lse (B,NH/tp,T) fp32 instead of the probabilities att (B,NH/tp,T,T), and the
   * backward scratch has no datt: the device's attention_forward_lse / attention_backward_lse
   * (FlashAttention-2: tiles recomputed in backward), the acts16 table's under acts_typed. The
   * 4as^2b/t term of Korthikanti et al. 2022 (Table 2) leaves every activation formula and
   * 4asb/t bytes per block (fp32 lse) come in. gpt_init_ex refuses it on a device without the
   * kernels (gpt_device_has_attn_lse); 0: the materialised kernels, on every device. */
  int attn_lse;
  /* Vocabulary parallel (Megatron-LM, Shoeybi et al. 2019, §3; tensor_parallel's
   * "vocab_parallel"), with tp_size > 1: wte (tied with the LM head) split over the padded
   * vocabulary, rank r holding rows [r*Vp/tp, (r+1)*Vp/tp) (Vp % tp == 0). The embedding looks
   * up the ids in its range (zeros elsewhere) and sums over tp (gpt_hooks.tp_reduce); the head
   * computes only its (B*T, Vp/tp) logit slice, and the cross-entropy comes from the slices:
   * the row max all-reduced (MAX), the row's sum of exponentials and the target's logit (from
   * its owner) all-reduced (SUM); backward: the slice's softmax minus the one-hot on the owner.
   * No rank holds (B*T, Vp) logits. One pipeline stage only (pp_first/pp_end 0). */
  int vocab_parallel;
  /* Sequence parallel (Korthikanti et al. 2022, §4.2.2; tensor_parallel's "sequence_parallel"),
   * with tp_size > 1, one pipeline stage: between the tensor-parallel regions the
   * residual stream, the LayerNorms' inputs, outputs and statistics (and the embedding's output,
   * ln_f's input) are sharded along T, rank r holding rows [r*T/tp, (r+1)*T/tp) of every
   * sequence, (B, T/tp, C). Megatron's g becomes a reduce-scatter along T after each
   * row-parallel matmul and f an all-gather before each column-parallel one
   * (gpt_hooks.tp_all_gather / tp_reduce_scatter); backward regathers the saved LayerNorm
   * output for the weight gradient (as Megatron does) and sums the LayerNorms' partial weight
   * gradients over tp (gpt_hooks.tp_reduce). A forward whose T is not a multiple of tp
   * (sampling's growing window) runs the plain tensor-parallel path (core/model/gpt_sp.c).
   * Under bf16/fp16 the shards hold 16-bit values in fp32 buffers (as tp's regions); the hooks
   * may carry them packed in 16 bits (the trainer's do). */
  int sequence_parallel;
  /* Context parallel (gpt_cp.h; context_parallel.so): this rank is cp_rank of cp_size ranks
   * that each hold T/cp tokens of every sequence (chunks cp_rank and 2*cp_size-1-cp_rank of
   * 2*cp_size), so forward and backward get the LOCAL T; attention runs as a ring over them
   * (gpt_hooks.cp_ring). 0 or 1: off. Needs attn_lse, fp32, one stage, no vocab_parallel. */
  int cp_size;
  int cp_rank;
} gpt_config;

/* Activation checkpointing policies (Chen et al. 2016; Korthikanti et al. 2022, §5):
 *   GPT_CKPT_NONE       every block keeps all it saves for backward;
 *   GPT_CKPT_FULL       a checkpointed block keeps only its input (the residual stream entering
 *                       it, which is the previous block's output anyway) and its backward first
 *                       reruns the block's forward into one scratch block shared by all blocks
 *                       and all micro-batches in flight;
 *   GPT_CKPT_SELECTIVE  a checkpointed block drops only the attention probabilities
 *                       softmax(QK^T/sqrt(HS)), the (B, NH, T, T) part that grows with T^2, and
 *                       recomputes them from the saved q, k just before attention's backward.
 * Recompute runs the same kernels on the same inputs, so gradients are bitwise those of
 * GPT_CKPT_NONE. */
#define GPT_CKPT_NONE 0
#define GPT_CKPT_FULL 1
#define GPT_CKPT_SELECTIVE 2

/* Vp: the padded vocabulary (rows of wte, columns of the logits). */
static inline int gpt_vocab_rows(const gpt_config *c) {
  return c->padded_vocab_size > c->vocab_size ? c->padded_vocab_size : c->vocab_size;
}

/* What a parameter is, so plugins (tensor parallel, weight decay) can treat it by role. */
typedef enum gpt_param_role {
  GPT_WTE, GPT_WPE,
  GPT_LN1_W, GPT_LN1_B, GPT_QKV_W, GPT_QKV_B, GPT_ATTPROJ_W, GPT_ATTPROJ_B,
  GPT_LN2_W, GPT_LN2_B, GPT_FC_W, GPT_FC_B, GPT_FCPROJ_W, GPT_FCPROJ_B,
  GPT_LNF_W, GPT_LNF_B,
} gpt_param_role;

/* One parameter tensor. data/grad are the current views into device memory; they point into
 * the flat buffers by default (plugins such as ZeRO-3 may redirect them around a unit). */
typedef struct gpt_param {
  char name[48];      /* PyTorch-style: "wte", "h.3.attn.qkv.weight", "ln_f.bias" */
  int unit;           /* 0 embedding, 1..L block, L+1 head */
  gpt_param_role role;
  int ndim;           /* 1 or 2 */
  int64_t shape[2];   /* GLOBAL (rows, cols) for 2-D, (n) for 1-D */
  int split_dim;      /* tensor-parallel placement: -1 replicated, 0 rows split, 1 cols split */
  int split_parts;    /* the split dim is this many equal blocks, each split across tp (qkv: 3,
                         q k v; else 1): rank r holds rows/cols r/tp of every block */
  int64_t lshape[2];  /* this rank's local shape (= shape when replicated or tp == 1) */
  size_t numel;       /* LOCAL element count (what the flat buffers hold) */
  size_t offset;      /* in elements, from the start of the flat buffer */
  int present;        /* 1: this stage holds the tensor (always 1 without pipeline stages) */
  int tied_copy;      /* 1: the last stage's copy of the first stage's wte (the head's tied
                         weight under pipeline parallel); counted once in the grad norm */
  float *data;        /* device pointer, numel floats */
  float *grad;        /* device pointer, numel floats */
  float *work;        /* what the kernels read while the tensor's unit runs: data itself in
                         fp32, its 16-bit values (fp32 elements) in gpt_model.wwork otherwise;
                         NULL for the GEMM weights (and the head's wte) when the device reads
                         them in their 16-bit storage (device ABI 1.7 matmul_*_w) */
  float *gacc;        /* what the kernels accumulate the gradient into while the unit's
                         backward runs: grad itself when grad_dtype is F32, else an fp32 slot
                         of gpt_model.gwork */
} gpt_param;

/* Callbacks around each unit's forward and backward (any may be NULL). A non-zero return
 * aborts the pass and is returned by gpt_forward / gpt_backward. */
typedef struct gpt_hooks {
  void *ud;
  int (*pre_forward)(void *ud, int unit);
  int (*post_forward)(void *ud, int unit);
  int (*pre_backward)(void *ud, int unit);
  int (*post_backward)(void *ud, int unit);
  /* Tensor-parallel region boundaries (Megatron's f and g), called in every block with the
   * activation (or its gradient) at that point, n floats of device memory, updated in place:
   *   GPT_REGION_F before each column-parallel matmul (qkv, mlp.fc): forward identity,
   *     backward (backward = 1) all-reduce of the input gradient over tp;
   *   GPT_REGION_G after each row-parallel matmul (attn.proj, mlp.proj): forward all-reduce
   *     of the output over tp, backward identity.
   * Called only when tp_size > 1. */
  int (*region)(void *ud, int which, int backward, float *buf, size_t n);
  /* Vocabulary parallel (gpt_config.vocab_parallel): all-reduce n elements of `dtype`
   * (LOOM_F32 or LOOM_F64) of device memory over the tp ranks in place, `op` a loom_red_op
   * (LOOM_OP_SUM, LOOM_OP_MAX). Required then (the model fails the pass without it). */
  int (*tp_reduce)(void *ud, void *buf, size_t n, int dtype, int op);
  /* Sequence parallel (gpt_config.sequence_parallel): over the tp ranks, fp32 device memory,
   * blocking. all-gather: full (tp*n floats) gets every rank's n-float shard in rank order;
   * reduce-scatter: shard (n floats) gets this rank's block of the sum of the ranks' full
   * (tp*n floats). Required then (the model fails the pass without them). */
  int (*tp_all_gather)(void *ud, const float *shard, float *full, size_t n);
  int (*tp_reduce_scatter)(void *ud, const float *full, float *shard, size_t n);
  /* Context parallel (gpt_config.cp_size > 1): one hop of the ring, send n floats of device
   * memory to the next cp rank and receive n from the previous one (distinct buffers).
   * Required then. */
  int (*cp_ring)(void *ud, const float *send, float *recv, size_t n);
} gpt_hooks;

#define GPT_REGION_F 0
#define GPT_REGION_G 1

typedef struct gpt_acts gpt_acts; /* activations (internal to gpt.c) */

/* One activation set (a micro-batch in flight under a pipeline schedule). */
typedef struct gpt_slot {
  gpt_acts *acts;
  int32_t *inputs, *targets;
  int B, T, has_targets;
  float mean_loss;
} gpt_slot;

typedef struct gpt_model {
  gpt_config cfg;
  loom_dev *dev;
  int n_params;             /* number of tensors */
  gpt_param *params;        /* n_params, in flat-buffer order */
  int n_units;              /* L + 2 */
  size_t *unit_offset;      /* n_units + 1 entries; unit u is [unit_offset[u], unit_offset[u+1]) */
  size_t num_parameters;    /* total elements */
  float *params_memory;     /* device, num_parameters floats (LOOM_MEM_PARAMS) */
  float *grads_memory;      /* device, num_parameters floats (LOOM_MEM_GRADS) */
  int B, T;                 /* shape the activations are allocated for (0 = none yet) */
  gpt_acts *acts;
  int32_t *inputs;          /* device (B,T) token ids of the last forward */
  int32_t *targets;         /* device (B,T), or unused when forward got no targets */
  int has_targets;
  float mean_loss;          /* mean cross-entropy of the last forward with targets, else -1 */
  float train_dloss;        /* gpt_set_train_dloss: nonzero = forwards with targets train */
  /* pipeline stage: units [first_unit, last_unit]; the whole model by default */
  int first_unit, last_unit;
  int tied_copy;            /* index in params of the tied wte copy, or -1 */
  int n_present;            /* tensors this stage holds (n_params without stages) */
  /* activation slots: the fields above (acts .. mean_loss) are those of slot cur_slot; the
   * others wait in slots[] (allocated lazily, so a schedule's peak in-flight micro-batches is
   * what LOOM_MEM_ACTIVATIONS reports) */
  gpt_slot *slots;
  int n_slots, cur_slot;
  /* activation checkpointing: one block's recomputed activations, shared by every block and
   * slot; under bf16/fp16 with 16-bit saved copies (not acts_typed) also the (B,T,4C/tp) buffer
   * that widens them for backward (LOOM_MEM_ACTIVATIONS; NULL under GPT_CKPT_NONE otherwise) */
  float *recompute;
  size_t recompute_floats;
  /* mixed precision: one unit's 16-bit working weights as fp32 (gpt_work_category; NULL in
   * fp32) */
  float *wwork;
  size_t wwork_floats;
  /* padded vocabulary (Vp > V, on the stage with the head): the logits' bias, 0 for columns
   * < V and -inf after (device, Vp floats, LOOM_MEM_OTHER); NULL otherwise */
  float *logits_mask;
  /* 16-bit gradient storage: the fp32 accumulators of one unit's gradients, the tied wte's
   * first (kept from the head's backward to unit 0's), and a small staging buffer for the
   * read-add-round into the 16-bit buffer (LOOM_MEM_OTHER: temporary buffers; NULL when
   * grad_dtype is F32) */
  float *gwork;
  size_t gwork_floats, gwork_wte_floats;
  float *gstage;
  /* the device's 16-bit activation kernels when the model runs them (gpt_config.acts_typed): a
   * host copy of its acts16 table, owned (freed by gpt_free); NULL otherwise */
  const loom_device_acts16_v1 *a16;
  /* vocabulary parallel (gpt_config.vocab_parallel; NULL/0 otherwise): vp_ids the rank's local
   * ids (B,T) int32, vp_zero max_seq_len*C zero floats (a zero wpe and a zero id row), vp_junk
   * max_seq_len*C floats the split embedding backward's unused outputs go to, vp_red
   * 2*vp_rows fp64 of device memory for the row statistics' all-reduces (LOOM_MEM_OTHER);
   * vp_host the host's staging (rows of the logit slice and the statistics) */
  int32_t *vp_ids;
  float *vp_zero, *vp_junk;
  double *vp_red;
  size_t vp_rows;
  float *vp_host;
  size_t vp_host_floats;
  int32_t *vp_in_host, *vp_tg_host; /* host copies of the last forward's ids and targets */
  double *vp_stats;                 /* host: 3*vp_rows row statistics (max, sum, target) */
  double *vp_host_mx;               /* host: vp_rows maxima of the rank's own slice */
  struct gpt_cp_state *cp;          /* context parallel's ring buffers (gpt_cp.c), or NULL */
} gpt_model;

/* Check `cfg` and build the parameter table; allocate parameters and gradients on `dev`.
 * Returns LOOM_OK or LOOM_INVALID_CONFIG / LOOM_NOMEM with a message in err. */
/* Limits on the model's dimensions, so that every count and size computed from them fits its
 * type (tensor counts are int, element counts size_t, kernel row counts int): the config loader
 * refuses larger values naming the key, gpt_init refuses them too. GPT-3 175B is 96 layers,
 * n_embd 12288, 2^37.4 parameters. */
#define GPT_MAX_N_LAYER 65536
#define GPT_MAX_N_EMBD (1 << 20)
#define GPT_MAX_SEQ_LEN (1 << 20)
#define GPT_MAX_PARAMS (1ull << 40) /* 4 TiB of fp32 parameters */

/* The parameter count of the whole (unsplit) model, in double so that it cannot overflow:
 * V*C + maxT*C + L*(12*C*C + 13*C) + 2*C. */
double gpt_param_count_estimate(int vocab_size, int max_seq_len, int n_layer, int n_embd);

int gpt_init(gpt_model *m, const gpt_config *cfg, loom_dev *dev, char *err, size_t errlen);
/* Storage flags for gpt_init_ex: a parallel plugin that owns parameter or gradient storage
 * (ZeRO-3, ZeRO-2) sets the tensor views itself; the flat buffer is then NULL. */
#define GPT_NO_PARAM_STORAGE 1
#define GPT_NO_GRAD_STORAGE 2
int gpt_init_ex(gpt_model *m, const gpt_config *cfg, loom_dev *dev, int flags, char *err,
                size_t errlen);

/* Bytes of the activation pool (LOOM_MEM_ACTIVATIONS) a forward/backward at (B,T) allocates:
 * everything forward saves for backward plus backward's scratch, 64-byte aligned pieces — the
 * exact size acts_ensure asks the device for (`loom estimate` reports it). The token buffers
 * (2 * B*T int32, LOOM_MEM_OTHER) are not included. SIZE_MAX when the pool would exceed 2^54
 * bytes (sizes that 64-bit arithmetic cannot carve; no machine has that memory). */
size_t gpt_activation_bytes(const gpt_config *cfg, int B, int T);
/* Bytes of the recompute scratch (LOOM_MEM_ACTIVATIONS) that activation checkpointing adds once
 * per model, whatever the number of micro-batches in flight: one block's activations under
 * GPT_CKPT_FULL, one block's attention probabilities under GPT_CKPT_SELECTIVE, 0 without
 * checkpointing or blocks (2-byte elements but for the stats and att under acts_typed); under
 * bf16/fp16 16-bit saved copies (acts_f32 0, not acts_typed) plus a (B,T,4C/tp) fp32 widening
 * buffer unless GPT_CKPT_FULL's block holds one. Same saturation as
 * gpt_activation_bytes. */
size_t gpt_recompute_bytes(const gpt_config *cfg, int B, int T);

/* 1 if dev has the lse attention kernels a model of cfg would call (gpt_config.attn_lse): the
 * fp32 slots, and with 16-bit activations end to end (cfg->acts_typed, whole model, no tp) its
 * acts16 table's for cfg->dtype. */
int gpt_device_has_attn_lse(const gpt_config *cfg, const loom_dev *dev);

/* Bytes of the 16-bit working weights (gpt_work_category) a model with cfg.dtype bf16/fp16
 * allocates: the largest unit's tensors of this stage (the head's with the tied wte), 64-byte
 * aligned pieces; 0 in fp32. Works on a table-only model (gpt_init_ex without a device). */
size_t gpt_weight_work_bytes(const gpt_model *m);

/* Bytes of the fp32 gradient scratch (LOOM_MEM_OTHER) a model with a 16-bit grad_dtype
 * allocates: the tied wte's accumulator plus the largest unit's other tensors, plus the
 * staging buffer; 0 when grad_dtype is F32. Works on a table-only model. */
size_t gpt_grad_work_bytes(const gpt_model *m);

/* The memory category of the fp32 working weights (gpt_weight_work_bytes): under 16-bit
 * storage they, like the gradient scratch, are temporary buffers of the fp32 CPU kernels —
 * residual state in the ZeRO paper's terms (§3.2), not model state: LOOM_MEM_OTHER; under the
 * ABI 1.3 layout they are the only 16-bit copy of the weights: LOOM_MEM_PARAMS. */
int gpt_work_category(const gpt_model *m);

/* Element size in bytes of the flat parameter / gradient buffers (4, or 2 for 16-bit). */
size_t gpt_param_elem_bytes(const gpt_model *m);
size_t gpt_grad_elem_bytes(const gpt_model *m);

/* Free everything gpt_init and gpt_forward allocated. */
void gpt_free(gpt_model *m);

/* GPT-2 initialisation from `seed` (independent of rank): weights N(0, 0.02), residual
 * projections (attn.proj, mlp.proj) N(0, 0.02/sqrt(2L)) (Radford et al. 2019, §2.3), biases 0,
 * LayerNorm weight 1 / bias 0, wte and wpe N(0, 0.02). The flat buffer gets them in
 * param_dtype (16-bit: rounded to nearest even). LOOM_OK, or LOOM_NOMEM (a 16 KiB device
 * staging buffer for 16-bit storage could not be allocated). */
int gpt_init_weights(gpt_model *m, uint64_t seed);
/* gpt_init_weights_range into dst holding n elements of `dtype` (F32, or BF16/F16: the values
 * rounded to nearest even, staged through a bounded device buffer). LOOM_NOMEM when that
 * buffer cannot be allocated. */
int gpt_init_weights_range_as(const gpt_model *m, uint64_t seed, size_t begin, size_t n,
                              void *dst, int dtype);
/* The same initial values for flat elements [begin, begin+n) only, written to dst (device,
 * n floats): the random stream is replayed up to `begin`, so a shard gets exactly what a
 * single-rank run would hold there, without the whole model in memory. */
void gpt_init_weights_range(const gpt_model *m, uint64_t seed, size_t begin, size_t n,
                            float *dst);

/* Forward pass over a (B,T) batch of host token ids. targets may be NULL (logits only).
 * The activation pool (LOOM_MEM_ACTIVATIONS) grows when B*T exceeds what it was sized for and
 * is reused for smaller shapes.
 * On success with targets, m->mean_loss is the mean loss over the B*T positions and *loss
 * (if non-NULL) gets it. Returns LOOM_OK, a hook's error, or LOOM_INVALID_USAGE (bad token id
 * or T > max_seq_len). */
int gpt_forward(gpt_model *m, const int32_t *inputs_host, const int32_t *targets_host, int B,
                int T, const gpt_hooks *hooks, float *loss);

/* Backward pass of the last forward (which must have had targets), accumulating into the
 * gradients. dloss is the gradient of the objective w.r.t. each position's loss: 1/(B*T) for
 * the mean over this micro-batch, 1/(B*T*accum) under gradient accumulation. */
int gpt_backward(gpt_model *m, float dloss, const gpt_hooks *hooks);

/* ---- pipeline stages ---- */
/* Make activation slot `slot` current (allocating its record lazily) and sized for (B,T). */
int gpt_slot_ensure(gpt_model *m, int slot, int B, int T);
/* The stage's units [first_unit, last_unit] on activation slot `slot`: forward (inputs used by
 * the embedding, targets by the head; a stage without the embedding reads its input activation
 * from gpt_stage_buffer(GPT_BUF_INPUT), filled by the caller) and backward (a stage without the
 * head starts from the gradient of its output in GPT_BUF_GRAD_OUTPUT). */
int gpt_stage_forward(gpt_model *m, int slot, const int32_t *inputs_host,
                      const int32_t *targets_host, int B, int T, const gpt_hooks *hooks,
                      float *loss);
int gpt_stage_backward(gpt_model *m, int slot, float dloss, const gpt_hooks *hooks);
#define GPT_BUF_INPUT 0       /* (B,T,C) the stage's input activation */
#define GPT_BUF_OUTPUT 1      /* (B,T,C) the stage's output activation (after forward) */
#define GPT_BUF_GRAD_OUTPUT 2 /* (B,T,C) gradient of the output (before backward) */
#define GPT_BUF_GRAD_INPUT 3  /* (B,T,C) gradient of the input (after backward; same memory as
                                 GRAD_OUTPUT) */
/* Device pointer of a boundary buffer of slot `slot` (which must have been ensured): fp32,
 * (B,T,C) floats. NULL under acts_typed (16-bit buffers; only ever the whole model, which has no
 * boundary). */
float *gpt_stage_buffer(gpt_model *m, int slot, int which);
/* Model chunks (gpt_config.pp_chunks > 1; gpt_chunks.c): the same on chunk `chunk`'s units
 * only, the chunk's activation slots `slot` kept apart from the other chunks' by the caller
 * (a slot carries one chunk's layout). Chunk 0 of a model without chunks is the stage. */
int gpt_chunk_slot_ensure(gpt_model *m, int chunk, int slot, int B, int T);
int gpt_chunk_forward(gpt_model *m, int chunk, int slot, const int32_t *inputs_host,
                      const int32_t *targets_host, int B, int T, const gpt_hooks *hooks,
                      float *loss);
int gpt_chunk_backward(gpt_model *m, int chunk, int slot, float dloss, const gpt_hooks *hooks);
float *gpt_chunk_buffer(gpt_model *m, int chunk, int slot, int which);
/* The config of chunk `chunk` alone (pp_first/pp_end its range, pp_chunks 1): what its
 * activation slots are laid out by (gpt_activation_bytes). */
gpt_config gpt_chunk_config(const gpt_config *c, int chunk);
/* Check a config's chunks (pp_chunks in [2, GPT_MAX_CHUNKS], ranges non-empty, ascending,
 * disjoint, inside [0, n_layer + 1], their hull pp_first/pp_end). LOOM_OK, or
 * LOOM_INVALID_CONFIG with one line in err. */
int gpt_chunks_check(const gpt_config *c, char *err, size_t errlen);
/* Chunks of a config (1 without interleaving). */
static inline int gpt_n_chunks(const gpt_config *c) { return c->pp_chunks > 1 ? c->pp_chunks : 1; }

/* The tied wte the head reads (the copy on a last stage without the embedding). */
gpt_param *gpt_head_wte(gpt_model *m);

/* Zero all parameter gradients. */
void gpt_zero_grad(gpt_model *m);

/* The dloss the next backward will be called with (the trainer's loss scale / rows of the
 * global batch), or 0 when no backward follows (evaluation). With a nonzero value, a forward with
 * targets writes dlogits over the logits (in the same pass as the loss on a device with the fused
 * classifier, device ABI 1.4 crossentropy_fused), and backward uses them: the logits are then no
 * longer readable (gpt_logits_row returns dlogits). Stays set until changed. */
void gpt_set_train_dloss(gpt_model *m, float dloss);

/* Copy row `row` (0 <= row < B*T) of the last forward's logits to host memory: its first V
 * floats (the real vocabulary; a padded vocabulary's -inf columns are left out).
 * After a forward with targets under gpt_set_train_dloss, or after any backward, the buffer holds
 * dlogits instead (the model keeps no second (B,T,V) buffer). Under vocabulary parallel: this
 * rank's slice at its columns and zeros elsewhere (gpt_logits_row_gather sums them). */
void gpt_logits_row(const gpt_model *m, int row, float *host_out);

/* gpt_logits_row under vocabulary parallel: every tp rank calls it in lockstep; each puts its
 * slice of the row into a zeroed (Vp) row, hooks->tp_reduce sums them (the gather), and every
 * rank gets the whole row's first V floats. Without vocabulary parallel: gpt_logits_row.
 * LOOM_OK, LOOM_NOMEM, or the hook's error. */
int gpt_logits_row_gather(gpt_model *m, int row, float *host_out, const gpt_hooks *hooks);

/* Rows of wte (and logit columns) this rank holds: Vp/tp under vocabulary parallel, else Vp. */
static inline int gpt_vocab_local(const gpt_config *c) {
  return c->vocab_parallel && c->tp_size > 1 ? gpt_vocab_rows(c) / c->tp_size : gpt_vocab_rows(c);
}

#endif
