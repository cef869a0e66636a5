/* Check suite for tensor parallel in the GPT model (core/model/gpt.c, tp_size > 1):
 *  - shapes: every rank's split tensors are 1/tp of the full ones along split_dim, replicated
 *    tensors equal; the flat buffer holds the local tensors;
 *  - init: each rank's slice holds exactly the single-rank initial values (gpt_init_weights and
 *    gpt_init_weights_range), reassembled by an independent mapping;
 *  - forward/backward: tp ranks run as threads whose region hook sums the buffers (the
 *    all-reduce of Megatron's f and g), and the loss and every reassembled gradient match the
 *    single-rank model; with sequence_parallel (Korthikanti et al. 2022, §4.2.2) the threads'
 *    all-gather, reduce-scatter and all-reduce hooks carry the (B, T/tp, C) shards and the
 *    LayerNorms' gradient sums instead, with the same result (B = 2: the staging permute). */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/host_v1.h>

#include "device/device.h"
#include "fp_tolerance.h"
#include "gpt_path.h"
#include "model/gpt.h"
#include "util/rng.h"
#include "support/check_suite.h"

#define MAXTP 4
static const gpt_config base = {.vocab_size = 19, .max_seq_len = 8, .n_layer = 2, .n_head = 4,
                                .n_embd = 16};

static loom_dev devs[MAXTP + 1];
static gpt_model full, part[MAXTP];

static void setup(void) {
  char err[256];
  for (int i = 0; i <= MAXTP; i++)
    ck_assert_int_eq(loom__dev_open(&devs[i], loom__cpu_device(), "{\"threads\":1}", 0, err,
                                    sizeof err), LOOM_OK);
  memset(&full, 0, sizeof full);
  memset(part, 0, sizeof part);
}

static void teardown(void) {
  if (full.params) gpt_free(&full);
  for (int r = 0; r < MAXTP; r++)
    if (part[r].params) gpt_free(&part[r]);
  for (int i = 0; i <= MAXTP; i++) loom__dev_close(&devs[i]);
}

static void build_sp(int tp, int sp) {
  char err[256];
  ck_assert_msg(gpt_init(&full, &base, &devs[MAXTP], err, sizeof err) == LOOM_OK, "%s", err);
  for (int r = 0; r < tp; r++) {
    gpt_config c = base;
    c.tp_size = tp;
    c.tp_rank = r;
    c.sequence_parallel = sp;
    ck_assert_msg(gpt_init(&part[r], &c, &devs[r], err, sizeof err) == LOOM_OK, "%s", err);
  }
}

static void build(int tp) { build_sp(tp, 0); }

/* Global flat index (within the tensor) of local element (i, j) of rank r — written from the
 * Megatron layout, independently of gpt.c: qkv rows are [q; k; v], each C rows, head-major. */
static size_t global_of(const gpt_param *p, int tp, int r, int64_t i, int64_t j) {
  int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
  if (p->split_dim < 0) return (size_t)(i * cols + j);
  if (p->split_dim == 1) return (size_t)(i * cols + r * p->lshape[1] + j);
  int64_t per_part = p->shape[0] / p->split_parts, lrows = per_part / tp;
  int64_t gi = (i / lrows) * per_part + r * lrows + i % lrows;
  return (size_t)(gi * cols + j);
}

static void check_shapes(int tp) {
  build(tp);
  size_t rep = 0, split = 0;
  for (int k = 0; k < full.n_params; k++) {
    const gpt_param *f = &full.params[k];
    for (int r = 0; r < tp; r++) {
      const gpt_param *p = &part[r].params[k];
      ck_assert_str_eq(p->name, f->name);
      ck_assert_int_eq(p->shape[0], f->shape[0]); /* shape stays global */
      ck_assert_int_eq(p->shape[1], f->shape[1]);
      ck_assert_int_eq(p->split_dim, f->split_dim);
      int split_role = p->role == GPT_QKV_W || p->role == GPT_QKV_B || p->role == GPT_FC_W ||
                       p->role == GPT_FC_B || p->role == GPT_ATTPROJ_W ||
                       p->role == GPT_FCPROJ_W;
      ck_assert_int_eq(p->split_dim >= 0, split_role);
      if (p->split_dim < 0) {
        ck_assert_uint_eq(p->numel, f->numel);
        ck_assert_int_eq(p->lshape[0], f->shape[0]);
      } else {
        ck_assert_uint_eq(p->numel * (size_t)tp, f->numel);
        ck_assert_int_eq(p->lshape[p->split_dim] * tp, f->shape[p->split_dim]);
        ck_assert_int_eq(p->lshape[1 - p->split_dim], f->shape[1 - p->split_dim]);
      }
      if (k + 1 < full.n_params) /* contiguous in the local flat buffer */
        ck_assert_uint_eq(part[r].params[k + 1].offset, p->offset + p->numel);
    }
    if (f->split_dim < 0) rep += f->numel;
    else split += f->numel;
  }
  for (int r = 0; r < tp; r++)
    ck_assert_uint_eq(part[r].num_parameters, rep + split / (size_t)tp);
}

