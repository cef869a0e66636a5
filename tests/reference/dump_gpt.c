/* dump_gpt: run one forward + backward of a tiny GPT-2 on loom's CPU device and write everything
 * a reference implementation needs to redo it (check_torch.py reads the file).
 *
 * Usage: dump_gpt OUT.bin [bf16|fp16]
 *   bf16 / fp16: the model's mixed-precision mode with 16-bit storage (gpt.h: 16-bit weights,
 *   activations, activation gradients and parameter gradients, fp32 compute); the weights
 *   written are the 16-bit parameters and the gradients the 16-bit ones (each rounded once from
 *   its unit's fp32 accumulator), widened to float32 (check_torch_bf16.py rounds at the same
 *   points).
 *
 * Legend: B = batch, T = time, C = n_embd, NH = heads, L = layers, V = vocab, maxT = max_seq_len.
 *
 * File layout (native little-endian; int32 unless noted):
 *   magic 0x4C4D5246 ("LMRF"), version 1, V, maxT, L, NH, C, B, T, n_params
 *   n_params x { name_len, name bytes (no NUL), ndim, shape[0], shape[1] (0 for 1-D),
 *                float32 data[numel] }                    -- in gpt_param_table order
 *   inputs[B*T], targets[B*T]
 *   float32 logits[B*T*V], float32 mean_loss
 *   n_params x float32 grad[numel]                        -- d mean_loss, i.e. dloss = 1/(B*T)
 * Parameters are random (not GPT-2 init: zero biases and unit LayerNorm weights would leave
 * parts of the graph untested). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "model/gpt.h"
#include "util/rng.h"

#define DUMP_MAGIC 0x4C4D5246
#define DUMP_VERSION 1

static int write_all(FILE *f, const void *p, size_t bytes) {
  return fwrite(p, 1, bytes, f) == bytes ? 0 : -1;
}

static int write_i32(FILE *f, int32_t v) { return write_all(f, &v, sizeof v); }

/* Host fp32 values into a device buffer of `dt` (16-bit: rounded to nearest even, as the
 * trainer's 16-bit storage holds them). 0 or -1 (out of memory). */
static int to_storage(const loom_dev *dev, void *d, loom_dtype dt, const float *h, size_t n) {
  if (dt == LOOM_F32) {
    dev->ops->from_host(dev->ctx, d, h, n * sizeof(float));
    return 0;
  }
  float *tmp = dev->ops->alloc(dev->ctx, n * sizeof(float));
  if (!tmp) return -1;
  dev->ops->from_host(dev->ctx, tmp, h, n * sizeof(float));
  dev->ops->convert(dev->ctx, d, dt, tmp, LOOM_F32, n);
  dev->ops->free(dev->ctx, tmp);
  return 0;
}

/* Fill every tensor with random values scaled by role; returns 0 or -1 (out of memory). */
static int randomize(gpt_model *m, loom_rng *rng) {
  for (int i = 0; i < m->n_params; i++) {
    gpt_param *p = &m->params[i];
    float *h = malloc(p->numel * sizeof(float));
    if (!h) return -1;
    float mean = 0.0f, std = 0.15f; /* linear weights */
    switch (p->role) {
      case GPT_WTE: case GPT_WPE: std = 0.3f; break;
      case GPT_LN1_W: case GPT_LN2_W: case GPT_LNF_W: mean = 1.0f; std = 0.1f; break;
      case GPT_LN1_B: case GPT_LN2_B: case GPT_LNF_B: case GPT_QKV_B: case GPT_ATTPROJ_B:
      case GPT_FC_B: case GPT_FCPROJ_B: std = 0.1f; break;
      default: break;
    }
    for (size_t j = 0; j < p->numel; j++) h[j] = mean + std * loom__rng_normal(rng);
    int rc = to_storage(m->dev, p->data, (loom_dtype)m->cfg.param_dtype, h, p->numel);
    free(h);
    if (rc) return -1;
  }
  return 0;
}

/* Write a device tensor of n elements of `dt` as float32 (16-bit widened, exact). */
static int write_dev(FILE *f, const loom_dev *dev, const void *d, loom_dtype dt, size_t n) {
  float *h = malloc(n * sizeof(float));
  float *tmp = dt == LOOM_F32 ? NULL : dev->ops->alloc(dev->ctx, n * sizeof(float));
  if (!h || (dt != LOOM_F32 && !tmp)) {
    free(h);
    if (tmp) dev->ops->free(dev->ctx, tmp);
    return -1;
  }
  if (tmp) dev->ops->convert(dev->ctx, tmp, LOOM_F32, d, dt, n);
  dev->ops->to_host(dev->ctx, h, tmp ? tmp : d, n * sizeof(float));
  int rc = write_all(f, h, n * sizeof(float));
  free(h);
  if (tmp) dev->ops->free(dev->ctx, tmp);
  return rc;
}

