/* CPU GEMMs on oneDNN's matmul primitive (cpu_gemm.h).
 *
 * A primitive is specialised to its shapes, strides, dtypes and attributes, and
 * creating one costs far more than a small GEMM (tens of microseconds: oneDNN
 * JIT-compiles its kernel), so each distinct call is created once and kept in a
 * small cache keyed by all of them. The scratchpad is user-managed (one growing
 * buffer per context) and the packing buffers of the bf16 path are the
 * context's too, so a call allocates nothing once the shapes have been seen.
 *
 * Not thread-safe: one context is used by one host thread at a time (the
 * model's kernels run in order); oneDNN threads each primitive itself with
 * OpenMP (Debian's build uses OpenMP, so device.threads, which sets OpenMP's
 * count, governs it). */
#include "cpu_gemm.h"

#include <assert.h>
#include <dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

/* The oneDNN 2.x C API (op descriptors, output scales): 3.x renamed it. And device.threads sets
 * OpenMP's count, which governs oneDNN only when oneDNN runs on OpenMP (Debian's build does). */
#if DNNL_VERSION_MAJOR != 2
#error "loom's CPU GEMMs need oneDNN 2.x (Debian 12's libdnnl-dev 2.6)"
#endif
#if DNNL_CPU_THREADING_RUNTIME != DNNL_RUNTIME_OMP
#error "loom needs oneDNN built with the OpenMP CPU runtime (device.threads sets OpenMP's count)"
#endif

enum { CACHE_SLOTS = 256 }; /* distinct GEMMs of one model: ~10 linear + ~10 attention shapes */

typedef struct gemm_key {
  int ta, tb, M, N, K, lda, ldb, ldc; /* lda/ldb: of the operands as the primitive reads them */
  int bf16, c_bf16, has_bias; /* bf16 operands; a bf16 C (only with bf16 operands) */
  float alpha, beta;
} gemm_key;
/* hashed and compared as bytes: no padding may creep in */
_Static_assert(sizeof(gemm_key) == 13 * 4, "gemm_key must have no padding");

typedef struct gemm_entry {
  gemm_key key;
  int used;
  dnnl_primitive_t prim;
  dnnl_memory_t a, b, c, bias, scratch; /* handles set per call */
  size_t scratch_bytes;
} gemm_entry;

struct cpu_gemm {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  loom_dtype dtype; /* what set_dtype asked for */
  int bf16;         /* lowp calls pack to bf16 (dtype bf16 and the CPU has the units) */
  gemm_entry cache[CACHE_SLOTS];
  int next_evict; /* round-robin victim once the cache is full */
  void *scratch;  /* oneDNN scratchpad, grown to the largest entry's */
  size_t scratch_cap;
  uint16_t *pack[2];  /* bf16 copies of A and B */
  size_t pack_cap[2]; /* bytes */
  float *wide[4];     /* fp32 copies of 16-bit A, B, C on the fp32 path; [3]: loom__cpu_gemm_wide */
  size_t wide_cap[4]; /* bytes */
  int warned;         /* the dnnl_sgemm fallback has been reported */
  int force_fallback; /* loom__cpu_gemm_force_fallback (unit tests) */
};

