/* mpi.so's sum collectives under mpirun (comm_collectives.sh runs 1, 2, 3 and 4 ranks): the
 * plugin loaded through the real loader and created with the host's API table, then
 * all_reduce, reduce_scatter and reduce_scatter_v of fp32, bf16 and fp16 against references
 * computed here from every rank's values (each rank generates them all):
 *   - integer-valued floats, whose sums are exact: the result must equal the exact sum;
 *   - random floats of mixed magnitude: the result must have exactly the bits of the documented
 *     association, ((x_0 + x_1) + x_2) + ... in rank order (16-bit: widen, add, round once per
 *     addition), and lie within (n-1)·u·Σ|x| of the float64 sum (u = 2^-24, 2^-8, 2^-11).
 *     Since all_reduce and reduce_scatter_v (cut anywhere) must both give those bits, this also
 *     proves that an element's sum does not depend on where a buffer is cut (ddp == ZeRO);
 *   - all_gather and all_gather_v (fp32, u8, i32, bf16) against every rank's bytes;
 *   - counts 0, 1, < ranks, not divisible by ranks or by the segment, uneven blocks with zeros,
 *     in place; blocking and non-blocking; two segment sizes (4 KiB: many segments, default);
 *   - several non-blocking collectives in flight, waited in a different order on each rank,
 *     and one rank waiting while the others sit in a blocking Open MPI collective (each of
 *     these deadlocks unless test/wait and blocking calls drive every outstanding collective);
 *   - every rank's results bitwise identical (a hash compared with MAX and MIN);
 *   - on 2 ranks, bitwise equal to Open MPI's own collectives ("collectives": "mpi");
 *   - a bad "collectives" value refused with a message that names the key.
 * Prints "comm_collectives: N checks passed on R ranks" and exits 0, or names each failure
 * (rank, collective, dtype, count, first wrong element) and exits 1.
 *
 *   mpirun -np R comm_collectives PATH/TO/mpi.so */
#include <jansson.h>
#include <loom/half_v1.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/loader.h"
#include "runtime/runtime.h"

static loom_plugin plug;
static const loom_comm_v1 *P;
static int me, n, checks, failures;

/* One line per failure, written at once (the ranks share stderr). */
#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    checks++;                                                                   \
    if (!(cond)) {                                                              \
      char m_[1024];                                                            \
      failures++;                                                               \
      int l_ = snprintf(m_, sizeof m_, "comm_collectives: rank %d of %d: FAIL: ", me, n); \
      snprintf(m_ + l_, sizeof m_ - (size_t)l_, __VA_ARGS__);                   \
      fprintf(stderr, "%s\n", m_);                                              \
    }                                                                           \
  } while (0)

/* One plugin instance: its own host handle (error messages) and context. */
typedef struct inst {
  loom_host host;
  void *ctx;
  loom_comm *world;
  const char *name;
} inst;

static int inst_create(inst *in, loom_runtime *rt, const char *name, json_t *opts) {
  loom__host_init(&in->host, rt, name, "comm_collectives", "comm", opts);
  in->name = name;
  int rc = P->create(loom__host_api(), &in->host, &in->host.opts, &in->ctx);
  if (rc == LOOM_OK) in->world = P->world_comm(in->ctx);
  return rc;
}

/* ---- values: every rank's, computed anywhere ---- */

