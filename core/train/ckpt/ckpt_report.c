/* What a resume changes, said before step 1 of the continuation (ckpt_resume.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ckpt_resume.h"
#include "train/lr_schedule.h"

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* The index of the loader's shard that is the saved one, or -1. */
static int find_saved_shard(const loom_loader *ld, const loom_ckpt_meta *m) {
  int i = m->data.shard_index;
  if (i < ld->n_shards && strcmp(ld->shards[i].path, m->data.shard) == 0 &&
      ld->shards[i].n_tokens == m->data.shard_tokens)
    return i;
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < ld->n_shards; k++) {
      const loom_shard *sh = &ld->shards[k];
      const char *a = pass ? base_name(sh->path) : sh->path;
      const char *b = pass ? base_name(m->data.shard) : m->data.shard;
      if (strcmp(a, b) == 0 && sh->n_tokens == m->data.shard_tokens) return k;
    }
  return -1;
}

/* The saved shard, found by name and size, must also hold the same tokens (when the checkpoint
 * recorded them): a shard rewritten in place would put the saved position into other text. */
static int check_fingerprint(loom_trainer *tr, const loom_ckpt_meta *m, loom_shard *sh) {
  if (!m->data.fingerprint) return 0; /* a checkpoint from before fingerprints */
  const char *now = loom_shard_fingerprint(sh);
  if (strcmp(now, m->data.fingerprint) == 0) return 0;
  snprintf(tr->err, sizeof tr->err, "checkpoint step %d: data.train: %s (%llu tokens) has the "
           "saved shard's name and size but other content: fingerprint %s, the checkpoint "
           "recorded %s; restore the shard the run was trained on, or start a new "
           "checkpoint dir", m->step, sh->path, (unsigned long long)sh->n_tokens, now,
           m->data.fingerprint);
  return -1;
}

/* With the data, seq_len and global batch of the segment the checkpoint recorded, its position
 * is determined: sequence cursor + (step - segment.step) x global_batch of that stream. One
 * that does not follow is corruption, however valid the manifest's checksum (written wrong, or
 * edited). Returns 1 when the segment carries on into this run, 0 when this run starts a new
 * one (something changed, or an older checkpoint), -1 (tr->err) on a contradiction. */
static int check_segment(loom_trainer *tr, const loom_ckpt_meta *m) {
  const loom_loader *ld = &tr->train;
  if (!m->data.has_segment || m->data.seq_len != tr->T || m->data.global_batch != tr->G ||
      m->data.segment_stream != ld->n_seqs || strcmp(m->data.pattern, tr->cfg.data.train) != 0)
    return 0;
  uint64_t steps = (uint64_t)(m->step - m->data.segment_step), G = m->data.global_batch;
  if (G && steps > (UINT64_MAX - m->data.segment_cursor) / G) {
    snprintf(tr->err, sizeof tr->err, "checkpoint step %d: data.segment (cursor %llu) is beyond "
             "any position: the checkpoint is corrupt", m->step,
             (unsigned long long)m->data.segment_cursor);
    return -1;
  }
  loom_data_pos want;
  loom_loader_seq_position(ld, m->data.segment_cursor + steps * G, &want);
  if (want.epoch == m->data.epoch && want.shard == m->data.shard_index &&
      want.token == m->data.token)
    return 1;
  snprintf(tr->err, sizeof tr->err, "checkpoint step %d: the data position (epoch %llu, %s, token "
           "%llu) cannot follow from the recorded batch settings: from sequence %llu at step %d, "
           "%llu steps of %llu sequences of %d tokens end at epoch %llu, %s, token %llu; the "
           "checkpoint is corrupt (its checksum is valid: it was written wrong or edited)",
           m->step, (unsigned long long)m->data.epoch, m->data.shard,
           (unsigned long long)m->data.token, (unsigned long long)m->data.segment_cursor,
           m->data.segment_step, (unsigned long long)steps, (unsigned long long)G, tr->T,
           (unsigned long long)want.epoch,
           ld->shards[want.shard].path, (unsigned long long)want.token);
  return -1;
}