static const struct {
  dnnl_cpu_isa_t isa;
  const char *name;
} isa_names[] = {
    {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
    {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
    {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
    {dnnl_cpu_isa_avx512_core, "avx512_core"},
    {dnnl_cpu_isa_avx512_mic_4ops, "avx512_mic_4ops"},
    {dnnl_cpu_isa_avx512_mic, "avx512_mic"},
    {dnnl_cpu_isa_avx2_vnni, "avx2_vnni"},
    {dnnl_cpu_isa_avx2, "avx2"},
    {dnnl_cpu_isa_avx, "avx"},
    {dnnl_cpu_isa_sse41, "sse41"},
};

const char *loom__cpu_gemm_isa(void) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  for (size_t i = 0; i < sizeof isa_names / sizeof isa_names[0]; i++)
    if (isa == isa_names[i].isa) return isa_names[i].name;
  return "default";
}

int loom__cpu_gemm_has_bf16(void) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  /* the ISA values are bit sets: AMX contains avx512_core_bf16's bits */
  return ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
         (unsigned)dnnl_cpu_isa_avx512_core_bf16;
}

cpu_gemm *loom__cpu_gemm_open(char *err, size_t errlen) {
  cpu_gemm *g = calloc(1, sizeof *g);
  if (!g) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  g->dtype = LOOM_F32;
  if (dnnl_engine_create(&g->engine, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&g->stream, g->engine, dnnl_stream_default_flags) != dnnl_success) {
    snprintf(err, errlen, "oneDNN has no CPU engine");
    loom__cpu_gemm_close(g);
    return NULL;
  }
  return g;
}

static void entry_release(gemm_entry *e) {
  dnnl_memory_t *mems[] = {&e->a, &e->b, &e->c, &e->bias, &e->scratch};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
    if (*mems[i]) dnnl_memory_destroy(*mems[i]);
  if (e->prim) dnnl_primitive_destroy(e->prim);
  memset(e, 0, sizeof *e);
}

void loom__cpu_gemm_close(cpu_gemm *g) {
  if (!g) return;
  for (int i = 0; i < CACHE_SLOTS; i++)
    if (g->cache[i].used) entry_release(&g->cache[i]);
  if (g->stream) dnnl_stream_destroy(g->stream);
  if (g->engine) dnnl_engine_destroy(g->engine);
  free(g->scratch);
  free(g->pack[0]);
  free(g->pack[1]);
  for (int i = 0; i < 4; i++) free(g->wide[i]);
  free(g);
}

void loom__cpu_gemm_set_dtype(cpu_gemm *g, loom_dtype dt) {
  g->dtype = dt;
  g->bf16 = dt == LOOM_BF16 && loom__cpu_gemm_has_bf16();
}

loom_dtype loom__cpu_gemm_operand_dtype(const cpu_gemm *g) {
  return g->bf16 ? LOOM_BF16 : LOOM_F32;
}

/* A 2-D descriptor of `rows` x `cols` (logical) whose element (r, c) is at r*rs
 * + c*cs. */
static int md2(dnnl_memory_desc_t *md, int rows, int cols, dnnl_data_type_t dt, int64_t rs,
               int64_t cs) {
  dnnl_dims_t dims = {rows, cols}, strides = {rs, cs};
  return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides) == dnnl_success;
}

/* Build the primitive of `k` into e (e->key = k on success). 0 when oneDNN
 * refuses it. */
static int entry_create(cpu_gemm *g, gemm_entry *e, const gemm_key *k) {
  const dnnl_data_type_t in = k->bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t a_md, b_md, c_md, bias_md;
  int ok = md2(&a_md, k->M, k->K, in, k->ta ? 1 : k->lda, k->ta ? k->lda : 1) &&
           md2(&b_md, k->K, k->N, in, k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1) &&
           md2(&c_md, k->M, k->N, k->c_bf16 ? dnnl_bf16 : dnnl_f32, k->ldc, 1) &&
           md2(&bias_md, 1, k->N, dnnl_f32, k->N, 1);
  dnnl_matmul_desc_t desc;
  if (!ok || dnnl_matmul_desc_init(&desc, &a_md, &b_md, k->has_bias ? &bias_md : NULL, &c_md) !=
                 dnnl_success)
    return 0;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
       dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
  if (ok && k->alpha != 1.0f)
    ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha) == dnnl_success;
  if (ok && k->beta != 0.0f) /* C += ...: the sum post-op reads dst before writing it */
    ok = dnnl_post_ops_create(&po) == dnnl_success &&
         dnnl_post_ops_append_sum(po, k->beta) == dnnl_success &&
         dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
  ok = ok && dnnl_primitive_desc_create(&pd, &desc, attr, g->engine, NULL) == dnnl_success &&
       dnnl_primitive_create(&e->prim, pd) == dnnl_success;
  if (ok) {
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
    ok = dnnl_memory_create(&e->a, &a_md, g->engine, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&e->b, &b_md, g->engine, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&e->c, &c_md, g->engine, DNNL_MEMORY_NONE) == dnnl_success &&
         (!k->has_bias ||
          dnnl_memory_create(&e->bias, &bias_md, g->engine, DNNL_MEMORY_NONE) == dnnl_success) &&
         (!e->scratch_bytes ||
          dnnl_memory_create(&e->scratch, sp, g->engine, DNNL_MEMORY_NONE) == dnnl_success);
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (!ok) {
    entry_release(e);
    return 0;
  }
  e->key = *k;
  e->used = 1;
  return 1;
}

static unsigned key_hash(const gemm_key *k) {
  const unsigned char *p = (const unsigned char *)k;
  unsigned h = 2166136261u; /* FNV-1a */
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 16777619u;
  return h;
}

/* The cached primitive for k, created on first use; NULL when oneDNN cannot
 * build it. */
