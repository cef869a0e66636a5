/* The model as plugins see it (loom_model_v1): built from the gpt_model's parameter table.
 * The tensor views point at the gpt_param data/grad fields, so a plugin that redirects a view
 * redirects what the layer code reads. */
#include <stdlib.h>
#include <string.h>

#include "abi/abi_compat.h"
#include "runtime.h"

int loom__model_view_build(loom_runtime *rt) {
  gpt_model *m = &rt->model;
  loom_model_v1 *v = &rt->model_view;
  memset(v, 0, sizeof *v);
  rt->tensors = calloc((size_t)m->n_params, sizeof *rt->tensors);
  rt->tensor_tied = calloc((size_t)m->n_params, sizeof *rt->tensor_tied);
  rt->unit_offset = calloc((size_t)m->n_units + 1, sizeof *rt->unit_offset);
  if (!rt->tensors || !rt->unit_offset || !rt->tensor_tied) return -1;
  for (int u = 0; u <= m->n_units; u++) rt->unit_offset[u] = m->unit_offset[u];
  /* under pipeline parallel: the stage's tensors only (and the last stage's tied wte copy,
   * unit n_layer+1, at the end of its flat buffer) */
  int k = 0;
  for (int i = 0; i < m->n_params; i++) {
    gpt_param *p = &m->params[i];
    if (!p->present) continue;
    rt->tensor_tied[k] = p->tied_copy;
    loom_tensor_v1 *t = &rt->tensors[k++];
    t->struct_size = sizeof *t;
    t->name = p->name;
    t->unit = p->unit;
    t->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++) {
      t->shape[d] = p->shape[d];
      t->local_shape[d] = p->lshape[d];
    }
    t->split_dim = p->split_dim;
    t->split_parts = p->split_parts;
    t->numel = p->numel;
    t->offset = p->offset;
    t->weight_decay = p->ndim >= 2; /* GPT-2/nanoGPT: decay matmul weights and embeddings */
    t->data = &p->data;
    t->grad = &p->grad;
  }
  v->struct_size = loom__abi_model_view_size(); /* sizeof *v, but for LOOM_TEST_HOST_MINOR */
  v->n_layer = m->cfg.n_layer;
  v->n_head = m->cfg.n_head;
  v->n_embd = m->cfg.n_embd;
  v->vocab_size = m->cfg.vocab_size;
  v->max_seq_len = m->cfg.max_seq_len;
  v->n_units = m->n_units;
  v->unit_offset = rt->unit_offset;
  v->numel = m->num_parameters;
  v->compute_dtype = rt->compute_dtype;
  v->param_dtype = rt->plan.v.param_dtype;
  v->grad_dtype = rt->plan.v.grad_dtype;
  v->plan = &rt->plan.v;
  v->params = m->params_memory;
  v->grads = m->grads_memory;
  v->n_tensors = k;
  v->tensors = rt->tensors;
  return 0;
}

void loom__model_view_free(loom_runtime *rt) {
  free(rt->tensors);
  free(rt->tensor_tied);
  free(rt->unit_offset);
  rt->tensor_tied = NULL;
  rt->tensors = NULL;
  rt->unit_offset = NULL;
  memset(&rt->model_view, 0, sizeof rt->model_view);
}
