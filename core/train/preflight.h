/* `loom check`: everything `loom train` validates before its first step, without MPI and
 * without training. The config is loaded; the plugins are opened (kind, ABI, roles) and created
 * with their options on a stand-in mesh of `world` ranks (rank 0's coordinates; no
 * communicator); the layout (tp x pp dividing the world, gradient sync for dp > 1, the batch
 * arithmetic, the pipeline split) and the model's sizes are checked; the data (token shards,
 * validation shards, vocabulary) is opened and validated exactly as the trainer opens it, and
 * the global batch and evaluation must fit it. Side effects are the plugins' own: the
 * checkpoint plugin creates its directory (as train would) and takes its lock while it checks. */
#ifndef LOOM_CORE_PREFLIGHT_H
#define LOOM_CORE_PREFLIGHT_H

#include <stddef.h>

#include "../config/config.h"
#include "../data/shards.h"
#include "../data/tokenizer.h"

/* The data a run reads: training and validation token shards and the vocabulary. */
typedef struct loom_run_data {
  loom_loader train;
  loom_loader val;     /* zeroed when has_val is 0 */
  int has_val;         /* data.val is set */
  loom_tokenizer tok;
} loom_run_data;

/* Open cfg's data as `loom train` does and check that it fits the config on `dp` data-parallel
 * ranks: data.train set and readable, data.val (when set) holds train.eval_batches x
 * micro_batch_size x dp sequences, data.train holds one global batch, the vocabulary fits
 * model.vocab_size. Returns 0 with everything open in *d (close with loom__data_close), or -1
 * with "CONFIG: KEY: reason" in err and nothing left open. One code path for train and check,
 * so their messages cannot drift apart. */
int loom__data_open(const loom_config *cfg, int dp, loom_run_data *d, char *err,
                    size_t errlen);
void loom__data_close(loom_run_data *d);

/* The numbers of the run loom_preflight checked (loom launch's elastic arithmetic). */
typedef struct loom_preflight_info {
  int world, dp, tp, pp;    /* the mesh: world = dp x tp x pp */
  int micro_batch_size;     /* sequences per rank per micro-batch */
  int grad_accum_steps;     /* micro-batches per optimizer step */
  int global_batch_size;    /* sequences per optimizer step: micro x accum x dp */
  int resume_step;          /* the checkpoint train would resume from; 0: a fresh start */
  int has_checkpoint;       /* a checkpoint plugin is configured */
} loom_preflight_info;

/* Returns 0, or -1 with one line in err (the message train would print, minus its prefix).
 * On success `start` (startlen bytes) says where the run's parameters would come from, as
 * train says it at start-up: "init_from PATH ignored: resuming from the checkpoint of step N
 * (resume wins)", "resuming from the checkpoint of step N", "parameters initialised from PATH
 * (FORMAT)", or "" for the seed's initialisation. init_from's file is opened and checked only
 * when train would open it: a run that resumes ignores it (trainer.c's open_init_from). `info`, when not NULL, gets the run's numbers on success. */
int loom_preflight(const char *config_path, const char *const *overrides, int n_overrides,
                   int world, loom_preflight_info *info, char *start, size_t startlen,
                   char *err, size_t errlen);

#endif
