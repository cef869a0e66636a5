/* cuda.so's embedding gradient in fixed chunks of occurrences (plugins/device/cuda/
 * cuda_embed_chunks.h, issue 21 item 8), on the host: the two steps the kernels run, applied to
 * every (chunk, column) in several orders of the chunks, against the CPU device's scatter-add
 * (core/device/cpu_layers.c: dwte[token] += dout[position], positions in order). What is proved:
 * the result does not depend on the order the chunks run in (bit for bit: deterministic
 * whatever the GPU's scheduling); a token whose sorted run lies inside one chunk gets the CPU's
 * bits; a run over many chunks (a frequent token) agrees within fp32 rounding; edge shapes
 * (fewer entries than a chunk, one token everywhere, a run ending on a chunk boundary). The sort
 * itself is cub's stable radix sort on the GPU; here a stable counting sort stands in. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_embed_chunks.h"
#include "support/check_suite.h"

static uint64_t rng = 42;
static float frand(void) { /* [-1, 1), splitmix64 */
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) * 0x1p-52 - 1.0);
}

/* Stable sort of positions by token (what cub's radix sort gives the kernels). */
static void sort_by_token(const int32_t *inp, int BT, int V, int32_t *tok, int32_t *pos) {
  int *start = calloc((size_t)V + 1, sizeof *start);
  for (int i = 0; i < BT; i++) start[inp[i] + 1]++;
  for (int v = 0; v < V; v++) start[v + 1] += start[v];
  for (int i = 0; i < BT; i++) {
    int at = start[inp[i]]++;
    tok[at] = inp[i];
    pos[at] = i;
  }
  free(start);
}

/* Both steps over every chunk and column, the chunks in the order `order` (a permutation). */
static void run_chunks(float *dwte, const float *dout, const int32_t *tok, const int32_t *pos,
                       int BT, int C, const int *order) {
  const int n = emb_n_chunks(BT);
  float *head = malloc(sizeof(float) * (size_t)n * C), *cont = malloc(sizeof(float) * n * C);
  for (size_t i = 0; i < (size_t)n * C; i++) head[i] = cont[i] = NAN; /* unwritten: poison */
  for (int i = 0; i < n; i++)
    for (int c = 0; c < C; c++) emb_chunk_sum(dwte, head, cont, dout, tok, pos, BT, C, order[i], c);
  for (int i = n - 1; i >= 0; i--)
    for (int c = C - 1; c >= 0; c--) emb_chunk_join(dwte, head, cont, tok, BT, C, order[i], c);
  free(head);
  free(cont);
}

