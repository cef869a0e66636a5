/* The device conformance suite's fused classifier (device_v1.h's ABI 1.4 crossentropy_fused)
 * at one shape, in its three modes: the loss only (dlogits NULL: logits must stay untouched),
 * dlogits into a separate buffer, and dlogits written in place over logits (the training
 * forward). Each against the float64 reference, and bit for bit against crossentropy_forward
 * followed by crossentropy_backward on the same device: the ABI promises the same operations in
 * the same order, so the host may take either path and a run stays reproducible.
 *
 * The logits carry a padded vocabulary (gpt.c's logits_mask): the last V/8 columns (at least
 * one) are -inf, so their probability and dlogits are exactly 0 and a kernel that lets an
 * -inf into its max, its sum or a NaN into a row fails here. Every third row is ignored
 * (target -1: loss 0, a zero dlogits row). Legend: N = rows (B·T), V = the padded vocabulary. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_reference.h"
#include "device_suite.h"
#include "device/device.h"

void dc_check_fused_classifier(dc_suite *s, const dc_shape *sh) {
  const loom_device_v1 *o = s->ops;
  const int N = sh->B * sh->T, V = sh->V, pad = V / 8 > 0 ? V / 8 : 1, Vreal = V - pad;
  const size_t NV = (size_t)N * V;
  char nm[128];
  const char *dt = s->dtype == LOOM_BF16 ? ".bf16" : "";
#define NAME(extra) (snprintf(nm, sizeof nm, "crossentropy_fused.%s%s%s", sh->name, extra, dt), nm)
#define SAME(name, got, want, n) dc_same_bits(s, name, got, want, n, "the separate kernels gave")
  if (!o->crossentropy_fused) {
    dc_line("SKIP", NAME(""), "no fused classifier (ABI 1.4 slot NULL): the host runs the "
            "separate kernels");
    s->skipped++;
    return;
  }
  if (!o->crossentropy_forward || !o->crossentropy_backward) return; /* dc_check_gpt FAILs it */

  float *logits = dc_rand_f(s, NV, 8);
  for (int n = 0; n < N; n++)
    for (int v = Vreal; v < V; v++) logits[(size_t)n * V + v] = -INFINITY;
  int32_t *tg = dc_rand_tok(s, (size_t)N, Vreal, 3);
  const float dloss = 1.0f / (float)N;

  /* the float64 reference: losses n = V + 2 (max, exp, sum, log); dlogits = (p - onehot)·dloss
   * with p from the same exp and sum: n = V + 4 (the probability's, then two products) */
  double *rl = malloc((size_t)N * sizeof *rl), *rd = malloc(NV * sizeof *rd);
  ref_crossentropy_forward(rl, rd, logits, tg, N, V);
  for (int n = 0; n < N; n++)
    for (int v = 0; v < V; v++) {
      double *d = &rd[(size_t)n * V + v];
      *d = tg[n] < 0 ? 0.0 : (*d - (v == tg[n])) * dloss;
    }

  void *d_l = dc_up(s, logits, NV * 4), *d_t = dc_up(s, tg, (size_t)N * 4);
  void *d_loss = dc_up(s, NULL, (size_t)N * 4), *d_d = dc_up(s, NULL, NV * 4);

  /* 1. the loss only (evaluation): logits untouched */
  o->crossentropy_fused(s->ctx, d_loss, NULL, d_l, d_t, dloss, N, V);
  float *loss_only = dc_down(s, d_loss, (size_t)N);
  dc_compare(s, NAME(".loss_only"), loss_only, rl, (size_t)N, V + 2.0, U32);
  float *got = dc_down(s, d_l, NV);
  SAME(NAME(".loss_only.logits_untouched"), got, logits, NV);
  free(got);

  /* 2. dlogits into a separate buffer */
  o->crossentropy_fused(s->ctx, d_loss, d_d, d_l, d_t, dloss, N, V);
  float *loss_sep = dc_down(s, d_loss, (size_t)N), *dl_sep = dc_down(s, d_d, NV);
  dc_compare(s, NAME(".losses"), loss_sep, rl, (size_t)N, V + 2.0, U32);
  dc_compare(s, NAME(".dlogits"), dl_sep, rd, NV, V + 4.0, U32);

  /* 3. dlogits in place over logits (the training forward) */
  void *d_lin = dc_up(s, logits, NV * 4);
  o->crossentropy_fused(s->ctx, d_loss, d_lin, d_lin, d_t, dloss, N, V);
  float *loss_in = dc_down(s, d_loss, (size_t)N), *dl_in = dc_down(s, d_lin, NV);
  dc_compare(s, NAME(".inplace.dlogits"), dl_in, rd, NV, V + 4.0, U32);

  /* 4. the same bits as crossentropy_forward then crossentropy_backward on this device */
  void *d_p = dc_up(s, NULL, NV * 4), *d_ds = dc_up(s, NULL, NV * 4);
  o->crossentropy_forward(s->ctx, d_loss, d_p, d_l, d_t, N, V);
  o->crossentropy_backward(s->ctx, d_ds, d_p, d_t, dloss, N, V);
  float *loss_two = dc_down(s, d_loss, (size_t)N), *dl_two = dc_down(s, d_ds, NV);
  SAME(NAME(".bitwise.loss_only"), loss_only, loss_two, (size_t)N);
  SAME(NAME(".bitwise.losses"), loss_sep, loss_two, (size_t)N);
  SAME(NAME(".bitwise.dlogits"), dl_sep, dl_two, NV);
  SAME(NAME(".bitwise.inplace.losses"), loss_in, loss_two, (size_t)N);
  SAME(NAME(".bitwise.inplace.dlogits"), dl_in, dl_two, NV);

  free(loss_only), free(loss_sep), free(dl_sep), free(loss_in), free(dl_in), free(loss_two);
  free(dl_two), free(rl), free(rd), free(logits), free(tg);
  dc_dfree(s, d_l), dc_dfree(s, d_t), dc_dfree(s, d_loss), dc_dfree(s, d_d), dc_dfree(s, d_lin);
  dc_dfree(s, d_p), dc_dfree(s, d_ds);
#undef NAME
#undef SAME
}
