#include "metrics.h"
#include "util/input_file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "trainer.h"

static int is_rank0(const loom_trainer *tr) { return tr->rt.mesh.world_rank == 0; }

/* mkdir -p of the directory part of `path` (errors surface when the file is opened). */
static void make_parent_dirs(const char *path) {
  char buf[LOOM_PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(buf, 0755);
      *p = '/';
    }
}

/* A run resumed at `step` keeps the records of steps <= step and drops the later ones (they
 * were logged after the checkpoint and are about to be logged again). Atomic: tmp + rename. */
static int truncate_after(const char *path, int step, char *err, size_t errlen) {
  FILE *in = fopen(path, "r");
  if (!in) return 0; /* nothing logged yet */
  char tmp[LOOM_PATH_MAX + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *out = fopen(tmp, "w");
  if (!out) {
    fclose(in);
    snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    return -1;
  }
  char line[4096];
  while (fgets(line, sizeof line, in)) {
    int s;
    if (sscanf(line, "{\"step\":%d", &s) == 1 && s > step) continue;
    fputs(line, out);
  }
  fclose(in);
  int bad = ferror(out);
  if (fclose(out) != 0 || bad || rename(tmp, path) != 0) {
    snprintf(err, errlen, "cannot rewrite %s: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}

int loom_metrics_open(loom_trainer *tr) {
  const char *path = tr->cfg.logging.metrics;
  if (!path[0]) return 0;
  make_parent_dirs(path);
  char e[1024];
  if (loom__check_output_path(path, e, sizeof e) != 0) { /* a FIFO would block the open */
    snprintf(tr->err, sizeof tr->err, "%s: logging.metrics: %s", tr->cfg.path, e);
    return -1;
  }
  if (tr->step > 0 && truncate_after(path, tr->step, e, sizeof e) != 0) {
    snprintf(tr->err, sizeof tr->err, "%s: logging.metrics: %s", tr->cfg.path, e);
    return -1;
  }
  /* a resumed run appends, a fresh run starts the file over */
  tr->metrics = fopen(path, tr->step > 0 ? "a" : "w");
  if (!tr->metrics) {
    snprintf(tr->err, sizeof tr->err, "%s: logging.metrics: cannot open %s: %s", tr->cfg.path,
             path, strerror(errno));
    return -1;
  }
  return 0;
}

static void fmt_duration(char *buf, size_t n, double s) {
  if (s < 0) s = 0;
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void loom_metrics_start(loom_trainer *tr) {
  if (!is_rank0(tr)) return;
  const loom_config *c = &tr->cfg;
  const loom_runtime *rt = &tr->rt;
  size_t global = 0; /* the model's size, whatever tensor parallel holds per rank */
  for (int i = 0; i < rt->model.n_params; i++) {
    const gpt_param *p = &rt->model.params[i];
    if (p->tied_copy) continue;
    global += (size_t)p->shape[0] * (size_t)(p->ndim == 2 ? p->shape[1] : 1);
  }
  char tpbuf[96] = "";
  if (rt->mesh.tp > 1 || rt->mesh.pp > 1)
    snprintf(tpbuf, sizeof tpbuf, " (%zu on this rank)", rt->model.num_parameters);
  char meshbuf[64];
  if (rt->mesh.pp > 1)
    snprintf(meshbuf, sizeof meshbuf, "pp %d x dp %d x tp %d, stage %d: units %d..%d",
             rt->mesh.pp, rt->mesh.dp, rt->mesh.tp, rt->mesh.pp_rank, rt->model.first_unit,
             rt->model.last_unit);
  else if (rt->mesh.tp > 1)
    snprintf(meshbuf, sizeof meshbuf, "dp %d x tp %d", rt->mesh.dp, rt->mesh.tp);
  else
    snprintf(meshbuf, sizeof meshbuf, "dp %d", rt->mesh.dp);
  printf("loom: %zu parameters%s | %d layers, %d heads, %d embd, vocab %d | world %d (%s) | "
         "global batch %llu x %d tokens (micro %d x accum %d x dp %d)\n",
         global, tpbuf, c->model.n_layer, c->model.n_head, c->model.n_embd,
         c->model.vocab_size, rt->mesh.world_size, meshbuf, (unsigned long long)tr->G,
         tr->T, tr->B, tr->accum, rt->mesh.dp);
  printf("loom: plugins:");
  for (int i = 0; i < rt->n_parallel; i++) printf(" %s", c->parallel[i].name);
  printf(" %s%s%s\n", c->precision.name, rt->has_checkpoint ? " " : "",
         rt->has_checkpoint ? c->checkpoint.name : "");
  if (c->activation_checkpointing.policy != GPT_CKPT_NONE) { /* what the activation peak shows */
    int k = c->activation_checkpointing.every;
    printf("loom: activation checkpointing: %s, ",
           c->activation_checkpointing.policy == GPT_CKPT_FULL ? "full" : "selective");
    if (k > 1) printf("blocks 0, %d, %d, ... (every %d)\n", k, 2 * k, k);
    else printf("every block\n");
  }
  if (tr->step > 0) printf("loom: resumed at step %d\n", tr->step);
  fflush(stdout);
}

/* A failed write to the metrics file is an error: the file is what runs are compared by. */
static int check_written(loom_trainer *tr) {
  if (fflush(tr->metrics) == 0 && !ferror(tr->metrics)) return 0;
  snprintf(tr->err, sizeof tr->err, "%s: logging.metrics: writing %s failed: %s", tr->cfg.path,
           tr->cfg.logging.metrics, strerror(errno));
  return -1;
}

int loom_metrics_step(loom_trainer *tr, const loom_step_metrics *m) {
  loom_runtime *rt = &tr->rt;
  uint64_t bytes = rt->comm_stats.bytes_sent - tr->comm_bytes_prev;
  tr->comm_bytes_prev = rt->comm_stats.bytes_sent;
  if (!is_rank0(tr)) return 0;
  const loom_config *c = &tr->cfg;
  double tokens = (double)tr->G * tr->T;
  double tps = m->seconds > 0 ? tokens / m->seconds : 0;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double elapsed = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - tr->t0;
  int taken = m->step - tr->start_step; /* steps run by this process (a resume starts later) */
  double eta = taken > 0 ? elapsed / taken * (c->train.steps - m->step) : 0;
  if (c->logging.interval > 0 &&
      (m->step % c->logging.interval == 0 || m->step == c->train.steps || taken == 1)) {
    char etabuf[32];
    fmt_duration(etabuf, sizeof etabuf, eta);
    printf("step %5d/%d | loss %.4f | lr %.2e | norm %.4f | %8.0f tok/s | %7.1f ms | eta %s%s\n",
           m->step, c->train.steps, m->loss, m->lr, m->grad_norm, tps, m->seconds * 1e3, etabuf,
           m->skipped ? " | skipped" : "");
    fflush(stdout);
  }
  if (tr->metrics) {
    /* a skipped (overflowed) step has no finite norm: JSON null. loss_scale: the factor the
     * step's loss gradient was multiplied by; skipped_steps: the run's total so far */
    char norm[32] = "null";
    if (isfinite(m->grad_norm)) snprintf(norm, sizeof norm, "%.9g", m->grad_norm);
    fprintf(tr->metrics,
            "{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%s,\"tokens_per_s\":%.6g,"
            "\"ms_per_step\":%.6g,\"eta_s\":%.3f,\"tokens\":%.0f,\"skipped\":%d,"
            "\"loss_scale\":%.9g,\"skipped_steps\":%d,"
            "\"comm_bytes\":%llu,\"mem_peak_bytes\":{",
            m->step, m->loss, m->lr, norm, tps, m->seconds * 1e3, eta,
            tokens * m->step, m->skipped, m->loss_scale > 0 ? m->loss_scale : 1.0,
            tr->skipped_steps, (unsigned long long)bytes);
    for (int k = 0; k < LOOM_MEM__COUNT; k++)
      fprintf(tr->metrics, "%s\"%s\":%zu", k ? "," : "",
              loom__mem_category_name((loom_mem_category)k), rt->dev.bytes_peak[k]);
    fprintf(tr->metrics, ",\"total\":%zu},\"mem_peak_bytes_max\":{", rt->dev.total_peak);
    for (int k = 0; k < LOOM_MEM__COUNT; k++)
      fprintf(tr->metrics, "%s\"%s\":%lld", k ? "," : "",
              loom__mem_category_name((loom_mem_category)k), (long long)tr->mem_peak_max[k]);
    fprintf(tr->metrics, ",\"total\":%lld}}\n", (long long)tr->mem_peak_max[LOOM_MEM__COUNT]);
    return check_written(tr);
  }
  return 0;
}

int loom_metrics_eval(loom_trainer *tr, int step, double val_loss) {
  if (!is_rank0(tr)) return 0;
  printf("step %5d/%d | val loss %.4f\n", step, tr->cfg.train.steps, val_loss);
  fflush(stdout);
  if (tr->metrics) {
    fprintf(tr->metrics, "{\"step\":%d,\"val_loss\":%.9g}\n", step, val_loss);
    return check_written(tr);
  }
  return 0;
}

void loom_metrics_end(loom_trainer *tr) {
  if (!is_rank0(tr)) return;
  printf("loom: peak memory per rank%s:", tr->rt.mesh.world_size > 1 ? " (max over ranks)" : "");
  for (int k = 0; k < LOOM_MEM__COUNT; k++)
    if (tr->mem_peak_max[k])
      printf(" %s %.2f MiB", loom__mem_category_name((loom_mem_category)k),
             tr->mem_peak_max[k] / 1048576.0);
  printf(" | total %.2f MiB\n", tr->mem_peak_max[LOOM_MEM__COUNT] / 1048576.0);
  fflush(stdout);
}

void loom_metrics_where(loom_trainer *tr) {
  if (!is_rank0(tr)) return;
  const loom_config *c = &tr->cfg;
  /* the checkpoint plugin's own option; a plugin without "dir" keeps its files elsewhere */
  json_t *dir = tr->rt.has_checkpoint ? json_object_get(c->checkpoint.options, "dir") : NULL;
  printf("loom: finished at step %d: metrics in %s, checkpoints in %s\n", tr->step,
         c->logging.metrics[0] ? c->logging.metrics : "(none: logging.metrics is unset)",
         json_is_string(dir)          ? json_string_value(dir)
         : tr->rt.has_checkpoint ? "(see the checkpoint plugin's options)"
                                 : "(none: no checkpoint plugin)");
  fflush(stdout);
}

void loom_metrics_close(loom_trainer *tr) {
  if (tr->metrics) fclose(tr->metrics);
  tr->metrics = NULL;
}
