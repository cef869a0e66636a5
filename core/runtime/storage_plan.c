/* The storage plan: one function decides it (see storage_plan.h). */
#include "storage_plan.h"

#include <stdio.h>
#include <string.h>

#include "abi/abi_compat.h"
#include "runtime.h"

static const char *dtype_name(loom_dtype dt) {
  switch (dt) {
    case LOOM_BF16: return "bf16";
    case LOOM_F16: return "fp16";
    default: return "fp32";
  }
}

int loom__plan_grads_predivided(const loom_runtime *rt, int dp) {
  int i = rt->grad_sync_owner;
  /* the loader zero-filled what a plugin of ABI <= 1.4 lacks: grad_sync reads 0 there; and the
   * host predivides only where its table tells the plugins so (LOOM_TEST_HOST_MINOR=4: not) */
  return i >= 0 && dp > 1 && loom__abi_host_minor() >= 5 &&
         (rt->parallel[i].u.parallel.grad_sync & LOOM_PAR_GRAD_PREDIVIDED) != 0;
}

int loom__grads_predivided(const loom_runtime *rt) {
  return loom__plan_grads_predivided(rt, rt->mesh.dp);
}

void loom__storage_plan(const loom_runtime *rt, loom_dtype compute, int dp, loom_plan *out) {
  const loom_config *cfg = rt->cfg;
  memset(out, 0, sizeof *out);
  out->legacy = -1;
  /* 16-bit storage only when every parallel plugin says it handles 16-bit buffers (a field,
   * not "built against 1.4": a rebuilt plugin is not thereby written for them) */
  for (int i = 0; i < rt->n_parallel && out->legacy < 0; i++)
    if (!(rt->parallel[i].u.parallel.storage & LOOM_PAR_STORAGE_16BIT)) out->legacy = i;
  const int c16 = compute == LOOM_BF16 || compute == LOOM_F16;
  const int accum = cfg->train.grad_accum_steps;
  loom_storage_plan_v1 *v = &out->v;
  v->struct_size = sizeof *v;
  v->compute_dtype = compute;
  v->param_dtype = compute != LOOM_F32 && out->legacy < 0 ? compute : LOOM_F32;
  /* accumulation over micro-batches in fp32 (DeepSpeed's grad_accum_dtype) */
  v->grad_dtype = v->param_dtype != LOOM_F32 && accum <= 1 ? compute : LOOM_F32;
  v->master_dtype = LOOM_F32;
  v->master_is_params = v->param_dtype == LOOM_F32;
  v->grad_comm_dtype = compute != LOOM_F32 && dp > 1 ? compute : LOOM_F32;
  v->param_comm_dtype = v->param_dtype;
  v->activation_comm_dtype = c16 ? compute : LOOM_F32;
  v->grads_predivided = loom__plan_grads_predivided(rt, dp);
  v->dp = dp;
  v->reason = out->reason;

  char *r = out->reason;
  size_t len = sizeof out->reason, n = 0;
  if (compute == LOOM_F32)
    n += (size_t)snprintf(r, len, "fp32 storage: the precision computes in fp32");
  else if (out->legacy >= 0)
    n += (size_t)snprintf(r, len, "%s values in fp32 buffers: %s (%s) does not set "
                          "LOOM_PAR_STORAGE_16BIT", dtype_name(compute),
                          cfg->parallel[out->legacy].name, cfg->parallel[out->legacy].json_path);
  else if (v->grad_dtype == LOOM_F32)
    n += (size_t)snprintf(r, len, "%s parameters, fp32 gradients: grad_accum_steps %d > 1 "
                          "(fp32 accumulation)", dtype_name(compute), accum);
  else
    n += (size_t)snprintf(r, len, "%s parameters and gradients: every parallel plugin sets "
                          "LOOM_PAR_STORAGE_16BIT", dtype_name(compute));
  if (n < len && dp > 1 && rt->grad_sync_owner >= 0) {
    const loom_plugin_cfg *pc = &cfg->parallel[rt->grad_sync_owner];
    if (v->grads_predivided)
      snprintf(r + n, len - n, "; gradients predivided by dp %d: %s sets "
               "LOOM_PAR_GRAD_PREDIVIDED", dp, pc->name);
    else
      snprintf(r + n, len - n, "; %s averages the gradients itself (%s)", pc->name,
               loom__abi_host_minor() < 5 ? "host table cut to ABI 1.4"
                                          : "no LOOM_PAR_GRAD_PREDIVIDED");
  }
}