static uint64_t mix(uint64_t x) { /* splitmix64 */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
/* Rank r's element i of test `seed`: integer-valued (exact sums) or random of mixed magnitude
 * (signs and exponents 2^-12..2^12, so the association shows in the bits). */
static float value(int exact, uint64_t seed, int r, size_t i) {
  uint64_t h = mix(seed * 1000003u + (uint64_t)r * 7919u + i);
  if (exact) return (float)((int)(h % 33) - 16);
  float m = (float)(h >> 40) / (float)(1u << 24);
  return (h & 1 ? -m : m) * ldexpf(1.0f, (int)((h >> 8) % 25) - 12);
}
static size_t esz(loom_dtype dt) { return dt == LOOM_F32 ? 4 : 2; }
static void put(loom_dtype dt, void *buf, size_t i, float v) {
  if (dt == LOOM_F32) ((float *)buf)[i] = v;
  else ((uint16_t *)buf)[i] = dt == LOOM_BF16 ? loom_f32_to_bf16(v) : loom_f32_to_f16(v);
}
static float get(loom_dtype dt, const void *buf, size_t i) {
  if (dt == LOOM_F32) return ((const float *)buf)[i];
  uint16_t h = ((const uint16_t *)buf)[i];
  return dt == LOOM_BF16 ? loom_bf16_to_f32(h) : loom_f16_to_f32(h);
}
static void fill(loom_dtype dt, void *buf, int exact, uint64_t seed, int r, size_t lo, size_t m) {
  for (size_t i = 0; i < m; i++) put(dt, buf, i, value(exact, seed, r, lo + i));
}
/* The documented association of element i, in dt's arithmetic, into ref[i - lo]. Also the
 * float64 sum and Σ|x| of the values as stored (for the error bound). */
static void reference(loom_dtype dt, void *ref, double *sum64, double *abs64, int exact,
                      uint64_t seed, size_t lo, size_t m) {
  for (size_t i = 0; i < m; i++) {
    float acc = 0;
    double s = 0, a = 0;
    for (int r = 0; r < n; r++) {
      uint16_t tmp[1];
      float x;
      if (dt == LOOM_F32) x = value(exact, seed, r, lo + i);
      else put(dt, tmp, 0, value(exact, seed, r, lo + i)), x = get(dt, tmp, 0);
      s += x;
      a += fabs(x);
      if (r == 0) acc = x;
      else if (dt == LOOM_F32) acc = acc + x;
      else put(dt, tmp, 0, acc + x), acc = get(dt, tmp, 0);
    }
    put(dt, ref, i, acc);
    if (sum64) sum64[i] = s, abs64[i] = a;
  }
}

static const char *dt_name(loom_dtype dt) {
  return dt == LOOM_F32 ? "fp32" : dt == LOOM_BF16 ? "bf16" : "fp16";
}

/* Compare m results with the reference: exact bits, and the error bound for random values. */
static void compare(const char *what, loom_dtype dt, const void *got, int exact, uint64_t seed,
                    size_t lo, size_t m) {
  void *ref = malloc(m * esz(dt) + 1);
  double *s = malloc(m * sizeof(double) + 1), *a = malloc(m * sizeof(double) + 1);
  reference(dt, ref, s, a, exact, seed, lo, m);
  double u = dt == LOOM_F32 ? 0x1p-24 : dt == LOOM_BF16 ? 0x1p-8 : 0x1p-11;
  size_t bad = 0, first = 0, out_of_bound = 0;
  for (size_t i = 0; i < m; i++) {
    if (memcmp((const char *)got + i * esz(dt), (char *)ref + i * esz(dt), esz(dt)) != 0 &&
        !bad++)
      first = i;
    /* storing the operands rounds too (16-bit): bound n·u·Σ|x| covers the n roundings */
    double bound = (exact ? 0 : (double)n * u * a[i]) * 1.0000001;
    if (!exact && dt == LOOM_F16) bound += n * 0x1p-25; /* fp16 subnormals: absolute error */
    if (fabs(get(dt, got, i) - s[i]) > bound) out_of_bound++;
  }
  CHECK(!bad, "%s %s: %zu of %zu elements differ from ((x0 + x1) + ...) in rank order; first at "
        "%zu: got %.9g, expected %.9g", what, dt_name(dt), bad, m, lo + first,
        (double)get(dt, got, first), (double)get(dt, ref, first));
  CHECK(!out_of_bound, "%s %s: %zu of %zu elements farther than n*u*sum|x| from the float64 sum",
        what, dt_name(dt), out_of_bound, m);
  free(ref);
  free(s);
  free(a);
}

/* All ranks hold the same bits: a hash's MAX and MIN over the world agree. */
static void same_everywhere(inst *in, const char *what, const void *buf, size_t bytes) {
  int64_t h = (int64_t)(mix(bytes) >> 1), mx, mn;
  for (size_t i = 0; i < bytes; i++) h = (int64_t)(mix((uint64_t)h ^ ((const uint8_t *)buf)[i]) >> 1);
  mx = mn = h;
  int rc = P->all_reduce(in->ctx, in->world, &mx, 1, LOOM_I64, LOOM_OP_MAX, NULL);
  rc |= P->all_reduce(in->ctx, in->world, &mn, 1, LOOM_I64, LOOM_OP_MIN, NULL);
  CHECK(rc == LOOM_OK && mx == mn, "%s: the ranks' results differ", what);
}

static int finish(inst *in, loom_request *req, int rc, const char *what) {
  if (rc == LOOM_OK && req) rc = P->wait(in->ctx, req);
  CHECK(rc == LOOM_OK, "%s: returned %d: %s", what, rc, in->host.error);
  return rc;
}

/* ---- the collectives ---- */

static uint64_t next_seed = 1;

static void t_all_reduce(inst *in, loom_dtype dt, size_t count, int exact, int nonblocking) {
  uint64_t seed = next_seed++;
  void *buf = malloc(count * esz(dt) + 1);
  fill(dt, buf, exact, seed, me, 0, count);
  char what[160];
  snprintf(what, sizeof what, "%s all_reduce(%zu, %s, %s)", in->name, count,
           exact ? "integers" : "random", nonblocking ? "non-blocking" : "blocking");
  loom_request *req = NULL;
  int rc = P->all_reduce(in->ctx, in->world, buf, count, dt, LOOM_OP_SUM,
                         nonblocking ? &req : NULL);
  if (finish(in, req, rc, what) == LOOM_OK) {
    compare(what, dt, buf, exact, seed, 0, count);
    same_everywhere(in, what, buf, count * esz(dt));
  }
  free(buf);
}

/* reduce_scatter_v with counts (uneven: through reduce_scatter_v; else reduce_scatter of
 * counts[0] each), recv separate or this rank's block inside send. */
static void t_reduce_scatter(inst *in, loom_dtype dt, const size_t *counts, int uneven,
                             int in_place, int nonblocking) {
  uint64_t seed = next_seed++;
  size_t total = 0, lo = 0;
  for (int k = 0; k < n; k++) {
    if (k == me) lo = total;
    total += counts[k];
  }
  char *send = malloc(total * esz(dt) + 1);
  fill(dt, send, 0, seed, me, 0, total);
  char *recv = in_place ? send + lo * esz(dt) : malloc(counts[me] * esz(dt) + 1);
  char what[200];
  snprintf(what, sizeof what, "%s %s(block %zu of %zu%s, %s)", in->name,
           uneven ? "reduce_scatter_v" : "reduce_scatter", counts[me], total,
           in_place ? ", in place" : "", nonblocking ? "non-blocking" : "blocking");
  loom_request *req = NULL, **r = nonblocking ? &req : NULL;
  int rc = uneven ? P->reduce_scatter_v(in->ctx, in->world, send, recv, counts, dt, LOOM_OP_SUM, r)
                  : P->reduce_scatter(in->ctx, in->world, send, recv, counts[0], dt, LOOM_OP_SUM, r);
  if (finish(in, req, rc, what) == LOOM_OK) compare(what, dt, recv, 0, seed, lo, counts[me]);
  if (!in_place) free(recv);
  free(send);
}

/* all_gather (even blocks of counts[0]) or all_gather_v of bytes-patterned elements of dt. */
static void t_all_gather(inst *in, loom_dtype dt, const size_t *counts, int uneven, int in_place,
                         int nonblocking) {
  uint64_t seed = next_seed++;
  size_t e = loom_dtype_size(dt), total = 0, lo = 0;
  for (int k = 0; k < n; k++) {
    if (k == me) lo = total;
    total += uneven ? counts[k] : counts[0];
  }
  uint8_t *recv = malloc(total * e + 1), *want = malloc(total * e + 1);
  memset(recv, 0xee, total * e);
  for (size_t i = 0, k = 0, at = 0; i < total * e; i++) { /* rank k's bytes in block k */
    while (at + (uneven ? counts[k] : counts[0]) * e <= i) at += (uneven ? counts[k++] : counts[0]) * e;
    want[i] = (uint8_t)mix(seed * 131 + k * 1000003u + (i - at));
  }
  uint8_t *send = in_place ? recv + lo * e : malloc((total - lo) * e + 1);
  memcpy(send, want + lo * e, (uneven ? counts[me] : counts[0]) * e);
  char what[200];
  snprintf(what, sizeof what, "%s %s(dtype %d, block %zu of %zu%s, %s)", in->name,
           uneven ? "all_gather_v" : "all_gather", (int)dt, uneven ? counts[me] : counts[0],
           total, in_place ? ", in place" : "", nonblocking ? "non-blocking" : "blocking");
  loom_request *req = NULL, **r = nonblocking ? &req : NULL;
  int rc = uneven ? P->all_gather_v(in->ctx, in->world, send, recv, counts, dt, r)
                  : P->all_gather(in->ctx, in->world, send, recv, counts[0], dt, r);
  if (finish(in, req, rc, what) == LOOM_OK) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < total * e; i++)
      if (recv[i] != want[i] && !bad++) first = i;
    CHECK(!bad, "%s: %zu of %zu bytes wrong, first at byte %zu", what, bad, total * e, first);
  }
  if (!in_place) free(send);
  free(recv);
  free(want);
}

