/* The training loop: build the runtime from a config, train, evaluate, checkpoint, sample. */
#ifndef LOOM_CORE_TRAINER_H
#define LOOM_CORE_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "../config/config.h"
#include "../data/shards.h"
#include "../data/tokenizer.h"
#include "../runtime/runtime.h"
#include "../util/rng.h"
#include "restart_record.h"
#include "watchdog.h"

typedef struct loom_trainer {
  loom_config cfg;
  loom_runtime rt;
  loom_host core_host;     /* the core's own handle (for messages and helpers) */
  loom_loader train, val;
  int has_val;
  loom_tokenizer tok;
  int B, T, accum;
  uint64_t G;              /* sequences per optimizer step (global batch) */
  int step;                /* training steps completed (taken or skipped) */
  int skipped_steps;       /* of those, steps skipped on a gradient overflow (fp16 loss
                              scaling): the lr schedule and Adam's bias-correction step count
                              only the steps taken, step - skipped_steps (DeepSpeed's rule) */
  int start_step;          /* steps completed when this process started training */
  loom_rng rank_rng;       /* per-rank stream (seed, rank) */
  loom_rng sample_rng;     /* same on every rank, so sampling runs in lockstep */
  char vocab_fingerprint[17]; /* identity of data.vocab, kept in checkpoints (ckpt_meta.h) */
  int resume_shard_found;  /* resume: the saved data position's shard is in data.train */
  uint64_t resume_skipped_tokens; /* resume: tokens skipped to the new seq_len's grid */
  /* The data segment (ckpt_meta.h, data.segment): since step data_seg_step the run read with
   * its present data, seq_len and global batch, from sequence data_seg_cursor on (0, 0 for a
   * run from scratch; a resume that changes none of them keeps the checkpoint's) */
  int data_seg_step;
  uint64_t data_seg_cursor;
  int32_t *inputs, *targets; /* host (B,T) staging */
  /* context parallel (mesh.cp > 1): Tl = T / cp tokens per sequence on this rank, and the host
   * (B,Tl) staging of its chunks (gpt_cp_take); Tl = T and NULL otherwise */
  int Tl;
  int32_t *cp_inputs, *cp_targets;
  FILE *metrics;
  struct loom_tb_writer *tb; /* logging.tensorboard's event file (rank 0), NULL = none */
  int progress_live;       /* stdout is a terminal: the progress line is redrawn in place */
  int progress_open;       /* a live progress line is on screen without its newline */
  int stdout_lost;         /* stdout's reader went away (EPIPE): said once, training goes on */
  double t0;               /* wall clock at start of training, seconds */
  uint64_t comm_bytes_prev;
  int64_t mem_peak_max[LOOM_MEM__COUNT + 1]; /* max over every rank: each category, then total */
  int stopped;             /* training ended early on SIGINT/SIGTERM (checkpoint saved) */
  loom_watchdog watchdog;  /* ends the job when no progress is made for train.timeout_s */
  json_t *init_from;       /* init_from's record for checkpoints ({path, format, bytes}), kept
                              across resumes; NULL for a run started from the seed */
  loom_restart_info restart; /* this run restarts a failed one (loom launch); .present 0 else */
  char err[2048];          /* the message of the first failure */
} loom_trainer;

/* Build everything (plugins, mesh, device, model, data), resume from the latest checkpoint
 * when the checkpoint plugin says so. `restart` (NULL for a plain run) says this run restarts
 * a failed attempt of a supervised job: its record is written before the first step
 * (restart_record.h). Returns 0, or -1 with trainer->err set. On -1 the caller must still call
 * loom_trainer_fail or loom_trainer_free. */
int loom_trainer_init(loom_trainer *tr, const char *config_path, const char *const *overrides,
                      int n_overrides, const loom_restart_info *restart);
/* Run the remaining steps (evals, checkpoints, progress). 0 or -1 + err. On SIGINT/SIGTERM
 * every rank stops after the same step, saves a checkpoint, and returns 0 with tr->stopped
 * set. The command then samples (loom_trainer_sample, unless stopped) and says where the
 * run's files are (loom_metrics_where): sampling uses the loop's forward pass, not the
 * other way round. */
int loom_trainer_run(loom_trainer *tr);
/* Mean validation loss over eval_batches micro-batches per data-parallel rank. */
int loom_trainer_eval(loom_trainer *tr, double *val_loss);
/* Generate cfg.sample.tokens tokens after the prompt and print them (rank 0); nothing when
 * sample.tokens is 0 (sample.c). */
int loom_trainer_sample(loom_trainer *tr);
/* Print err on this rank and bring the whole job down (never returns). */
void loom_trainer_fail(loom_trainer *tr, int code);
void loom_trainer_free(loom_trainer *tr);

/* Hooks for a forward-only pass (eval, sampling): plugins' pre/post_forward only. */
gpt_hooks loom__forward_hooks(loom_trainer *tr);

/* A forward-only pass of the whole model (through the pipeline stages under pp): the loss (on
 * every stage after the caller's sum; 0 on stages other than the last) and, on the last stage,
 * the logits (gpt_logits_row). 0 or -1 + tr->err. */
int loom__model_forward(loom_trainer *tr, const int32_t *inputs, const int32_t *targets, int B,
                        int T, float *loss);

/* Checkpoint glue (ckpt_glue.c). */
int loom__ckpt_save(loom_trainer *tr);
int loom__ckpt_resume(loom_trainer *tr);

#endif