int loom__ckpt_seek_data(loom_trainer *tr, const loom_ckpt_meta *m) {
  loom_loader *ld = &tr->train;
  tr->resume_shard_found = 0;
  tr->resume_skipped_tokens = 0;
  int i = find_saved_shard(ld, m);
  if (i < 0) {
    ld->cursor = 0;
    tr->data_seg_step = m->step; /* a new segment: other data */
    tr->data_seg_cursor = 0;
    return 0;
  }
  if (m->data.epoch > (UINT64_MAX - ld->n_seqs) / ld->n_seqs) {
    snprintf(tr->err, sizeof tr->err, "checkpoint step %d: data.epoch %llu is beyond any "
             "position: the checkpoint is corrupt", m->step,
             (unsigned long long)m->data.epoch);
    return -1;
  }
  if (check_fingerprint(tr, m, &ld->shards[i]) != 0) return -1;
  int same = check_segment(tr, m);
  if (same < 0) return -1;
  loom_data_pos pos = {.epoch = m->data.epoch, .shard = i, .token = m->data.token};
  loom_loader_seek(ld, &pos, &tr->resume_skipped_tokens);
  tr->resume_shard_found = 1;
  tr->data_seg_step = same ? m->data.segment_step : m->step;
  tr->data_seg_cursor = same ? m->data.segment_cursor : ld->cursor;
  return 0;
}

typedef struct report {
  int step, n;
} report;

/* One "  KEY: OLD -> NEW (EFFECT)" line, with the heading before the first. On stderr, as a
 * warning: a resume that continues differently is never silent. */