/* Four collectives in flight, waited in a rank-dependent order (rank 0 starts them late, so
 * nobody finishes one inside its start), and polled with test() first when `poke`. */
static void t_in_flight(inst *in, size_t seg_elems, int poke) {
  enum { K = 4 };
  static const int orders[4][K] = {{0, 1, 2, 3}, {3, 2, 1, 0}, {2, 0, 3, 1}, {1, 3, 0, 2}};
  size_t count[K] = {3 * seg_elems * (size_t)n + 5, 7, seg_elems * (size_t)n + 1, 50001};
  loom_dtype dts[K] = {LOOM_F32, LOOM_BF16, LOOM_F16, LOOM_F32};
  uint64_t seed[K];
  void *buf[K], *recv3 = NULL;
  loom_request *req[K];
  size_t counts3[4] = {0}, lo3 = 0;
  for (int k = 0; k < n; k++) {
    counts3[k] = 12345 + (size_t)k * 1001; /* the last one: reduce_scatter_v */
    if (k < me) lo3 += counts3[k];
  }
  size_t total3 = 0;
  for (int k = 0; k < n; k++) total3 += counts3[k];
  count[3] = total3;
  for (int i = 0; i < K; i++) {
    seed[i] = next_seed++;
    buf[i] = malloc(count[i] * esz(dts[i]));
    fill(dts[i], buf[i], 0, seed[i], me, 0, count[i]);
  }
  recv3 = malloc(counts3[me] * 4 + 1);
  int rc = LOOM_OK;
  if (me == 0) usleep(50 * 1000);
  for (int i = 0; i < 3 && !rc; i++)
    rc = P->all_reduce(in->ctx, in->world, buf[i], count[i], dts[i], LOOM_OP_SUM, &req[i]);
  if (!rc) rc = P->reduce_scatter_v(in->ctx, in->world, buf[3], recv3, counts3, LOOM_F32,
                                    LOOM_OP_SUM, &req[3]);
  CHECK(rc == LOOM_OK, "%s: starting 4 collectives: %s", in->name, in->host.error);
  if (rc) exit(1);
  int done = 0;
  for (int t = 0; t < 3 * poke; t++) P->test(in->ctx, req[orders[me % 4][K - 1]], &done);
  for (int j = 0; j < K; j++) {
    int i = orders[me % 4][j];
    rc = P->wait(in->ctx, req[i]);
    CHECK(rc == LOOM_OK, "%s: wait of in-flight collective %d: %s", in->name, i, in->host.error);
  }
  for (int i = 0; i < 3; i++) compare("in flight: all_reduce", dts[i], buf[i], 0, seed[i], 0, count[i]);
  compare("in flight: reduce_scatter_v", LOOM_F32, recv3, 0, seed[3], lo3, counts3[me]);
  for (int i = 0; i < K; i++) free(buf[i]);
  free(recv3);
}

