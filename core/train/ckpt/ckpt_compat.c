/* Checkpoint compatibility (ckpt_compat.h): what train refuses before loading, for train and
 * check alike. */
#include "ckpt_compat.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/plugins.h"

int loom__vocab_fingerprint(const loom_config *cfg, char out[17], char *err, size_t errlen) {
  /* the file was loaded and checked by the tokenizer already; it is read again here without
   * blocking, as untrusted input */
  const char *path = cfg->data.vocab;
  char *text = NULL;
  if (path[0]) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > (64 << 20)) {
      if (fd >= 0) close(fd);
      snprintf(err, errlen, "%s: data.vocab: %s: cannot read it back as a regular file of at "
               "most 64 MiB", cfg->path, path);
      return -1;
    }
    text = calloc(1, (size_t)sb.st_size + 1);
    ssize_t got = text ? read(fd, text, (size_t)sb.st_size) : -1;
    close(fd);
    if (got != sb.st_size) {
      free(text);
      snprintf(err, errlen, "%s: data.vocab: %s: short read", cfg->path, path);
      return -1;
    }
  }
  json_t *j = json_loads(text ? text : "{\"type\": \"byte\", \"vocab_size\": 256}", 0, NULL);
  char *canon = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  const char *bytes = canon ? canon : text ? text : "";
  loom__fnv1a_hex(bytes, strlen(bytes), out);
  free(canon);
  json_decref(j);
  free(text);
  return 0;
}

/* "[2, 4]": units per stage of the saved split (from the checked stages array) and of now. */
static void units_text(const loom_runtime *rt, const loom_ckpt_meta *m, char *saved, char *run,
                       size_t n) {
  snprintf(saved, n, "[");
  snprintf(run, n, "[");
  for (int s = 0; m->stages && s < m->pp; s++) {
    json_t *x = json_array_get(m->stages, (size_t)s);
    size_t k = strlen(saved);
    snprintf(saved + k, n - k, "%s%lld", s ? ", " : "",
             (long long)(json_integer_value(json_object_get(x, "last_unit")) -
                         json_integer_value(json_object_get(x, "first_unit")) + 1));
  }
  for (int s = 0; s < rt->mesh.pp; s++) {
    size_t k = strlen(run);
    snprintf(run + k, n - k, "%s%d", s ? ", " : "", rt->pp_last[s] - rt->pp_first[s] + 1);
  }
  strncat(saved, "]", n - strlen(saved) - 1);
  strncat(run, "]", n - strlen(run) - 1);
  if (!m->stages) snprintf(saved, n, "[all]");
  if (rt->mesh.pp <= 1) snprintf(run, n, "[all]");
}

/* A checkpoint with the global view (items "KIND/TENSOR", each chunk a slice of a global
 * tensor) loads on any mesh this config can run, through a checkpoint plugin that reads it
 * (LOOM_CKPT_CAP_GLOBAL_VIEW). One from before it (items per rank, "params@pp1of2@tp0of2")
 * loads on the same tensor-parallel size and stage split only (any data-parallel size or ZeRO
 * stage): another split is named as such rather than as missing chunks. */
static int check_split(const loom_runtime *rt, const loom_ckpt_meta *m, char *err,
                       size_t errlen) {
  if (m->global_items) {
    if (rt->checkpoint.u.checkpoint.hdr.caps & LOOM_CKPT_CAP_GLOBAL_VIEW) return 0;
    snprintf(err, errlen,
             "checkpoint step %d: its items are slices of global tensors (saved with dp %d, "
             "tp %d, pp %d), and checkpoint plugin '%s' (ABI %d.%d) cannot load that layout "
             "(no LOOM_CKPT_CAP_GLOBAL_VIEW): use loom's checkpoint.so, or a plugin built "
             "against ABI 1.4 that declares it", m->step, m->dp, m->tp, m->pp,
             rt->checkpoint.u.checkpoint.hdr.name, rt->checkpoint.u.checkpoint.hdr.abi_major,
             rt->checkpoint.u.checkpoint.hdr.abi_minor);
    return -1;
  }
  int same_split = 1;
  for (int s = 0; m->pp == rt->mesh.pp && rt->mesh.pp > 1 && s < rt->mesh.pp; s++) {
    json_t *x = json_array_get(m->stages, (size_t)s);
    same_split &= json_integer_value(json_object_get(x, "first_unit")) == rt->pp_first[s] &&
                  json_integer_value(json_object_get(x, "last_unit")) == rt->pp_last[s];
  }
  if (m->pp != rt->mesh.pp || !same_split) {
    char saved[128], run[128];
    units_text(rt, m, saved, run, sizeof saved);
    snprintf(err, errlen,
             "checkpoint step %d: the pipeline split differs: it was saved with pp %d, units "
             "per stage %s; this run has pp %d, units per stage %s (its items are per stage — "
             "written before the global view, or by a checkpoint plugin without it — and hold "
             "that stage's units; resume with the same pipeline \"size\" and \"stages\", or "
             "start a new checkpoint dir)", m->step, m->pp, saved, rt->mesh.pp, run);
    return -1;
  }
  if (m->tp != rt->mesh.tp) {
    snprintf(err, errlen,
             "checkpoint step %d: the tensor-parallel size differs: it was saved with tp %d, "
             "this run has tp %d (its items are per tp rank — written before the global view, "
             "or by a checkpoint plugin without it — and hold that split's slices; resume with "
             "the same tensor_parallel \"size\", or start a new checkpoint dir)", m->step,
             m->tp, rt->mesh.tp);
    return -1;
  }
  return 0;
}

