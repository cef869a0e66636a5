#include "metrics.h"
#include "util/input_file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "monitor/tb_sink.h"
#include "monitor/tb_writer.h"
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
  /* never fopen(tmp, "w"): a FIFO left at that name would block start-up before the watchdog */
  char e[1024];
  int fd = loom__create_tmp(tmp, e, sizeof e);
  FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!out) {
    if (fd >= 0) close(fd);
    fclose(in);
    if (fd >= 0) snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    else snprintf(err, errlen, "%s", e);
    return -1;
  }
  /* whole lines of any length (getline): a fixed buffer would split a long record and keep
   * its tail, a broken JSON line, after dropping its head */
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, in) != -1) {
    int s;
    if (sscanf(line, "{\"step\":%d", &s) == 1 && s > step) continue;
    fputs(line, out);
  }
  free(line);
  fclose(in);
  int bad = ferror(out);
  if (fclose(out) != 0 || bad || rename(tmp, path) != 0) {
    snprintf(err, errlen, "cannot rewrite %s: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* A terminal gets one live progress line; a log file, a pipe or a launcher one line per
 * interval. Open MPI hands its ranks a pseudo-terminal even when mpirun's own output goes to a
 * file, so under a launcher (its rank variables set: Open MPI's mpirun, MPICH's hydra, srun)
 * isatty cannot be trusted. Not PMIX_RANK: a singleton's MPI_Init sets it for itself. */
static int progress_is_live(void) {
  static const char *const launcher_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                                              "SLURM_PROCID", NULL};
  for (int i = 0; launcher_vars[i]; i++)
    if (getenv(launcher_vars[i])) return 0;
  const char *term = getenv("TERM");
  return isatty(STDOUT_FILENO) && !(term && !strcmp(term, "dumb"));
}

int loom_metrics_open(loom_trainer *tr) {
  tr->progress_live = progress_is_live();
  /* a resumed or restarted run continues the job's JSONL: records after its start are gone */
  int continues = tr->step > 0 || tr->restart.present;
  if (tr->cfg.logging.tensorboard[0]) {
    char e[1024];
    tr->tb = loom_tb_open(tr->cfg.logging.tensorboard, e, sizeof e);
    /* this process's first step (after the checkpoint it resumed from): what a restart
     * replaces in the older files (tb_writer.h) */
    if (!tr->tb || loom_tb_session_start(tr->tb, tr->step + 1, e, sizeof e) != 0) {
      snprintf(tr->err, sizeof tr->err, "%s: logging.tensorboard: %s", tr->cfg.path, e);
      return -1;
    }
  }
  const char *path = tr->cfg.logging.metrics;
  if (!path[0]) return 0;
  make_parent_dirs(path);
  char e[1024];
  if (loom__check_output_path(path, e, sizeof e) != 0) { /* a FIFO would block the open */
    snprintf(tr->err, sizeof tr->err, "%s: logging.metrics: %s", tr->cfg.path, e);
    return -1;
  }
  if (continues && truncate_after(path, tr->step, e, sizeof e) != 0) {
    snprintf(tr->err, sizeof tr->err, "%s: logging.metrics: %s", tr->cfg.path, e);
    return -1;
  }
  /* a resumed run appends, a fresh run starts the file over; a restart from scratch keeps the
   * job's earlier restart records (step 0) and nothing else */
  tr->metrics = fopen(path, continues ? "a" : "w");
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

/* Flush the progress lines. A stdout whose reader went away (`loom train | head`, a closed
 * terminal) fails with EPIPE (SIGPIPE is ignored: cmd_train): printing stops, training does
 * not, and stderr says so once — the metrics file, not stdout, is the run's record. */
static void flush_stdout(loom_trainer *tr) {
  if (fflush(stdout) == 0 && !ferror(stdout)) return;
  if (tr->stdout_lost) return;
  tr->stdout_lost = 1;
  fprintf(stderr, "loom: note: stdout is closed (%s): progress lines stop here, training goes "
          "on (metrics: %s)\n", strerror(errno),
          tr->cfg.logging.metrics[0] ? tr->cfg.logging.metrics : "none, logging.metrics unset");
  fflush(stderr);
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
  else if (rt->mesh.cp > 1) /* context parallel: dp counts dp x cp (mesh.c) */
    snprintf(meshbuf, sizeof meshbuf, "dp %d x cp %d x tp %d, T/cp = %d tokens a rank",
             rt->mesh.data_dp, rt->mesh.cp, rt->mesh.tp, tr->Tl);
  else if (rt->mesh.tp > 1)
    snprintf(meshbuf, sizeof meshbuf, "dp %d x tp %d", rt->mesh.dp, rt->mesh.tp);
  else
    snprintf(meshbuf, sizeof meshbuf, "dp %d", rt->mesh.dp);
  printf("loom: %zu parameters%s | %d layers, %d heads, %d embd, vocab %d | world %d (%s) | "
         "global batch %llu x %d tokens (micro %d x accum %d x dp %d)\n",
         global, tpbuf, c->model.n_layer, c->model.n_head, c->model.n_embd,
         c->model.vocab_size, rt->mesh.world_size, meshbuf, (unsigned long long)tr->G,
         tr->T, tr->B, tr->accum, rt->mesh.data_dp);
  /* where the launcher put the ranks: nodes, and each rank's place on its node */
  if (rt->placement[0]) printf("loom: placement: %s\n", rt->placement);
  char cpu[160];
  if (loom__cpu_describe(&rt->dev, cpu, sizeof cpu)) printf("loom: cpu: %s\n", cpu);
  printf("loom: plugins:");
  for (int i = 0; i < rt->n_parallel; i++) printf(" %s", c->parallel[i].name);
  printf(" %s%s%s\n", c->precision.name, rt->has_checkpoint ? " " : "",
         rt->has_checkpoint ? c->checkpoint.name : "");
  /* which attention the activation peak reflects: flash keeps no (B,NH,T,T) probabilities */
  printf("loom: attention: %s\n", rt->model.cfg.attn_lse ? "flash (row log-sum-exp saved)"
         : c->model.attention == LOOM_ATTN_MATERIALIZED ? "materialized (model.attention)"
         : "materialized (the device has no flash kernels)");
  if (c->activation_checkpointing.policy != GPT_CKPT_NONE) { /* what the activation peak shows */
    int k = c->activation_checkpointing.every;
    printf("loom: activation checkpointing: %s, ",
           c->activation_checkpointing.policy == GPT_CKPT_FULL ? "full" : "selective");
    if (k > 1) printf("blocks 0, %d, %d, ... (every %d)\n", k, 2 * k, k);
    else printf("every block\n");
  }
  if (tr->step > 0) printf("loom: resumed at step %d\n", tr->step);
  flush_stdout(tr);
}

/* The run's config (with the --set overrides applied) for TensorBoard's text dashboard, as a
 * Markdown code block (4-space indent). 0 or -1 + tr->err. */
static int tb_config_text(loom_trainer *tr) {
  char *js = json_dumps(tr->cfg.root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (!js) return 0;
  size_t lines = 1;
  for (const char *p = js; *p; p++) lines += *p == '\n';
  char *md = malloc(strlen(js) + 4 * lines + 64);
  if (!md) {
    free(js);
    snprintf(tr->err, sizeof tr->err, "out of memory");
    return -1;
  }
  char *o = md + sprintf(md, "%s\n\n    ", tr->cfg.path);
  for (const char *p = js; *p; p++) {
    *o++ = *p;
    if (*p == '\n') o += sprintf(o, "    ");
  }
  *o = '\0';
  char e[1024];
  int rc = loom_tb_text(tr->tb, tr->step, "config", md, e, sizeof e);
  if (rc != 0) snprintf(tr->err, sizeof tr->err, "%s: logging.tensorboard: %s", tr->cfg.path, e);
  free(md);
  free(js);
  return rc;
}

/* Training FLOPs per token of the whole model: 6 per parameter (forward 2, backward 4) plus
 * attention's scores and weighted sum, 12 * layers * seq_len * channels (PaLM, appendix B). */
static double flops_per_token(const loom_trainer *tr) {
  const loom_runtime *rt = &tr->rt;
  double n = 0;
  for (int i = 0; i < rt->model.n_params; i++) {
    const gpt_param *p = &rt->model.params[i];
    if (p->tied_copy) continue;
    n += (double)p->shape[0] * (double)(p->ndim == 2 ? p->shape[1] : 1);
  }
  const loom_config *c = &tr->cfg;
  return 6.0 * n + 12.0 * c->model.n_layer * (double)tr->T * c->model.n_embd;
}

/* A failed write to the metrics file is an error: the file is what runs are compared by. */
static int check_written(loom_trainer *tr) {
  if (fflush(tr->metrics) == 0 && !ferror(tr->metrics)) return 0;
  snprintf(tr->err, sizeof tr->err, "%s: logging.metrics: writing %s failed: %s", tr->cfg.path,
           tr->cfg.logging.metrics, strerror(errno));
  return -1;
}

int loom__metrics_emit(loom_trainer *tr, const char *rec) {
  if (tr->metrics) {
    fputs(rec, tr->metrics);
    if (check_written(tr) != 0) return -1;
  }
  char e[1024];
  if (tr->tb && loom_tb_write_record(tr->tb, rec, e, sizeof e) != 0) {
    snprintf(tr->err, sizeof tr->err, "%s: logging.tensorboard: %s", tr->cfg.path, e);
    return -1;
  }
  return 0;
}

/* End a live progress line before any other output. */
static void end_live_line(loom_trainer *tr) {
  if (!tr->progress_open) return;
  putchar('\n');
  tr->progress_open = 0;
}

void loom_metrics_end_line(loom_trainer *tr) { end_live_line(tr); }

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
  double gflops = m->seconds > 0 ? flops_per_token(tr) * tokens / m->seconds / 1e9 : 0;
  double mfu = c->logging.peak_gflops > 0
                   ? gflops / (c->logging.peak_gflops * tr->rt.mesh.world_size) : 0;
  int last = m->step == c->train.steps;
  char etabuf[32], mfubuf[32] = "";
  fmt_duration(etabuf, sizeof etabuf, eta);
  if (c->logging.peak_gflops > 0) snprintf(mfubuf, sizeof mfubuf, " | MFU %4.1f%%", 100 * mfu);
  if (tr->progress_live) { /* one line, redrawn in place every step */
    printf("\r\033[Kstep %d/%d | loss %.4f | %.0f tok/s%s | eta %s%s%s", m->step,
           c->train.steps, m->loss, tps, mfubuf, etabuf, m->skipped ? " | skipped" : "",
           last ? "\n" : "");
    tr->progress_open = !last;
    flush_stdout(tr);
  } else if (c->logging.interval > 0 &&
             (m->step % c->logging.interval == 0 || last || taken == 1)) {
    printf("step %5d/%d | loss %.4f | lr %.2e | norm %.4f | %8.0f tok/s | %7.1f ms%s | eta %s%s\n",
           m->step, c->train.steps, m->loss, m->lr, m->grad_norm, tps, m->seconds * 1e3, mfubuf,
           etabuf, m->skipped ? " | skipped" : "");
    flush_stdout(tr);
  }
  if (taken == 1 && tr->tb && tb_config_text(tr) != 0) return -1;
  if (tr->metrics || tr->tb) {
    /* the record is composed once and goes to every sink: the JSONL line and TensorBoard's
     * scalars hold the same numbers */
    char *rec = NULL;
    size_t rec_len = 0;
    FILE *out = open_memstream(&rec, &rec_len);
    if (!out) {
      snprintf(tr->err, sizeof tr->err, "out of memory for a metrics record");
      return -1;
    }
    /* a skipped (overflowed) step has no finite norm: JSON null. loss_scale: the factor the
     * step's loss gradient was multiplied by; skipped_steps: the run's total so far */
    char norm[32] = "null";
    if (isfinite(m->grad_norm)) snprintf(norm, sizeof norm, "%.9g", m->grad_norm);
    fprintf(out,
            "{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%s,\"tokens_per_s\":%.6g,"
            "\"ms_per_step\":%.6g,\"eta_s\":%.3f,\"tokens\":%.0f,\"skipped\":%d,"
            "\"loss_scale\":%.9g,\"skipped_steps\":%d,"
            "\"comm_bytes\":%llu,\"mem_peak_bytes\":{",
            m->step, m->loss, m->lr, norm, tps, m->seconds * 1e3, eta,
            tokens * m->step, m->skipped, m->loss_scale > 0 ? m->loss_scale : 1.0,
            tr->skipped_steps, (unsigned long long)bytes);
    for (int k = 0; k < LOOM_MEM__COUNT; k++)
      fprintf(out, "%s\"%s\":%zu", k ? "," : "",
              loom__mem_category_name((loom_mem_category)k), rt->dev.bytes_peak[k]);
    fprintf(out, ",\"total\":%zu},\"mem_peak_bytes_max\":{", rt->dev.total_peak);
    for (int k = 0; k < LOOM_MEM__COUNT; k++)
      fprintf(out, "%s\"%s\":%lld", k ? "," : "",
              loom__mem_category_name((loom_mem_category)k), (long long)tr->mem_peak_max[k]);
    fprintf(out, ",\"total\":%lld}", (long long)tr->mem_peak_max[LOOM_MEM__COUNT]);
    fprintf(out, ",\"gflops\":%.6g", gflops);
    if (c->logging.peak_gflops > 0) fprintf(out, ",\"mfu\":%.6g", mfu);
    fprintf(out, "}\n");
    fclose(out);
    int rc = loom__metrics_emit(tr, rec);
    free(rec);
    return rc;
  }
  return 0;
}

int loom_metrics_eval(loom_trainer *tr, int step, double val_loss) {
  if (!is_rank0(tr)) return 0;
  end_live_line(tr);
  printf("step %5d/%d | val loss %.4f\n", step, tr->cfg.train.steps, val_loss);
  flush_stdout(tr);
  char rec[96];
  snprintf(rec, sizeof rec, "{\"step\":%d,\"val_loss\":%.9g}\n", step, val_loss);
  return loom__metrics_emit(tr, rec);
}

void loom_metrics_end(loom_trainer *tr) {
  if (!is_rank0(tr)) return;
  end_live_line(tr);
  printf("loom: peak memory per rank%s:", tr->rt.mesh.world_size > 1 ? " (max over ranks)" : "");
  for (int k = 0; k < LOOM_MEM__COUNT; k++)
    if (tr->mem_peak_max[k])
      printf(" %s %.2f MiB", loom__mem_category_name((loom_mem_category)k),
             tr->mem_peak_max[k] / 1048576.0);
  printf(" | total %.2f MiB\n", tr->mem_peak_max[LOOM_MEM__COUNT] / 1048576.0);
  flush_stdout(tr);
}

void loom_metrics_where(loom_trainer *tr) {
  if (!is_rank0(tr)) return;
  end_live_line(tr);
  const loom_config *c = &tr->cfg;
  /* where the plugin says it keeps them (ABI 1.6); the host knows none of its options */
  const loom_checkpoint_v1 *ck = &tr->rt.checkpoint.u.checkpoint;
  const char *dir = tr->rt.has_checkpoint && tr->rt.checkpoint_ctx && ck->where
                        ? ck->where(tr->rt.checkpoint_ctx)
                        : NULL;
  printf("loom: finished at step %d: metrics in %s, checkpoints in %s\n", tr->step,
         c->logging.metrics[0] ? c->logging.metrics : "(none: logging.metrics is unset)",
         dir                     ? dir
         : tr->rt.has_checkpoint ? "(see the checkpoint plugin's options)"
                                 : "(none: no checkpoint plugin)");
  flush_stdout(tr);
}

void loom_metrics_close(loom_trainer *tr) {
  if (tr->metrics) fclose(tr->metrics);
  tr->metrics = NULL;
  loom_tb_close(tr->tb);
  tr->tb = NULL;
}
