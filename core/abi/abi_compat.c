/* Host-side ABI shims (see abi_compat.h): every adaptation of an older minor's plugin table,
 * and the host table cut to an older minor for the tests. */
#include "abi_compat.h"
#include "util/test_hooks.h"

#include <stdlib.h>
#include <string.h>

size_t loom__abi_table_size(loom_plugin_kind kind) {
  switch (kind) {
    case LOOM_KIND_PARALLEL: return sizeof(loom_parallel_v1);
    case LOOM_KIND_PRECISION: return sizeof(loom_precision_v1);
    case LOOM_KIND_CHECKPOINT: return sizeof(loom_checkpoint_v1);
    case LOOM_KIND_COMM: return sizeof(loom_comm_v1);
    case LOOM_KIND_DEVICE: return sizeof(loom_device_v1);
  }
  return 0;
}

/* What a parallel plugin of an older minor lacks, and what the host then assumes:
 *   < 1.1  region: NULL (the loader's role check refuses SPLIT_LAYERS without it)
 *   < 1.2  run_step: NULL (likewise for SCHEDULE)
 *   < 1.4  storage = 0: not written for 16-bit buffers, the host keeps fp32 storage (the 1.3
 *          layout) and says which plugin (storage_plan.c)
 *   < 1.5  grad_sync = 0: the 1.0 contract, the plugin averages its sum itself
 * The zero-fill already gives these values; they are spelled out so the defaults of a future
 * field that is not 0 have their place. */
static void adapt_parallel(loom_parallel_v1 *p, size_t built) {
  if (built < offsetof(loom_parallel_v1, storage) + sizeof p->storage) p->storage = 0;
  if (built < offsetof(loom_parallel_v1, grad_sync) + sizeof p->grad_sync) p->grad_sync = 0;
}

/* A device of an older minor: < 1.3 no round_to / convert (fp32 only: the host refuses a
 * 16-bit precision on it, plugins.c); < 1.4 no create_ex (create is called), native_stream,
 * set_compute_dtype, crossentropy_fused (the separate classifier kernels); < 1.7 no
 * matmul_forward_w / matmul_backward_w (the host widens the weights); < 1.8 no acts16 (the
 * host keeps fp32 activation buffers); < 1.9 no attention_forward_lse /
 * attention_backward_lse (the host keeps the materialised probabilities; an acts16 table whose
 * struct_size ends before its lse fields likewise, gpt_device_has_attn_lse); < 1.10 no error
 * (the host takes the device as never failing: its faults show only as the NaNs it returns).
 * All NULL: the zero-filled copy gives it; round_to / convert are spelled out as the slots a
 * 16-bit run is refused on (the later ones have fallbacks), error as the one whose absence the
 * host must not mistake for a health report. */
static void adapt_device(loom_device_v1 *d, size_t built) {
  if (built < offsetof(loom_device_v1, round_to) + sizeof d->round_to) d->round_to = NULL;
  if (built < offsetof(loom_device_v1, convert) + sizeof d->convert) d->convert = NULL;
  if (built < offsetof(loom_device_v1, error) + sizeof d->error) d->error = NULL;
}

/* A comm plugin < 1.4 has no local (the launcher's variables, or 0 of 1); < 1.5 no
 * check_options (`loom check` checks nothing of its options). Checkpoint plugins < 1.4
 * declare no LOOM_CKPT_CAP_GLOBAL_VIEW and so are never handed slices (ckpt_glue.c). */

void loom__abi_copy_table(void *dst, size_t dst_size, const loom_plugin_header *hdr) {
  size_t full = loom__abi_table_size((loom_plugin_kind)hdr->kind);
  size_t n = hdr->struct_size < full ? hdr->struct_size : full;
  memset(dst, 0, dst_size);
  memcpy(dst, hdr, n < dst_size ? n : dst_size);
  if (hdr->kind == LOOM_KIND_PARALLEL) adapt_parallel(dst, n);
  if (hdr->kind == LOOM_KIND_DEVICE) adapt_device(dst, n);
}

void loom__abi_copy_device(loom_device_v1 *dst, const loom_device_v1 *src) {
  loom__abi_copy_table(dst, sizeof *dst, &src->hdr);
  if (dst->hdr.struct_size > sizeof *dst) dst->hdr.struct_size = (uint32_t)sizeof *dst;
}

/* LOOM_TEST_HOST_MINOR, read once at start-up (test_hooks.c): the answer must not change
 * during a run */
static int test_minor(void) {
  return loom__test_hooks()->host_minor == 4 ? 4 : LOOM_ABI_MINOR;
}

int loom__abi_host_minor(void) { return test_minor(); }

uint32_t loom__abi_model_view_size(void) {
  return test_minor() == 4 ? (uint32_t)offsetof(loom_model_v1, plan)
                           : (uint32_t)sizeof(loom_model_v1);
}

/* The table as a 1.4 host offers it — struct_size ending before the 1.5 slots — so the tests
 * can run a 1.5 plugin's fallback for an older host (ddp then averages itself, and the host
 * does not predivide: storage_plan.c asks loom__abi_host_minor). */
const loom_host_api_v1 *loom__abi_host_table(const loom_host_api_v1 *full) {
  static loom_host_api_v1 as_1_4;
  if (test_minor() != 4) return full;
  if (!as_1_4.struct_size) {
    as_1_4 = *full;
    as_1_4.struct_size = (uint32_t)offsetof(loom_host_api_v1, grads_predivided);
    as_1_4.abi_minor = 4;
  }
  return &as_1_4;
}
