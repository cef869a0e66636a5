/* `loom conformance --device NAME [--options JSON] [--dtype fp32|bf16|all]`: every kernel of a
 * device backend's table against the float64 reference (device_reference.c) on the same fp32
 * inputs, at the shapes of the models loom trains and at odd ones. docs/conformance.md.
 *
 * Tolerance, per output tensor: max|device - reference| / max|reference| <= c * lambda * sqrt(n)
 * * u (docs/tolerances.md: Higham & Mary's probabilistic bound, lambda = 6, c = 1 against
 * float64), n the reduction length of the kernel (stated with each check), u the unit roundoff of
 * the arithmetic: fp32 2^-24; a GEMM in TF32 (--options '{"tf32": true}', a CUDA option) 2^-11
 * on its products. The bf16 pass rounds every input to bf16 first and tells the device
 * set_compute_dtype(bf16): a bf16 GEMM with fp32 accumulation is then exact on its inputs, so
 * the fp32 bound stands. round_to and convert are checked bitwise. The bf16 pass ends with ABI
 * 1.8's acts16 tables, bf16 then fp16 (device_checks_acts16.c: one 16-bit store more in the
 * bound, and bitwise the fp32 slots plus round_to). ABI 1.9's lse attention (fp32 and acts16) is
 * checked where set, reported SKIP where NULL (the host keeps att). A device whose create_ex
 * refuses (no GPU, no driver) is reported SKIP with its reason, exit 0. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_conformance.h"
#include "device_suite.h"
#include "device/device.h"
#include "runtime/device_open.h"
#include "runtime/loader.h"

static const dc_shape shapes[] = {
    {"tiny", 4, 64, 32, 2, 256},          /* configs/tiny.json */
    {"fortunes", 8, 128, 256, 8, 256},    /* configs/fortunes_*.json (the main job) */
    {"gpt2_slice", 1, 256, 768, 12, 50257}, /* GPT-2 124M's C, heads, V; T cut to 256 */
    {"odd", 3, 7, 15, 3, 61},             /* nothing a multiple of 8 or 32 */
    {"odd_wide", 1, 33, 100, 4, 1001},
    {"t1", 2, 1, 32, 2, 256},             /* T = 1 */
};

/* ABI 1.8's acts16 table for dt, asked as the host asks it (after set_compute_dtype(dt), which
 * the inputs then honour: rounded to dt) and checked at every shape; SKIP where it is NULL. */
static void check_acts16(dc_suite *s, loom_dtype dt, int quick) {
  const char *dn = dt == LOOM_BF16 ? "acts16.bf16" : "acts16.fp16";
  if (s->ops->acts16 && s->ops->set_compute_dtype) s->ops->set_compute_dtype(s->ctx, dt);
  const loom_device_acts16_v1 *t = s->ops->acts16 ? s->ops->acts16(s->ctx, dt) : NULL;
  if (!t) {
    dc_line("SKIP", dn, s->ops->acts16 ? "acts16 gives NULL for this dtype: the host keeps "
            "fp32 activation buffers" : "no acts16 (ABI 1.8 slot NULL): the host keeps fp32 "
            "activation buffers");
    s->skipped++;
    return;
  }
  const void *slots[] = {(void *)t->encoder_forward, (void *)t->encoder_backward,
                         (void *)t->layernorm_forward, (void *)t->layernorm_backward,
                         (void *)t->matmul_forward, (void *)t->matmul_backward,
                         (void *)t->attention_forward, (void *)t->attention_backward,
                         (void *)t->gelu_forward, (void *)t->gelu_backward,
                         (void *)t->residual_forward, (void *)t->crossentropy_fused};
  /* the 1.8 table ends with crossentropy_fused: a struct_size short of it reads as incomplete
   * to the host (gpt.c copies only what struct_size covers) */
  const size_t need = offsetof(loom_device_acts16_v1, crossentropy_fused) + sizeof(void *);
  int complete = t->dtype == dt && t->struct_size >= need;
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) complete &= slots[i] != NULL;
  dc_line(complete ? "PASS" : "FAIL", dn, complete ? "table of this dtype and size, every kernel "
          "set" : "the table's dtype differs, its struct_size is short or a kernel is NULL");
  if (!complete) {
    s->failed++;
    return;
  }
  s->passed++;
  const loom_dtype saved = s->dtype;
  s->dtype = dt;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    if (!quick || shapes[i].B * shapes[i].T * shapes[i].C <= 8192)
      dc_check_acts16(s, t, &shapes[i]);
  s->dtype = saved;
}

static int usage(FILE *out) {
  fprintf(out, "usage: loom conformance --device NAME [--options JSON] [--dtype fp32|bf16|all]"
               " [--quick]\n"
               "  NAME: cpu (built in), a device plugin on the search path (cuda) or a .so path\n"
               "  --options JSON  the \"device\" object the backend gets (e.g. {\"tf32\": true})\n"
               "  --dtype         inputs exact in fp32 (default: all = fp32 and bf16 passes;\n"
               "                  the bf16 pass ends with the 16-bit activation tables)\n"
               "  --quick         the small shapes only (tiny, odd, T=1)\n");
  return out == stdout ? 0 : 2;
}

