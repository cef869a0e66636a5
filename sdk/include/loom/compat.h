/* loom ABI v1 — the plugin side of compatibility: reading what a host of ANY 1.x minor hands
 * a plugin. The one place a plugin's sources learn ABI history; the host side (adapting an
 * older plugin's tables) is core/abi/abi_compat.c.
 *
 * A plugin built against these headers may be loaded by an older host, whose structs end
 * earlier (their struct_size): a field past the end is not there. Each accessor below says
 * what an older host means where the field is missing. Nothing here reads past a struct's
 * declared size (LOOM_COVERS / LOOM_HAS, common_v1.h).
 *
 *   ABI 1.1  loom_tensor_v1: split_dim, local_shape, split_parts (tensor parallel)
 *   ABI 1.2  host: n_micro
 *   ABI 1.3  loom_model_v1.compute_dtype; device round_to / convert
 *   ABI 1.4  loom_model_v1.param_dtype / grad_dtype, loom_partition_v1.master; host:
 *            adamw_range_mixed, micro_tokens; device create_ex, native_stream, crossentropy_fused;
 *            loom_ckpt_state_v1.slices (LOOM_CKPT_HAS_SLICES, kept in checkpoint_v1.h)
 *   ABI 1.5  host: grads_predivided
 *   ABI 1.6  loom_model_v1.plan (loom_storage_plan_v1)
 *   ABI 1.7  device matmul_forward_w / matmul_backward_w (NULL: the host widens the weights)
 *   ABI 1.8  device acts16: the GPT kernels on 16-bit activations (NULL: fp32 activation buffers)
 *   ABI 1.9  device attention_forward_lse / attention_backward_lse, and the same two appended to
 *            loom_device_acts16_v1 (NULL: the host keeps the (B,NH,T,T) probabilities)
 *   ABI 1.10 device error (NULL: the device never reports a fault; LOOM_DEVICE_ERROR)
 *   ABI 1.11 mesh axes DP_SHARD / DP_REPLICA (hybrid sharding; LOOM_SHARD_AXIS), parallel
 *            hybrid (LOOM_PAR_HYBRID_SHARD), estimate plan dp_shard / dp_replica
 *   ABI 1.13 mesh axis CP (context parallel; an older host answers size -1, comm NULL: check
 *            api->abi_minor >= 13), parallel cap AXIS_CP and slot ring, estimate plan cp
 *            (LOOM_COVERS), device attention_block_forward / _backward (NULL: no context
 *            parallel on that device) */
#ifndef LOOM_COMPAT_H
#define LOOM_COMPAT_H

#include "common_v1.h"
#include "device_v1.h"
#include "host_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True when the host's table holds `slot` and sets it (Redis's RMAPI_FUNC_SUPPORTED). */
#define LOOM_HOST_HAS(api, slot) LOOM_HAS(api, slot)

/* The compute dtype of a model view from any host (LOOM_F32 before ABI 1.3). */
#define LOOM_MODEL_COMPUTE_DTYPE(m) (LOOM_COVERS(m, compute_dtype) ? (m)->compute_dtype : LOOM_F32)
/* The storage dtypes of a model view from any host (LOOM_F32 before ABI 1.4). */
#define LOOM_MODEL_PARAM_DTYPE(m) (LOOM_COVERS(m, param_dtype) ? (m)->param_dtype : LOOM_F32)
#define LOOM_MODEL_GRAD_DTYPE(m) (LOOM_COVERS(m, grad_dtype) ? (m)->grad_dtype : LOOM_F32)

/* The fp32 master of a partition from any host (NULL before ABI 1.4: no 16-bit storage there,
 * the parameters are their own master). */
#define LOOM_PARTITION_MASTER(p) (LOOM_COVERS(p, master) ? (p)->master : NULL)

/* The gradient scale of the optimizer step's arguments (1 where a host does not pass one). */
#define LOOM_STEP_GRAD_SCALE(a) (LOOM_COVERS(a, grad_scale) ? (a)->grad_scale : 1.0f)

/* A device's fault (device_v1.error, ABI 1.10) from any table, e.g. api->device(): the
 * device's message, or NULL while it is healthy or when its table has no error slot. */
#define LOOM_DEVICE_ERROR(dev, ctx) (LOOM_HAS(dev, error) ? (dev)->error(ctx) : (const char *)0)

/* The axis a sharding plugin partitions over: DP_SHARD on a 1.11 host (the whole DP group
 * unless the config asks for hybrid sharding), DP on an older host (which has no DP_SHARD). */
#define LOOM_SHARD_AXIS(api) ((api)->abi_minor >= 11 ? LOOM_AXIS_DP_SHARD : LOOM_AXIS_DP)

/* 1 when a model view describes tensor-parallel splits (ABI 1.1 tensor fields). */
#define LOOM_MODEL_HAS_SPLITS(m) \
  ((m)->n_tensors > 0 && LOOM_COVERS(&(m)->tensors[0], split_parts))

/* The storage plan of the run, from any host: a copy of the host's (ABI 1.6, m->plan), or
 * for an older host the plan it followed, rebuilt from what it published: compute_dtype
 * (1.3), param_dtype / grad_dtype (1.4), api->grads_predivided (1.5); the communication
 * defaults from the rules those hosts left to the plugins (16-bit gradient reductions and
 * activations under a 16-bit compute dtype on a device with convert). `m` is api->model(host)
 * (setup or later). Fields a newer host adds past this header's struct are not copied; fields
 * an older 1.6+ host lacks read 0. */
static inline loom_storage_plan_v1 loom_storage_plan_of(const loom_host_api_v1 *api,
                                                        loom_host *host,
                                                        const loom_model_v1 *m) {
  loom_storage_plan_v1 p;
  unsigned char *dst = (unsigned char *)&p;
  for (size_t i = 0; i < sizeof p; i++) dst[i] = 0;
  if (LOOM_HAS(m, plan)) {
    const unsigned char *src = (const unsigned char *)m->plan;
    size_t n = LOOM_STRUCT_SIZE(m->plan) < sizeof p ? LOOM_STRUCT_SIZE(m->plan) : sizeof p;
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
    p.struct_size = (uint32_t)sizeof p;
    return p;
  }
  /* a host of ABI 1.5 or older: the rules it ran by */
  void *dctx = 0;
  const loom_device_v1 *dev = api->device ? api->device(host, &dctx) : 0;
  const int convert = dev && LOOM_HAS(dev, convert);
  const loom_dtype c = LOOM_MODEL_COMPUTE_DTYPE(m);
  const int c16 = (c == LOOM_BF16 || c == LOOM_F16) && convert;
  p.struct_size = (uint32_t)sizeof p;
  p.compute_dtype = c;
  p.param_dtype = LOOM_MODEL_PARAM_DTYPE(m);
  p.grad_dtype = LOOM_MODEL_GRAD_DTYPE(m);
  p.master_dtype = LOOM_F32;
  p.master_is_params = p.param_dtype == LOOM_F32;
  p.dp = api->size(host, LOOM_AXIS_DP);
  p.grad_comm_dtype = c != LOOM_F32 && p.dp > 1 ? c : LOOM_F32;
  p.param_comm_dtype = p.param_dtype;
  p.activation_comm_dtype = c16 ? c : LOOM_F32;
  p.grads_predivided = LOOM_HOST_HAS(api, grads_predivided) && api->grads_predivided(host);
  p.reason = "host ABI < 1.6: plan rebuilt from its model view";
  return p;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_COMPAT_H */