/* Rank 0 waits on a non-blocking sum while the others sit in a blocking MAX (Open MPI's): the
 * blocking call must drive the sum, or rank 0 never gets the others' reduced chunks. */
static void t_blocking_drives(inst *in, size_t count) {
  uint64_t seed = next_seed++;
  float *buf = malloc(count * 4);
  fill(LOOM_F32, buf, 1, seed, me, 0, count);
  loom_request *req = NULL;
  int32_t v = me, rc = P->all_reduce(in->ctx, in->world, buf, count, LOOM_F32, LOOM_OP_SUM, &req);
  if (me == 0 && !rc) rc = P->wait(in->ctx, req);
  if (!rc) rc = P->all_reduce(in->ctx, in->world, &v, 1, LOOM_I32, LOOM_OP_MAX, NULL);
  if (!rc) rc = P->barrier(in->ctx, in->world);
  if (me != 0 && !rc) rc = P->wait(in->ctx, req);
  CHECK(rc == LOOM_OK && v == n - 1, "%s: a blocking MAX while a sum is in flight: %s", in->name,
        in->host.error);
  if (!rc) compare("all_reduce waited around a blocking MAX", LOOM_F32, buf, 1, seed, 0, count);
  free(buf);
}

/* On 2 ranks loom's sums are Open MPI's bit for bit (float addition commutes). */
static void t_same_as_mpi(inst *own, inst *mpi, loom_dtype dt, size_t count) {
  uint64_t seed = next_seed++;
  void *a = malloc(count * esz(dt)), *b = malloc(count * esz(dt));
  fill(dt, a, 0, seed, me, 0, count);
  fill(dt, b, 0, seed, me, 0, count);
  int rc = P->all_reduce(own->ctx, own->world, a, count, dt, LOOM_OP_SUM, NULL);
  rc |= P->all_reduce(mpi->ctx, mpi->world, b, count, dt, LOOM_OP_SUM, NULL);
  CHECK(rc == LOOM_OK && !memcmp(a, b, count * esz(dt)),
        "all_reduce %s of %zu: loom's and Open MPI's results differ on 2 ranks", dt_name(dt),
        count);
  free(a);
  free(b);
}