int loom_device_conformance_main(int argc, char **argv) {
  const char *name = NULL, *options = "{}", *dtypes = "all";
  int quick = 0;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
    if (!strcmp(a, "--quick")) {
      quick = 1;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "loom conformance: %s needs a value\n", a);
      return usage(stderr);
    }
    if (!strcmp(a, "--device")) name = argv[++i];
    else if (!strcmp(a, "--options")) options = argv[++i];
    else if (!strcmp(a, "--dtype")) dtypes = argv[++i];
    else {
      fprintf(stderr, "loom conformance: unknown argument '%s'\n", a);
      return usage(stderr);
    }
  }
  if (!name || (strcmp(dtypes, "fp32") && strcmp(dtypes, "bf16") && strcmp(dtypes, "all")))
    return usage(stderr);
  json_error_t jerr;
  json_t *opts = json_loads(options, 0, &jerr);
  if (!json_is_object(opts)) {
    fprintf(stderr, "loom conformance: --options: expected a JSON object, got '%s'\n", options);
    json_decref(opts);
    return 2;
  }
  dc_suite s = {.u_gemm = json_is_true(json_object_get(opts, "tf32")) ? U_TF32 : U32,
             .rng = 0x10c0ffee};
  json_decref(opts);

  loom_plugin plugin;
  memset(&plugin, 0, sizeof plugin);
  const char *where = "built in";
  if (!strcmp(name, "cpu")) {
    s.ops = loom__cpu_device();
  } else {
    char e[1200];
    if (loom__plugin_open(&plugin, name, LOOM_KIND_DEVICE, e, sizeof e) != 0) {
      dc_line("FAIL", "device.load", e);
      printf("summary: 0 passed, 1 failed, 0 skipped\n");
      return 1;
    }
    s.ops = &plugin.u.device;
    where = plugin.path;
  }
  char detail[1400];
  snprintf(detail, sizeof detail, "'%s' [%s], ABI %u.%u, caps 0x%llx%s", s.ops->hdr.name, where,
           s.ops->hdr.abi_major, s.ops->hdr.abi_minor, (unsigned long long)s.ops->hdr.caps,
           s.ops->hdr.caps & LOOM_DEVICE_CAP_HOST_ADDRESSABLE ? " (host-addressable)" : "");
  dc_line("PASS", "device.load", detail);
  s.passed++;
  int local_rank, local_size;
  const char *source;
  loom__local_rank(NULL, &local_rank, &local_size, &source);
  loom_dev dev;
  char e[1024];
  if (loom__dev_open_ex(&dev, s.ops, options, local_rank, local_size, e, sizeof e) != LOOM_OK) {
    /* no GPU, no driver: every case is skipped, with the backend's reason */
    dc_line("SKIP", "device.create", e);
    printf("summary: %d passed, 0 failed, all kernel cases skipped (%s)\n", s.passed, e);
    loom__plugin_close(&plugin);
    return 0;
  }
  s.ctx = dev.ctx;
  dc_line("PASS", "device.create", "");
  s.passed++;
  for (int pass = 0; pass < 2; pass++) {
    s.dtype = pass ? LOOM_BF16 : LOOM_F32;
    if ((pass == 0 && !strcmp(dtypes, "bf16")) || (pass == 1 && !strcmp(dtypes, "fp32")))
      continue;
    if (pass == 1 && !s.ops->round_to) {
      dc_line("SKIP", "bf16", "the backend has no 16-bit storage (ABI 1.3 slots)");
      s.skipped++;
      continue;
    }
    if (s.ops->set_compute_dtype) s.ops->set_compute_dtype(s.ctx, s.dtype);
    char path[160]; /* the built-in CPU says which GEMM path this pass runs (bf16 units or not) */
    if (loom__cpu_describe(&dev, path, sizeof path))
      printf("%s pass on the cpu: %s\n", pass ? "bf16" : "fp32", path);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      if (!quick || shapes[i].B * shapes[i].T * shapes[i].C <= 8192) {
        dc_check_gpt(&s, &shapes[i]);
        dc_check_fused_classifier(&s, &shapes[i]);
      }
    if (pass == 0) {
      dc_check_vectors(&s, 4096);
      if (!quick) dc_check_vectors(&s, 100003);
    }
    if (pass == 1) /* ABI 1.8 */
      for (int k = 0; k < 2; k++)
        check_acts16(&s, k ? LOOM_F16 : LOOM_BF16, quick);
  }
  loom__dev_close(&dev);
  loom__plugin_close(&plugin);
  printf("summary: %d passed, %d failed, %d skipped; closest to its bound: %s at %.2f of it",
         s.passed, s.failed, s.skipped, s.worst_name[0] ? s.worst_name : "-", s.worst_ratio);
  if (s.worst16_name[0]) /* the acts16 outputs' bounds hold a 16-bit store's half ulp */
    printf("; with a 16-bit store: %s at %.2f", s.worst16_name, s.worst16_ratio);
  printf("\n");
  return s.failed ? 1 : 0;
}