START_TEST(test_shapes_tp2) { check_shapes(2); }
END_TEST
START_TEST(test_shapes_tp4) { check_shapes(4); }
END_TEST

START_TEST(test_refuses_bad_tp) {
  gpt_config c = base;
  c.tp_size = 3;
  char err[256] = "";
  gpt_model m;
  ck_assert_int_eq(gpt_init(&m, &c, &devs[0], err, sizeof err), LOOM_INVALID_CONFIG);
  ck_assert_ptr_nonnull(strstr(err, "divisible by the tensor-parallel size (3)"));
}
END_TEST

/* Every rank's initial values are the single-rank ones at the mapped positions; the range
 * variant (what ZeRO-3 uses) agrees with the whole-model init on arbitrary ranges. */
static void check_init(int tp) {
  build(tp);
  gpt_init_weights(&full, 42);
  for (int r = 0; r < tp; r++) {
    gpt_model *m = &part[r];
    gpt_init_weights(m, 42);
    for (int k = 0; k < m->n_params; k++) {
      const gpt_param *p = &m->params[k];
      int64_t lcols = p->ndim == 2 ? p->lshape[1] : 1;
      for (int64_t i = 0; i < p->lshape[0]; i++)
        for (int64_t j = 0; j < lcols; j++) {
          float got = m->params_memory[p->offset + (size_t)(i * lcols + j)];
          float want = full.params_memory[full.params[k].offset + global_of(p, tp, r, i, j)];
          ck_assert_msg(got == want, "tp %d rank %d %s (%lld,%lld): %g vs %g", tp, r, p->name,
                        (long long)i, (long long)j, got, want);
        }
    }
    size_t n = m->num_parameters;
    float *dst = malloc(n * sizeof(float));
    size_t ranges[][2] = {{0, n}, {7, 1000}, {n / 3, n / 2}, {n - 5, 5}};
    for (size_t q = 0; q < 4; q++) {
      size_t b = ranges[q][0], len = ranges[q][1];
      if (b + len > n) len = n - b;
      gpt_init_weights_range(m, 42, b, len, dst);
      ck_assert_int_eq(memcmp(dst, m->params_memory + b, len * sizeof(float)), 0);
    }
    free(dst);
  }
}

START_TEST(test_init_tp2) { check_init(2); }
END_TEST
START_TEST(test_init_tp4) { check_init(4); }
END_TEST

/* ---- tp ranks as threads: the region hook is an in-process all-reduce ---- */
typedef struct shared {
  pthread_barrier_t bar;
  int tp;
  float *bufs[MAXTP];
  float *sum;
  int calls[2][2]; /* [which][backward] counted by rank 0 */
} shared;

typedef struct rank_arg {
  shared *sh;
  int rank;
  const int32_t *inp, *tgt;
  int B, T;
  float loss;
  int rc;
} rank_arg;

/* buf (n floats) = its sum over the ranks, in place on every rank. */
static void th_sum(rank_arg *a, float *buf, size_t n) {
  shared *sh = a->sh;
  sh->bufs[a->rank] = buf;
  pthread_barrier_wait(&sh->bar);
  if (a->rank == 0)
    for (size_t i = 0; i < n; i++) {
      float s = 0.0f;
      for (int r = 0; r < sh->tp; r++) s += sh->bufs[r][i];
      sh->sum[i] = s;
    }
  pthread_barrier_wait(&sh->bar);
  memcpy(buf, sh->sum, n * sizeof(float));
  pthread_barrier_wait(&sh->bar);
}