static void battery(inst *in, size_t seg_bytes) {
  static const loom_dtype dts[3] = {LOOM_F32, LOOM_BF16, LOOM_F16};
  size_t seg = seg_bytes / 4, un = (size_t)n;
  size_t counts[] = {0, 1, un - 1, un, un + 1, 1000, 3 * seg * un + 7, 123457};
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
    for (int d = 0; d < 3; d++) {
      t_all_reduce(in, dts[d], counts[c], 1, c % 2);
      t_all_reduce(in, dts[d], counts[c], 0, (c + 1) % 2);
    }
  /* reduce_scatter: even blocks; reduce_scatter_v: uneven with zeros, one owner, tiny */
  size_t v[4][4];
  for (int k = 0; k < 4; k++) {
    v[0][k] = seg + 3;
    v[1][k] = k % 2 ? 0 : 2 * seg + 17 * (size_t)k + 1;
    v[2][k] = k == n - 1 ? 3 * seg + 1 : 0;
    v[3][k] = (size_t)k;
  }
  for (int d = 0; d < 3; d++)
    for (int p = 0; p < 4; p++)
      for (int in_place = 0; in_place < 2; in_place++) {
        if (p == 0) t_reduce_scatter(in, dts[d], v[p], 0, in_place, in_place);
        t_reduce_scatter(in, dts[d], v[p], 1, in_place, !in_place);
      }
  static const loom_dtype gdts[4] = {LOOM_F32, LOOM_U8, LOOM_I32, LOOM_BF16};
  for (int d = 0; d < 4; d++)
    for (int p = 0; p < 4; p++)
      for (int in_place = 0; in_place < 2; in_place++) {
        if (p == 0) t_all_gather(in, gdts[d], v[p], 0, in_place, in_place);
        t_all_gather(in, gdts[d], v[p], 1, in_place, !in_place);
      }
  t_in_flight(in, seg, 0);
  t_in_flight(in, seg, 1);
  t_blocking_drives(in, 4 * seg * un + 3);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: mpirun -np R comm_collectives PATH/TO/mpi.so\n");
    return 2;
  }
  char err[1024];
  if (loom__plugin_open(&plug, argv[1], LOOM_KIND_COMM, err, sizeof err) != 0) {
    fprintf(stderr, "comm_collectives: %s\n", err);
    return 1;
  }
  P = &plug.u.comm;
  loom_runtime *rt = calloc(1, sizeof *rt); /* no device: every buffer is host memory */
  /* a bad value is refused before MPI starts, naming the key */
  inst bad;
  json_t *o_bad = json_pack("{s:s}", "collectives", "ring-ish");
  int rc = inst_create(&bad, rt, "mpi (bad)", o_bad);
  int refused = rc == LOOM_INVALID_CONFIG && strstr(bad.host.error, "collectives") &&
                strstr(bad.host.error, "ring-ish");
  json_t *o_own = json_pack("{s:i}", "segment_bytes", 4096), *o_def = json_object(),
         *o_mpi = json_pack("{s:s}", "collectives", "mpi");
  inst own_small, own, mpi;
  if (inst_create(&own_small, rt, "loom, 4 KiB segments", o_own) ||
      inst_create(&own, rt, "loom", o_def) || inst_create(&mpi, rt, "mpi", o_mpi)) {
    fprintf(stderr, "comm_collectives: create failed: %s%s%s\n", own_small.host.error,
            own.host.error, mpi.host.error);
    return 1;
  }
  P->world(own.ctx, &me, &n);
  CHECK(refused, "\"collectives\": \"ring-ish\" was not refused by name (rc %d: %s)", rc,
        bad.host.error);
  battery(&own_small, 4096);
  battery(&own, 512 << 10);
  if (n == 2)
    for (int d = 0; d < 3; d++)
      t_same_as_mpi(&own, &mpi, (loom_dtype[]){LOOM_F32, LOOM_BF16, LOOM_F16}[d], 300001);
  int all_failures = failures;
  P->all_reduce(own.ctx, own.world, &all_failures, 1, LOOM_I32, LOOM_OP_MAX, NULL);
  if (me == 0 && !all_failures)
    printf("comm_collectives: %d checks passed on %d rank%s\n", checks, n, n > 1 ? "s" : "");
  P->destroy(mpi.ctx);
  P->destroy(own.ctx);
  P->destroy(own_small.ctx); /* created first, it started MPI: it finalizes */
  for (inst *i = &own_small; i; i = i == &own_small ? &own : i == &own ? &mpi : NULL)
    loom__host_release(&i->host);
  json_decref(o_bad);
  json_decref(o_own);
  json_decref(o_def);
  json_decref(o_mpi);
  free(rt);
  loom__plugin_close(&plug);
  return all_failures ? 1 : 0;
}