int main(int argc, char **argv) {
  int dtype = LOOM_F32, flash = 0, bad_args = argc < 2;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "bf16") == 0) dtype = LOOM_BF16;
    else if (strcmp(argv[i], "fp16") == 0) dtype = LOOM_F16;
    else if (strcmp(argv[i], "flash") == 0) flash = 1; /* gpt_config.attn_lse */
    else bad_args = 1;
  }
  if (bad_args) {
    fprintf(stderr, "usage: %s OUT.bin [bf16|fp16] [flash]\n", argv[0]);
    return 2;
  }
  const gpt_config cfg = {.vocab_size = 64, .max_seq_len = 16, .n_layer = 2, .n_head = 4,
                          .n_embd = 32, .dtype = dtype,
                          /* 16-bit parameter and gradient storage, as the trainer uses it with
                           * one micro-batch per step (gpt.h) */
                          .param_dtype = dtype, .grad_dtype = dtype, .attn_lse = flash};
  const int B = 3, T = 11, V = cfg.vocab_size;
  char err[256];
  loom_dev dev;
  gpt_model m;
  if (loom__dev_open(&dev, loom__cpu_device(), "{}", 0, err, sizeof err) != LOOM_OK) {
    fprintf(stderr, "dump_gpt: %s\n", err);
    return 1;
  }
  if (gpt_init(&m, &cfg, &dev, err, sizeof err) != LOOM_OK) {
    fprintf(stderr, "dump_gpt: %s\n", err);
    loom__dev_close(&dev);
    return 1;
  }
  loom_rng rng;
  loom__rng_seed(&rng, 20240526);
  int32_t inputs[3 * 11], targets[3 * 11];
  for (int i = 0; i < B * T; i++) inputs[i] = (int32_t)(loom__rng_u64(&rng) % (uint64_t)V);
  for (int i = 0; i < B * T; i++) targets[i] = (int32_t)(loom__rng_u64(&rng) % (uint64_t)V);
  inputs[5] = inputs[17]; /* a repeated token (embedding scatter-add) */

  int rc = randomize(&m, &rng) ? LOOM_NOMEM : LOOM_OK;
  float loss = 0.0f;
  if (rc == LOOM_OK) rc = gpt_forward(&m, inputs, targets, B, T, NULL, &loss);
  /* the logits before the backward, which writes dlogits over them (gpt_logits_row) */
  float *logits = rc == LOOM_OK ? malloc((size_t)B * T * V * sizeof(float)) : NULL;
  if (rc == LOOM_OK && !logits) rc = LOOM_NOMEM;
  for (int r = 0; rc == LOOM_OK && r < B * T; r++) gpt_logits_row(&m, r, logits + (size_t)r * V);
  if (rc == LOOM_OK) {
    gpt_zero_grad(&m);
    rc = gpt_backward(&m, 1.0f / (float)(B * T), NULL);
  }
  if (rc != LOOM_OK) {
    fprintf(stderr, "dump_gpt: forward/backward failed (%d)\n", rc);
    free(logits);
    gpt_free(&m);
    loom__dev_close(&dev);
    return 1;
  }

  FILE *f = fopen(argv[1], "wb");
  int bad = !f;
  if (f) {
    const int32_t hdr[] = {DUMP_MAGIC, DUMP_VERSION, V, cfg.max_seq_len, cfg.n_layer,
                           cfg.n_head, cfg.n_embd, B, T, m.n_params};
    bad |= write_all(f, hdr, sizeof hdr);
    for (int i = 0; i < m.n_params && !bad; i++) {
      const gpt_param *p = &m.params[i];
      int32_t len = (int32_t)strlen(p->name);
      bad |= write_i32(f, len) | write_all(f, p->name, (size_t)len);
      bad |= write_i32(f, p->ndim) | write_i32(f, (int32_t)p->shape[0]);
      bad |= write_i32(f, p->ndim == 2 ? (int32_t)p->shape[1] : 0);
      bad |= write_dev(f, &dev, p->data, (loom_dtype)cfg.param_dtype, p->numel);
    }
    bad |= write_all(f, inputs, sizeof inputs) | write_all(f, targets, sizeof targets);
    bad |= write_all(f, logits, (size_t)B * T * V * sizeof(float));
    bad |= write_all(f, &loss, sizeof loss);
    for (int i = 0; i < m.n_params && !bad; i++)
      bad |= write_dev(f, &dev, m.params[i].grad, (loom_dtype)cfg.grad_dtype, m.params[i].numel);
    bad |= fclose(f) != 0;
  }
  free(logits);
  if (bad) fprintf(stderr, "dump_gpt: cannot write %s\n", argv[1]);
  else printf("dump_gpt: wrote %s (%zu parameters, loss %.6f)\n", argv[1], m.num_parameters,
              (double)loss);
  gpt_free(&m);
  loom__dev_close(&dev);
  return bad ? 1 : 0;
}