static int th_region(void *ud, int which, int backward, float *buf, size_t n) {
  rank_arg *a = ud;
  if (a->rank == 0) a->sh->calls[which][backward]++;
  int reduce = which == GPT_REGION_F ? backward : !backward;
  if (reduce) th_sum(a, buf, n);
  return 0;
}

/* Sequence parallel's collectives between the threads: every rank publishes its buffer, then
 * reads the others' (all-gather: the shards in rank order; reduce-scatter: its block of the
 * sum; all-reduce: the sum), then waits until all have read. */
static int th_all_gather(void *ud, const float *shard, float *full, size_t n) {
  rank_arg *a = ud;
  shared *sh = a->sh;
  sh->bufs[a->rank] = (float *)shard;
  pthread_barrier_wait(&sh->bar);
  for (int r = 0; r < sh->tp; r++) memcpy(full + (size_t)r * n, sh->bufs[r], n * sizeof(float));
  pthread_barrier_wait(&sh->bar);
  return 0;
}
static int th_reduce_scatter(void *ud, const float *full, float *shard, size_t n) {
  rank_arg *a = ud;
  shared *sh = a->sh;
  sh->bufs[a->rank] = (float *)full;
  pthread_barrier_wait(&sh->bar);
  for (size_t i = 0; i < n; i++) {
    float s = 0.0f;
    for (int r = 0; r < sh->tp; r++) s += sh->bufs[r][(size_t)a->rank * n + i];
    shard[i] = s;
  }
  pthread_barrier_wait(&sh->bar);
  return 0;
}
static int th_reduce(void *ud, void *buf, size_t n, int dtype, int op) {
  if (dtype != LOOM_F32 || op != LOOM_OP_SUM) return LOOM_INVALID_USAGE;
  th_sum(ud, buf, n);
  return 0;
}

static void *rank_main(void *p) {
  rank_arg *a = p;
  gpt_hooks h = {.ud = a, .region = th_region, .tp_reduce = th_reduce,
                 .tp_all_gather = th_all_gather, .tp_reduce_scatter = th_reduce_scatter};
  gpt_model *m = &part[a->rank];
  a->rc = gpt_forward(m, a->inp, a->tgt, a->B, a->T, &h, &a->loss);
  if (!a->rc) a->rc = gpt_backward(m, 1.0f / (float)(a->B * a->T), &h);
  return NULL;
}