/* What would reinterpret the saved numbers is refused: another model (any model key) or
 * another vocabulary (token ids would mean other tokens). */
static int check_identity(const loom_config *cfg, const loom_tokenizer *tok,
                          const char *fingerprint, const loom_ckpt_meta *m, char *err,
                          size_t errlen) {
  struct { const char *key; int saved, now; } keys[] = {
    {"model.vocab_size", m->model.vocab_size, cfg->model.vocab_size},
    {"model.padded_vocab_size", m->model.padded_vocab_size, cfg->model.padded_vocab_size},
    {"model.context_length", m->model.context_length, cfg->model.context_length},
    {"model.n_layer", m->model.n_layer, cfg->model.n_layer},
    {"model.n_head", m->model.n_head, cfg->model.n_head},
    {"model.n_embd", m->model.n_embd, cfg->model.n_embd},
    {"the tokenizer's type", m->tokenizer.type, (int)tok->type},
    {"the tokenizer's vocab_size", m->tokenizer.vocab_size, tok->vocab_size},
  };
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (keys[i].saved != keys[i].now) {
      snprintf(err, errlen,
               "checkpoint step %d: %s was %d, this run has %d: the saved weights mean "
               "something else under it; resume with %s = %d, or start a new checkpoint dir",
               m->step, keys[i].key, keys[i].saved, keys[i].now, keys[i].key, keys[i].saved);
      return -1;
    }
  if (strcmp(m->tokenizer.fingerprint, fingerprint) != 0) {
    snprintf(err, errlen,
             "checkpoint step %d: the vocabulary differs: data.vocab (%s) has fingerprint %s, "
             "the checkpoint was trained with %s: token ids would name other tokens; use the "
             "vocabulary the checkpoint was trained with, or start a new checkpoint dir",
             m->step, cfg->data.vocab[0] ? cfg->data.vocab : "bytes, no file", fingerprint,
             m->tokenizer.fingerprint);
    return -1;
  }
  return 0;
}

int loom__ckpt_check_compat(const loom_runtime *rt, const loom_tokenizer *tok,
                            const char *fingerprint, const loom_ckpt_meta *m, char *err,
                            size_t errlen) {
  if (check_split(rt, m, err, errlen) != 0) return -1;
  return check_identity(rt->cfg, tok, fingerprint, m, err, errlen);
}

int loom__ckpt_preflight(loom_runtime *rt, const loom_tokenizer *tok, int *resume_step,
                         char *err, size_t errlen) {
  *resume_step = 0;
  if (!rt->has_checkpoint || !rt->checkpoint_ctx) return 0;
  const loom_config *cfg = rt->cfg;
  const loom_checkpoint_v1 *ck = &rt->checkpoint.u.checkpoint;
  loom_host *h = &rt->checkpoint_host;
  char e[1500];
  /* one rank's instance: the plugin reads the world size at create */
  ck->destroy(rt->checkpoint_ctx);
  rt->checkpoint_ctx = NULL;
  loom_mesh mesh = rt->mesh;
  rt->mesh.world_size = 1;
  rt->mesh.world_rank = 0;
  h->error[0] = '\0';
  int rc = ck->create(loom__host_api(), h, &h->opts, &rt->checkpoint_ctx);
  rt->mesh = mesh;
  if (rc != LOOM_OK) {
    rt->checkpoint_ctx = NULL;
    snprintf(err, errlen, "%s: %s: plugin %s: %s", cfg->path, cfg->checkpoint.json_path,
             h->label, h->error[0] ? h->error : "create failed");
    return -1;
  }
  int step = 0;
  if (ck->resume_step(rt->checkpoint_ctx, &step) != LOOM_OK) {
    snprintf(err, errlen, "%s: plugin %s: finding a checkpoint failed: %s", cfg->path,
             h->label, h->error[0] ? h->error : "no message");
    return -1;
  }
  if (step <= 0) return 0;
  *resume_step = step;
  loom_ckpt_state_v1 st0 = {.struct_size = sizeof st0, .step = step};
  const char *mt = NULL;
  if (ck->load(rt->checkpoint_ctx, step, &st0, &mt) != LOOM_OK) {
    snprintf(err, errlen, "%s: plugin %s: loading step %d failed: %s", cfg->path, h->label,
             step, h->error[0] ? h->error : "no message");
    return -1;
  }
  loom_ckpt_meta m;
  if (loom__ckpt_meta_parse(mt, &m, e, sizeof e) != 0) {
    snprintf(err, errlen, "%s: checkpoint step %d: manifest.json \"meta\": %s (the checkpoint "
             "is corrupt, or another version of loom wrote it)", cfg->path, step, e);
    return -1;
  }
  char fp[17];
  rc = m.step != step ? -1 : 0;
  if (rc) snprintf(e, sizeof e, "checkpoint step %d: its metadata says step %d: the checkpoint "
                   "is corrupt", step, m.step);
  if (!rc && loom__vocab_fingerprint(cfg, fp, err, errlen) != 0) {
    loom__ckpt_meta_free(&m);
    return -1;
  }
  if (!rc) rc = loom__ckpt_check_compat(rt, tok, fp, &m, e, sizeof e);
  if (rc) snprintf(err, errlen, "%s: %s", cfg->path, e);
  loom__ckpt_meta_free(&m);
  return rc;
}
