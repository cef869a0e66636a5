/* The pipeline split (see pp_split.h). */
#include "pp_split.h"

#include <stdio.h>
#include <stdlib.h>

/* Interleaved placement: pp * v virtual stages, from "stages" (units per virtual stage) or
 * n_layer / (pp * v) blocks each, the embedding with virtual stage 0's and the head with the
 * last's (Megatron-LM's split: every chunk the same blocks, so every chunk's activation slot
 * but the first's and the last's is the same size). Stage s holds virtual stages k * pp + s. */
static int split_chunks(loom_runtime *rt, const gpt_config *full, char *err, size_t errlen) {
  const int P = rt->pp_size, v = rt->pp_chunks, nv = P * v, L = full->n_layer;
  int cut[LOOM_MAX_STAGES + 1];
  cut[0] = 0;
  if (rt->pp_explicit) {
    for (int j = 0; j < nv; j++) cut[j + 1] = cut[j] + rt->pp_units[j];
  } else {
    if (L % nv != 0) {
      snprintf(err, errlen, "pipeline: chunks %d x size %d = %d virtual stages do not divide "
               "model.n_layer %d evenly (each chunk holds n_layer / (size x chunks) blocks): "
               "choose chunks so that size x chunks divides %d, or give \"stages\" (%d unit "
               "counts, one per virtual stage)", v, P, nv, L, L, nv);
      return -1;
    }
    for (int j = 0; j < nv; j++) cut[j + 1] = 1 + (j + 1) * (L / nv);
    cut[nv] = L + 2; /* the head joins the last virtual stage */
  }
  for (int j = 0; j < nv; j++) rt->pp_vfirst[j] = cut[j], rt->pp_vlast[j] = cut[j + 1] - 1;
  for (int s = 0; s < P; s++)
    rt->pp_first[s] = rt->pp_vfirst[s], rt->pp_last[s] = rt->pp_vlast[(v - 1) * P + s];
  return 0;
}

int loom__pp_split(loom_runtime *rt, const gpt_config *full, char *err, size_t errlen) {
  const int P = rt->pp_size > 1 ? rt->pp_size : 1, n = full->n_layer + 2;
  if (rt->pp_chunks > 1 && P > 1) {
    if (P * rt->pp_chunks > n) {
      snprintf(err, errlen, "pipeline: %d stages x %d chunks = %d virtual stages for %d units",
               P, rt->pp_chunks, P * rt->pp_chunks, n);
      return -1;
    }
    return split_chunks(rt, full, err, errlen);
  }
  int cut[LOOM_MAX_STAGES + 1];
  if (P > LOOM_MAX_STAGES || P > n) {
    snprintf(err, errlen, "pipeline: %d stages for %d units", P, n);
    return -1;
  }
  if (P == 1) {
    cut[0] = 0, cut[1] = n;
  } else if (rt->pp_explicit) {
    cut[0] = 0;
    for (int s = 0; s < P; s++) cut[s + 1] = cut[s] + rt->pp_units[s];
  } else {
    gpt_model tmp;
    char e[256];
    if (gpt_init_ex(&tmp, full, NULL, GPT_NO_PARAM_STORAGE | GPT_NO_GRAD_STORAGE, e,
                    sizeof e) != LOOM_OK) {
      snprintf(err, errlen, "%s", e);
      return -1;
    }
    double *pre = calloc((size_t)n + 1, sizeof *pre), *best = calloc((size_t)(P + 1) * (n + 1),
                                                                     sizeof *best);
    int *arg = calloc((size_t)(P + 1) * (n + 1), sizeof *arg);
    if (!pre || !best || !arg) {
      free(pre), free(best), free(arg), gpt_free(&tmp);
      snprintf(err, errlen, "out of host memory (pipeline split)");
      return -1;
    }
    for (int u = 0; u < n; u++)
      pre[u + 1] = pre[u] + (double)(tmp.unit_offset[u + 1] - tmp.unit_offset[u]) +
                   (u == n - 1 ? (double)gpt_vocab_rows(full) * full->n_embd : 0.0);
    gpt_free(&tmp);
#define BEST(k, j) best[(size_t)(k) * (n + 1) + (j)]
#define ARG(k, j) arg[(size_t)(k) * (n + 1) + (j)]
    for (int j = 0; j <= n; j++) BEST(0, j) = j == 0 ? 0.0 : 1e300;
    for (int k = 1; k <= P; k++)
      for (int j = 0; j <= n; j++) {
        BEST(k, j) = 1e300;
        for (int i = k - 1; i < j; i++) { /* stage k holds units [i, j) */
          double v = BEST(k - 1, i) > pre[j] - pre[i] ? BEST(k - 1, i) : pre[j] - pre[i];
          if (v < BEST(k, j)) BEST(k, j) = v, ARG(k, j) = i;
        }
      }
    cut[P] = n;
    for (int k = P; k >= 1; k--) cut[k - 1] = ARG(k, cut[k]);
#undef BEST
#undef ARG
    free(pre), free(best), free(arg);
  }
  for (int s = 0; s < P; s++) rt->pp_first[s] = cut[s], rt->pp_last[s] = cut[s + 1] - 1;
  return 0;
}

gpt_config loom__pp_stage_config(const loom_runtime *rt, const gpt_config *full, int s) {
  gpt_config c = *full;
  if (rt->pp_size > 1) {
    c.pp_first = rt->pp_first[s];
    c.pp_end = rt->pp_last[s] + 1;
  }
  if (rt->pp_size > 1 && rt->pp_chunks > 1) {
    c.pp_chunks = rt->pp_chunks;
    for (int k = 0; k < rt->pp_chunks; k++) {
      c.pp_chunk_first[k] = rt->pp_vfirst[k * rt->pp_size + s];
      c.pp_chunk_end[k] = rt->pp_vlast[k * rt->pp_size + s] + 1;
    }
  }
  return c;
}