__attribute__((format(printf, 2, 3))) static void line(report *r, const char *fmt, ...) {
  if (r->n++ == 0)
    fprintf(stderr, "loom[0] warning: resuming from step %d with settings that change how the "
            "run continues:\n", r->step);
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "  ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

static void num_change(report *r, const char *key, double a, double b, const char *effect) {
  if (a != b) line(r, "%s: %.6g -> %.6g (%s)", key, a, b, effect);
}

static void int_change(report *r, const char *key, long long a, long long b, const char *effect) {
  if (a != b) line(r, "%s: %lld -> %lld (%s)", key, a, b, effect);
}

static void report_schedule(report *r, loom_trainer *tr, const loom_ckpt_meta *m) {
  const loom_config *cfg = &tr->cfg;
  const int next = m->step + 1;
  int horizon = loom_lr_horizon(cfg->train.steps, cfg->lr_schedule.decay_steps);
  int cosine = strcmp(cfg->lr_schedule.decay, "cosine") == 0;
  int before = r->n;
  int_change(r, "train.steps", m->schedule.steps, cfg->train.steps,
             horizon == m->schedule.horizon ? "the lr schedule's horizon stays" : "the cosine "
             "is recomputed over the new total");
  if (!(m->schedule.horizon == m->schedule.steps && horizon == cfg->train.steps))
    int_change(r, "lr schedule horizon (lr_schedule.decay_steps, else train.steps)",
               m->schedule.horizon, horizon, "the step where the cosine reaches min_lr");
  int_change(r, "lr_schedule.warmup_steps", m->schedule.warmup_steps,
             cfg->lr_schedule.warmup_steps, "the warm-up ramp");
  if (m->schedule.cosine != cosine)
    line(r, "lr_schedule.decay: %s -> %s", m->schedule.cosine ? "cosine" : "constant",
         cosine ? "cosine" : "constant");
  num_change(r, "optimizer.lr", m->schedule.lr, cfg->optimizer.lr, "the peak lr");
  num_change(r, "lr_schedule.min_lr", m->schedule.min_lr, cfg->lr_schedule.min_lr,
             "the floor");
  double now = loom_lr_config(cfg, next);
  double saved = loom_lr_at(next, m->schedule.horizon, m->schedule.warmup_steps, m->schedule.lr,
                            m->schedule.min_lr, m->schedule.cosine);
  if (r->n == before) return;
  line(r, "lr: step %d runs at %.6g; the checkpoint's step %d ran at %.6g", next, now, m->step,
       m->schedule.last_lr);
  /* a DeepSpeed scheduler (lr_schedule.type) is not in the checkpoint's schedule record */
  if (cfg->lr_schedule.ds.type != LOOM_LR_LOOM) return;
  if (fabs(now - saved) <= 1e-6 * fmax(fabs(now), fabs(saved))) return;
  fflush(stdout);
  fprintf(stderr, "loom[0] warning: the lr jumps: step %d runs at %.6g where the saved "
          "schedule continues at %.6g", next, now, saved);
  if (cfg->train.steps != m->schedule.steps && cfg->lr_schedule.decay_steps == 0)
    fprintf(stderr, " (%s train.steps recomputes the cosine over the new total). To "
            "continue the run on the saved schedule instead, add --set "
            "lr_schedule.decay_steps=%d (the lr then continues at %.6g)",
            cfg->train.steps > m->schedule.steps ? "raising" : "lowering", m->schedule.horizon,
            saved);
  fprintf(stderr, "\n");
}

static void report_batch_and_data(report *r, loom_trainer *tr, const loom_ckpt_meta *m) {
  const loom_config *cfg = &tr->cfg;
  const loom_runtime *rt = &tr->rt;
  if (m->data.global_batch != tr->G) {
    char effect[256];
    snprintf(effect, sizeof effect, "micro_batch_size x grad_accum_steps x dp: %d x %d x %d -> "
             "%d x %d x %d; each step now averages %llu sequences instead of %llu, on the "
             "same lr schedule", m->data.micro_batch_size, m->data.grad_accum_steps, m->dp,
             tr->B, tr->accum, rt->mesh.dp, (unsigned long long)tr->G,
             (unsigned long long)m->data.global_batch);
    line(r, "global batch: %llu -> %llu sequences (%s)",
         (unsigned long long)m->data.global_batch, (unsigned long long)tr->G, effect);
  }
  if (m->world_size != rt->mesh.world_size || m->dp != rt->mesh.dp)
    line(r, "world size: %d -> %d (dp %d -> %d; each rank's random stream restarts from "
         "train.seed, the data continues at the saved token position)", m->world_size,
         rt->mesh.world_size, m->dp, rt->mesh.dp);
  if (m->tp != rt->mesh.tp || m->pp != rt->mesh.pp)
    line(r, "model-parallel split: tp %d -> %d, pp %d -> %d (each rank loaded its slices of "
         "the parameters and Adam's moments from the checkpoint's global view)", m->tp,
         rt->mesh.tp, m->pp, rt->mesh.pp);
  if (strcmp(m->data.pattern, cfg->data.train) != 0)
    line(r, "data.train: \"%s\" -> \"%s\" (%s)", m->data.pattern, cfg->data.train,
         tr->resume_shard_found ? "the saved position's shard is in the new data: reading "
                                  "continues there"
                                : "the saved position's shard is not in it");
  if (m->data.seq_len != tr->T) {
    char effect[160];
    snprintf(effect, sizeof effect, "%s", tr->resume_skipped_tokens
                 ? "the data continues at the next sequence start of the new length"
                 : "the data continues at the same token: none is read twice or skipped");
    line(r, "train.seq_len: %d -> %d (%s)", m->data.seq_len, tr->T, effect);
  }
  fflush(stdout);
  if (!tr->resume_shard_found)
    fprintf(stderr, "loom[0] warning: the checkpoint's data position (token %llu of %s, epoch "
            "%llu) is not in data.train = \"%s\" (no shard of that name and %llu tokens): "
            "reading starts at the new data's first sequence\n",
            (unsigned long long)m->data.token, m->data.shard,
            (unsigned long long)m->data.epoch, cfg->data.train,
            (unsigned long long)m->data.shard_tokens);
  else if (tr->resume_skipped_tokens)
    fprintf(stderr, "loom[0] warning: train.seq_len %d -> %d: the saved position (token %llu "
            "of %s) is not a multiple of %d: %llu tokens are skipped to the next sequence "
            "start\n", m->data.seq_len, tr->T, (unsigned long long)m->data.token,
            m->data.shard, tr->T, (unsigned long long)tr->resume_skipped_tokens);
}

void loom__ckpt_report(loom_trainer *tr, const loom_ckpt_meta *m) {
  const loom_config *cfg = &tr->cfg;
  report r = {.step = m->step};
  report_schedule(&r, tr, m);
  const char *moments = "the saved Adam moments were accumulated with the old value";
  num_change(&r, "optimizer.betas[0]", m->optimizer.beta1, cfg->optimizer.beta1, moments);
  num_change(&r, "optimizer.betas[1]", m->optimizer.beta2, cfg->optimizer.beta2, moments);
  num_change(&r, "optimizer.eps", m->optimizer.eps, cfg->optimizer.eps, "the update's floor");
  num_change(&r, "optimizer.weight_decay", m->optimizer.weight_decay,
             cfg->optimizer.weight_decay, "the decay of 2-D weights per step");
  num_change(&r, "optimizer.grad_clip", m->optimizer.grad_clip, cfg->optimizer.grad_clip,
             "the gradient norm clip");
  report_batch_and_data(&r, tr, m);
  if (m->seed != cfg->train.seed)
    line(&r, "train.seed: %llu -> %llu (restored random streams carry on; only streams that "
         "restart use the new seed)", (unsigned long long)m->seed,
         (unsigned long long)cfg->train.seed);
  if (strcmp(m->precision_plugin, cfg->precision.name) != 0)
    line(&r, "precision.plugin: \"%s\" -> \"%s\" (its saved state is handed to the new one)",
         m->precision_plugin, cfg->precision.name);
  fflush(stdout);
}
