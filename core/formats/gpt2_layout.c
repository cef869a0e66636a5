/* GPT-2 layouts: loom's names and shapes against Hugging Face's and llm.c's (gpt2_layout.h). */
#include "gpt2_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int loom__gpt2_table(gpt_model *m, int vocab_size, int context_length, int n_layer, int n_head,
                     int n_embd, char *err, size_t errlen) {
  gpt_config c = {.vocab_size = vocab_size, .max_seq_len = context_length, .n_layer = n_layer,
                  .n_head = n_head, .n_embd = n_embd};
  return gpt_init_ex(m, &c, NULL, GPT_NO_PARAM_STORAGE | GPT_NO_GRAD_STORAGE, err, errlen) ==
                 LOOM_OK
             ? 0
             : -1;
}

int loom__llmc_padded_vocab(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

int loom__param_layer(const gpt_param *p) {
  int l;
  return sscanf(p->name, "h.%d.", &l) == 1 ? l : -1;
}

/* loom's name within a block -> HF's, and whether HF's Conv1D holds it transposed. */
static const struct { gpt_param_role role; const char *hf; int transposed; } hf_block[] = {
    {GPT_LN1_W, "ln_1.weight", 0},         {GPT_LN1_B, "ln_1.bias", 0},
    {GPT_QKV_W, "attn.c_attn.weight", 1},  {GPT_QKV_B, "attn.c_attn.bias", 0},
    {GPT_ATTPROJ_W, "attn.c_proj.weight", 1}, {GPT_ATTPROJ_B, "attn.c_proj.bias", 0},
    {GPT_LN2_W, "ln_2.weight", 0},         {GPT_LN2_B, "ln_2.bias", 0},
    {GPT_FC_W, "mlp.c_fc.weight", 1},      {GPT_FC_B, "mlp.c_fc.bias", 0},
    {GPT_FCPROJ_W, "mlp.c_proj.weight", 1}, {GPT_FCPROJ_B, "mlp.c_proj.bias", 0},
};

void loom__hf_name(const gpt_param *p, char *out, size_t n, int *transposed) {
  *transposed = 0;
  switch (p->role) {
    case GPT_WTE: snprintf(out, n, "wte.weight"); return;
    case GPT_WPE: snprintf(out, n, "wpe.weight"); return;
    case GPT_LNF_W: snprintf(out, n, "ln_f.weight"); return;
    case GPT_LNF_B: snprintf(out, n, "ln_f.bias"); return;
    default: break;
  }
  for (size_t i = 0; i < sizeof hf_block / sizeof hf_block[0]; i++)
    if (hf_block[i].role == p->role) {
      snprintf(out, n, "h.%d.%s", loom__param_layer(p), hf_block[i].hf);
      *transposed = hf_block[i].transposed;
      return;
    }
  snprintf(out, n, "%s", p->name); /* defensive: every role is listed above */
}

int64_t loom__tp_local_index(int64_t rows, int64_t cols, int split_dim, int split_parts, int tp,
                             int tp_rank, int64_t r, int64_t c) {
  if (tp <= 1 || split_dim < 0) return r * cols + c;
  if (split_dim == 0) {
    int64_t per_part = rows / split_parts, lrows = per_part / tp;
    int64_t part = r / per_part, rr = r % per_part;
    if (rr / lrows != tp_rank) return -1;
    return (part * lrows + rr % lrows) * cols + c;
  }
  int64_t lcols = cols / tp;
  if (c / lcols != tp_rank) return -1;
  return r * lcols + c % lcols;
}