static void check_fwd_bwd_sp(int tp, int sp) {
  build_sp(tp, sp);
  const int B = 2, T = 8, N = B * T;
  int32_t inp[16], tgt[16];
  loom_rng rng;
  loom__rng_seed(&rng, 7);
  for (int i = 0; i < N; i++) {
    inp[i] = (int32_t)(loom__rng_u64(&rng) % (uint64_t)base.vocab_size);
    tgt[i] = (int32_t)(loom__rng_u64(&rng) % (uint64_t)base.vocab_size);
  }
  gpt_init_weights(&full, 5);
  gpt_zero_grad(&full);
  float want_loss;
  ck_assert_int_eq(gpt_forward(&full, inp, tgt, B, T, NULL, &want_loss), LOOM_OK);
  ck_assert_int_eq(gpt_backward(&full, 1.0f / (float)N, NULL), LOOM_OK);

  shared sh = {.tp = tp};
  sh.sum = malloc((size_t)N * base.n_embd * sizeof(float));
  pthread_barrier_init(&sh.bar, NULL, (unsigned)tp);
  pthread_t th[MAXTP];
  rank_arg args[MAXTP];
  for (int r = 0; r < tp; r++) {
    gpt_init_weights(&part[r], 5);
    gpt_zero_grad(&part[r]);
    args[r] = (rank_arg){.sh = &sh, .rank = r, .inp = inp, .tgt = tgt, .B = B, .T = T};
    pthread_create(&th[r], NULL, rank_main, &args[r]);
  }
  for (int r = 0; r < tp; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&sh.bar);
  free(sh.sum);
  /* f and g each once per column/row-parallel matmul: 2 per block, forward and backward (none
   * under sequence parallel: its gathers and scatters replace them) */
  for (int w = 0; w < 2; w++)
    for (int b = 0; b < 2; b++) ck_assert_int_eq(sh.calls[w][b], sp ? 0 : 2 * base.n_layer);
  /* The split GEMMs reduce over C / tp and the all-reduce adds the tp partial sums: another
   * order of the same sums, so every value may round differently (two fp32 computations over
   * the whole path). Gradients per tensor and rank, norm-wise over the rank's slice. */
  const double loss_tol = fp32_tol(2, gpt_forward_reductions(&base, T) + N);
  const double grad_tol =
      fp32_tol(2, gpt_forward_reductions(&base, T) + gpt_backward_reductions(&base, B, T));
  double worst_loss = 0, worst_grad = 0;
  for (int r = 0; r < tp; r++) {
    ck_assert_int_eq(args[r].rc, LOOM_OK);
    double le = fabs((double)args[r].loss - want_loss) / fabs(want_loss);
    worst_loss = fmax(worst_loss, le);
    ck_assert_msg(le <= loss_tol, "rank %d loss %.8g vs %.8g (rel err %.3e > %.1e)", r,
                  args[r].loss, want_loss, le, loss_tol);
    gpt_model *m = &part[r];
    for (int k = 0; k < m->n_params; k++) {
      const gpt_param *p = &m->params[k];
      int64_t lcols = p->ndim == 2 ? p->lshape[1] : 1;
      double d2 = 0, r2 = 0, wi = 0, wj = 0, wd = -1;
      for (int64_t i = 0; i < p->lshape[0]; i++)
        for (int64_t j = 0; j < lcols; j++) {
          float got = m->grads_memory[p->offset + (size_t)(i * lcols + j)];
          float want = full.grads_memory[full.params[k].offset + global_of(p, tp, r, i, j)];
          double d = fabs((double)got - want);
          if (d > wd) wd = d, wi = (double)i, wj = (double)j;
          d2 += d * d;
          r2 += (double)want * want;
        }
      double e = d2 == 0 ? 0 : sqrt(d2 / fmax(r2, 1e-60));
      worst_grad = fmax(worst_grad, e);
      ck_assert_msg(e <= grad_tol,
                    "tp %d rank %d grad %s: ||got-want||/||want|| %.3e > %.1e (worst (%g,%g) off "
                    "by %.3g)",
                    tp, r, p->name, e, grad_tol, wi, wj, wd);
    }
  }
  printf("tp %d%s: loss rel err %.2e (tol %.1e), worst gradient ||a-b||/||b|| %.2e (tol "
         "%.1e)\n", tp, sp ? " x sp" : "", worst_loss, loss_tol, worst_grad, grad_tol);
}
static void check_fwd_bwd(int tp) { check_fwd_bwd_sp(tp, 0); }

START_TEST(test_fwd_bwd_tp2) { check_fwd_bwd(2); }
END_TEST
START_TEST(test_fwd_bwd_tp4) { check_fwd_bwd(4); }
END_TEST
START_TEST(test_fwd_bwd_tp2_sp) { check_fwd_bwd_sp(2, 1); }
END_TEST
START_TEST(test_fwd_bwd_tp4_sp) { check_fwd_bwd_sp(4, 1); }
END_TEST

static Suite *tp_suite(void) {
  const check_case cases[] = {
      {"shapes_tp2", test_shapes_tp2}, {"shapes_tp4", test_shapes_tp4},
      {"refuses_bad_tp", test_refuses_bad_tp}, {"init_tp2", test_init_tp2},
      {"init_tp4", test_init_tp4}, {"fwd_bwd_tp2", test_fwd_bwd_tp2},
      {"fwd_bwd_tp4", test_fwd_bwd_tp4}, {"fwd_bwd_tp2_sp", test_fwd_bwd_tp2_sp},
      {"fwd_bwd_tp4_sp", test_fwd_bwd_tp4_sp},
  };
  return check_case_suite("gpt_tp", CHECK_CASES(cases), setup, teardown, 60);
}

int main(void) {
  return check_run_suite(tp_suite(), CK_FORK);
}