static gemm_entry *entry_get(cpu_gemm *g, const gemm_key *k) {
  unsigned h = key_hash(k) % CACHE_SLOTS;
  for (int probe = 0; probe < CACHE_SLOTS; probe++) {
    gemm_entry *e = &g->cache[(h + (unsigned)probe) % CACHE_SLOTS];
    if (!e->used) return entry_create(g, e, k) ? e : NULL;
    if (memcmp(&e->key, k, sizeof *k) == 0) return e;
  }
  /* full (a run with more shapes than slots): replace one, round robin. Linear
   * probing needs no tombstones here: every slot stays used, so lookups still
   * end on a hit or a full scan. */
  gemm_entry *e = &g->cache[g->next_evict];
  g->next_evict = (g->next_evict + 1) % CACHE_SLOTS;
  entry_release(e);
  return entry_create(g, e, k) ? e : NULL;
}

static int grow(void **buf, size_t *cap, size_t bytes) {
  if (bytes <= *cap) return 1;
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) return 0;
  free(*buf);
  *buf = p;
  *cap = bytes;
  return 1;
}

/* dst (rows, cols) dense bf16 = src (rows of ld floats), rounded to nearest
 * even (exact on bf16-representable values). */
static void pack_bf16(uint16_t *dst, const float *src, int rows, int cols, int ld) {
  if (ld == cols) { /* contiguous: in blocks, for the threads */
    const size_t n = (size_t)rows * cols, blk = 65536, nblk = (n + blk - 1) / blk;
#pragma omp parallel for schedule(static) if (n > LOOM_CPU_PAR_MIN)
    for (size_t b = 0; b < nblk; b++)
      loom__cpu_bf16_pack(dst + b * blk, src + b * blk, n - b * blk < blk ? n - b * blk : blk);
    return;
  }
#pragma omp parallel for schedule(static) if ((size_t)rows * cols > LOOM_CPU_PAR_MIN)
  for (int r = 0; r < rows; r++)
    loom__cpu_bf16_pack(dst + (size_t)r * cols, src + (size_t)r * ld, (size_t)cols);
}

/* K = 0: C = beta * C + bias (oneDNN refuses empty reductions). */
static void gemm_empty_k(int M, int N, float beta, float *C, int ldc, const float *bias) {
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      float *c = C + (size_t)m * ldc + n;
      *c = (beta != 0.0f ? beta * *c : 0.0f) + (bias ? bias[n] : 0.0f);
    }
}

/* The widening path keeps every operand's layout (its leading dimension): the fp32 GEMM then
 * sees the descriptors the fp32 call on widened buffers would, so it picks the same kernel and
 * summation order (oneDNN's choice can depend on the strides). Elements of a (rows, ld) layout: */
static size_t span(int rows, int cols, int ld) { return (size_t)(rows - 1) * ld + cols; }

/* dst (rows of ld floats) = src (rows of ld elements of dt: BF16 or F16), widened (exact); the
 * padding between rows is not touched. */
static void widen_rows(float *dst, const void *src, loom_dtype dt, int rows, int cols, int ld) {
  const uint16_t *s16 = src;
  if (ld == cols) { /* dense (the model's operands): one conversion, threaded inside */
    loom__cpu_convert(NULL, dst, LOOM_F32, src, dt, (size_t)rows * cols);
    return;
  }
#pragma omp parallel for schedule(static) if ((size_t)rows * cols > LOOM_CPU_PAR_MIN)
  for (int r = 0; r < rows; r++)
    loom__cpu_convert(NULL, dst + (size_t)r * ld, LOOM_F32, s16 + (size_t)r * ld, dt,
                      (size_t)cols);
}

/* dst (rows of ld elements of dt: BF16 or F16) = src (rows of ld floats), rounded to nearest
 * even (round_to's rounding); the padding is not touched. */
static void narrow_rows(void *dst, loom_dtype dt, const float *src, int rows, int cols, int ld) {
  uint16_t *d16 = dst;
  if (ld == cols) {
    loom__cpu_convert(NULL, dst, dt, src, LOOM_F32, (size_t)rows * cols);
    return;
  }
#pragma omp parallel for schedule(static) if ((size_t)rows * cols > LOOM_CPU_PAR_MIN)
  for (int r = 0; r < rows; r++)
    loom__cpu_convert(NULL, d16 + (size_t)r * ld, dt, src + (size_t)r * ld, LOOM_F32,
                      (size_t)cols);
}

/* An fp32 view of operand x (rows of ld elements of dt): x itself when fp32, else widened
 * (exact) into the context's buffer `which` (0 A, 1 B, 2 C, 3 loom__cpu_gemm_wide), same ld. */