/* One shape: inp (BT tokens of V), C columns. */
static void check_shape(const int32_t *inp, int BT, int V, int C) {
  float *dout = malloc(sizeof(float) * (size_t)BT * C), *init = malloc(sizeof(float) * V * C);
  float *ref = malloc(sizeof(float) * V * C), *got[3];
  for (int i = 0; i < BT * C; i++) dout[i] = frand();
  for (int i = 0; i < V * C; i++) init[i] = frand();
  memcpy(ref, init, sizeof(float) * V * C);
  for (int i = 0; i < BT; i++) /* the CPU device's order */
    for (int c = 0; c < C; c++) ref[(size_t)inp[i] * C + c] += dout[(size_t)i * C + c];
  int32_t *tok = malloc(sizeof(int32_t) * BT), *pos = malloc(sizeof(int32_t) * BT);
  sort_by_token(inp, BT, V, tok, pos);
  const int n = emb_n_chunks(BT);
  int *order = malloc(sizeof(int) * n);
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < n; i++) order[i] = k == 0 ? i : k == 1 ? n - 1 - i : (i * 7 + 3) % n;
    if (k == 2 && n % 7 == 0) /* not a permutation then: a plain rotation instead */
      for (int i = 0; i < n; i++) order[i] = (i + n / 2) % n;
    got[k] = malloc(sizeof(float) * V * C);
    memcpy(got[k], init, sizeof(float) * V * C);
    run_chunks(got[k], dout, tok, pos, BT, C, order);
  }
  ck_assert_msg(memcmp(got[0], got[1], sizeof(float) * V * C) == 0 &&
                memcmp(got[0], got[2], sizeof(float) * V * C) == 0,
                "BT %d: the result depends on the order the chunks ran in", BT);
  int first[4096], last[4096];
  for (int v = 0; v < V; v++) first[v] = -1, last[v] = -1;
  for (int i = 0; i < BT; i++) {
    if (first[tok[i]] < 0) first[tok[i]] = i;
    last[tok[i]] = i;
  }
  for (int v = 0; v < V; v++) {
    int one_chunk = first[v] < 0 || first[v] / EMB_CHUNK == last[v] / EMB_CHUNK;
    double worst = 0.0;
    for (int c = 0; c < C; c++) {
      float g = got[0][(size_t)v * C + c], r = ref[(size_t)v * C + c];
      if (one_chunk)
        ck_assert_msg(memcmp(&g, &r, sizeof g) == 0, "BT %d token %d column %d: %.9g, the CPU "
                      "%.9g (its run lies in one chunk: the CPU's bits)", BT, v, c, g, r);
      double mag = fabs(init[(size_t)v * C + c]); /* |terms| bounds the rounding */
      for (int i = 0; i < BT; i++)
        if (inp[i] == v) mag += fabs(dout[(size_t)i * C + c]);
      double e = fabs((double)g - r) / (mag > 0 ? mag : 1);
      if (e > worst) worst = e;
    }
    /* two fp32 summation orders of m terms differ by at most ~2 m u |terms| */
    int m = last[v] - first[v] + 2;
    ck_assert_msg(worst <= 2.0 * m * 0x1p-24, "BT %d token %d: relative error %.3g", BT, v,
                  worst);
  }
  for (int k = 0; k < 3; k++) free(got[k]);
  free(order), free(tok), free(pos), free(dout), free(init), free(ref);
}

/* A frequent token (a third of the positions) among random ones, over many chunks. */
START_TEST(frequent_token_many_chunks) {
  enum { BT = 4096 + 37, V = 50, C = 7 };
  static int32_t inp[BT];
  for (int i = 0; i < BT; i++) inp[i] = i % 3 == 0 ? 7 : (int32_t)((frand() + 1.0f) * 24.99f);
  check_shape(inp, BT, V, C);
}
END_TEST

/* The edges: fewer entries than one chunk, exactly one chunk, one token everywhere (every chunk
 * a middle piece of one run), a run that ends exactly on a chunk boundary, distinct tokens. */
START_TEST(edge_shapes) {
  static int32_t inp[3 * EMB_CHUNK + 5];
  for (int i = 0; i < 17; i++) inp[i] = i % 4;
  check_shape(inp, 17, 4, 3);
  for (int i = 0; i < EMB_CHUNK; i++) inp[i] = i % 5;
  check_shape(inp, EMB_CHUNK, 5, 2);
  for (int i = 0; i < 3 * EMB_CHUNK + 5; i++) inp[i] = 2;
  check_shape(inp, 3 * EMB_CHUNK + 5, 3, 4);
  for (int i = 0; i < 2 * EMB_CHUNK; i++) inp[i] = i < EMB_CHUNK ? 0 : 1 + i % 3;
  check_shape(inp, 2 * EMB_CHUNK, 4, 2);
  for (int i = 0; i < 2 * EMB_CHUNK + 1; i++) inp[i] = 2 * EMB_CHUNK - i;
  check_shape(inp, 2 * EMB_CHUNK + 1, 2 * EMB_CHUNK + 1, 1);
  inp[0] = 0;
  check_shape(inp, 1, 1, 5);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cuda_embed");
  check_add_tcase(s, "chunks", CHECK_TESTS(frequent_token_many_chunks, edge_shapes), NULL, NULL,
                  60);
  return check_run_suite(s, CK_FORK_GETENV);
}