static float *as_f32(cpu_gemm *g, int which, const void *x, loom_dtype dt, int rows, int cols,
                     int ld) {
  if (dt == LOOM_F32) return (float *)x;
  if (!grow((void **)&g->wide[which], &g->wide_cap[which], span(rows, cols, ld) * sizeof(float))) {
    fprintf(stderr, "loom: cpu: out of memory widening a %dx%d GEMM operand\n", rows, cols);
    abort(); /* nothing to run the GEMM on; a result silently missing would be worse */
  }
  widen_rows(g->wide[which], x, dt, rows, cols, ld);
  return g->wide[which];
}

/* Run key k's primitive on a, b, c (as the key describes them). 0 when oneDNN cannot build it
 * or its scratchpad does not fit; aborts when it fails while running (c may be half written). */
static int run_primitive(cpu_gemm *g, const gemm_key *k, const void *a, const void *b, void *c,
                         const float *bias) {
  gemm_entry *e = g->force_fallback ? NULL : entry_get(g, k);
  if (e && e->scratch_bytes && !grow(&g->scratch, &g->scratch_cap, e->scratch_bytes)) e = NULL;
  if (!e) return 0;
  dnnl_memory_set_data_handle(e->a, (void *)a);
  dnnl_memory_set_data_handle(e->b, (void *)b);
  dnnl_memory_set_data_handle(e->c, c);
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}};
  int nargs = 3;
  if (bias) {
    dnnl_memory_set_data_handle(e->bias, (void *)bias);
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->bias};
  }
  if (e->scratch_bytes) {
    dnnl_memory_set_data_handle(e->scratch, g->scratch);
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch};
  }
  if (dnnl_primitive_execute(e->prim, g->stream, nargs, args) != dnnl_success ||
      dnnl_stream_wait(g->stream) != dnnl_success) {
    fprintf(stderr, "loom: cpu: oneDNN failed while running the %s matmul %dx%dx%d\n",
            k->bf16 ? "bf16" : "fp32", k->M, k->N, k->K);
    abort();
  }
  return 1;
}

/* C (fp32, ldc) = alpha op(A) op(B) + beta C + bias on fp32 operands, with oneDNN's BLAS-like
 * dnnl_sgemm (row-major, allocation-free): the fallback when no primitive can run (never seen at
 * the model's shapes). The same values but for the summation order; said once per context. */
static void run_sgemm(cpu_gemm *g, const gemm_key *k, const float *A, int lda, const float *B,
                      int ldb, float *C, int ldc, const float *bias) {
  if (!g->warned && !g->force_fallback) {
    fprintf(stderr, "loom: cpu: oneDNN could not run a %s matmul %dx%dx%d; dnnl_sgemm runs it "
            "(and any other such one)\n", k->bf16 ? "bf16" : "fp32", k->M, k->N, k->K);
    g->warned = 1;
  }
  const int M = k->M, N = k->N;
  if (bias)
    for (int m = 0; m < M; m++) {
      float *c = C + (size_t)m * ldc;
      for (int n = 0; n < N; n++) c[n] = (k->beta != 0.0f ? k->beta * c[n] : 0.0f) + bias[n];
    }
  if (dnnl_sgemm(k->ta ? 'T' : 'N', k->tb ? 'T' : 'N', M, N, k->K, k->alpha, A, lda, B, ldb,
                 bias ? 1.0f : k->beta, C, ldc) != dnnl_success) {
    fprintf(stderr, "loom: cpu: dnnl_sgemm failed on %dx%dx%d\n", M, N, k->K);
    abort(); /* nothing left to run a GEMM with; a result silently missing would be worse */
  }
}

static int is16(loom_dtype dt) { return dt == LOOM_BF16 || dt == LOOM_F16; }

/* The fp32 copy (M rows of ldc) a 16-bit C is computed in: C's widened values when beta reads
 * them. Aborts when out of memory. */
static float *c_copy(cpu_gemm *g, const void *C, loom_dtype cdt, int M, int N, int ldc,
                     float beta) {
  if (!grow((void **)&g->wide[2], &g->wide_cap[2], span(M, N, ldc) * sizeof(float))) {
    fprintf(stderr, "loom: cpu: out of memory for a %dx%d GEMM result\n", M, N);
    abort();
  }
  if (beta != 0.0f) widen_rows(g->wide[2], C, cdt, M, N, ldc);
  return g->wide[2];
}

int loom__cpu_gemm_reads16(const cpu_gemm *g, loom_dtype dt) { return g->bf16 && dt == LOOM_BF16; }

const float *loom__cpu_gemm_wide(cpu_gemm *g, const void *x, loom_dtype dt, int rows, int cols) {
  return as_f32(g, 3, x, dt, rows, cols, cols);
}

void loom__cpu_gemm_t(cpu_gemm *g, int ta, int tb, int M, int N, int K, float alpha,
                      const void *A, loom_dtype adt, int lda, const void *B, loom_dtype bdt,
                      int ldb, float beta, void *C, loom_dtype cdt, int ldc, const float *bias,
                      int lowp) {
  assert(!bias || alpha == 1.0f); /* cpu_gemm.h: the primitive and the fallback would differ */
  if (M <= 0 || N <= 0) return;
  const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  gemm_key k = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc,
                .has_bias = bias != NULL, .alpha = alpha, .beta = beta};
  /* bf16 operands where the CPU has the units; an fp16 operand or C goes the fp32 way */
  k.bf16 = K > 0 && lowp && g->bf16 && adt != LOOM_F16 && bdt != LOOM_F16 && cdt != LOOM_F16;
  if (k.bf16) { /* dense bf16 copies of what is not bf16 already, stored as the operands are */
    const void *a = A, *b = B;
    int ok = (adt == LOOM_BF16 ||
              grow((void **)&g->pack[0], &g->pack_cap[0], (size_t)ar * ac * 2)) &&
             (bdt == LOOM_BF16 ||
              grow((void **)&g->pack[1], &g->pack_cap[1], (size_t)br * bc * 2));
    if (ok) {
      if (adt == LOOM_F32) pack_bf16(g->pack[0], A, ar, ac, lda), a = g->pack[0], k.lda = ac;
      if (bdt == LOOM_F32) pack_bf16(g->pack[1], B, br, bc, ldb), b = g->pack[1], k.ldb = bc;
      k.c_bf16 = cdt == LOOM_BF16; /* oneDNN rounds the fp32 accumulator to nearest even */
      if (run_primitive(g, &k, a, b, C, bias)) return;
      if (k.c_bf16) { /* no bf16-C primitive: the same bf16 GEMM into an fp32 copy, rounded */
        float *c32 = c_copy(g, C, cdt, M, N, ldc, beta);
        k.c_bf16 = 0;
        if (run_primitive(g, &k, a, b, c32, bias)) {
          narrow_rows(C, cdt, c32, M, N, ldc);
          return;
        }
      }
    }
    k.bf16 = k.c_bf16 = 0; /* no memory for the copies, or no primitive: fp32 below */
    k.lda = lda, k.ldb = ldb;
  }
  /* fp32: 16-bit operands widened (exact); a 16-bit C computed in an fp32 copy (holding C's
   * widened values when beta reads them) and rounded to nearest even once at the end */
  const float *a32 = as_f32(g, 0, A, adt, ar, ac, lda);
  const float *b32 = as_f32(g, 1, B, bdt, br, bc, ldb);
  float *c32 = is16(cdt) ? c_copy(g, C, cdt, M, N, ldc, beta) : C;
  k.lda = lda, k.ldb = ldb, k.ldc = ldc;
  if (K <= 0) gemm_empty_k(M, N, beta, c32, ldc, bias);
  else if (!run_primitive(g, &k, a32, b32, c32, bias))
    run_sgemm(g, &k, a32, lda, b32, ldb, c32, ldc, bias);
  if (is16(cdt)) narrow_rows(C, cdt, c32, M, N, ldc);
}

void loom__cpu_gemm_w(cpu_gemm *g, int ta, int tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const void *B, loom_dtype bdt, int ldb, float beta,
                      float *C, int ldc, const float *bias, int lowp) {
  loom__cpu_gemm_t(g, ta, tb, M, N, K, alpha, A, LOOM_F32, lda, B, bdt, ldb, beta, C, LOOM_F32,
                   ldc, bias, lowp);
}

void loom__cpu_gemm(cpu_gemm *g, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                    int lda, const float *B, int ldb, float beta, float *C, int ldc,
                    const float *bias, int lowp) {
  loom__cpu_gemm_t(g, ta, tb, M, N, K, alpha, A, LOOM_F32, lda, B, LOOM_F32, ldb, beta, C,
                   LOOM_F32, ldc, bias, lowp);
}

void loom__cpu_gemm_force_fallback(cpu_gemm *g, int on) { g->force_fallback = on; }
