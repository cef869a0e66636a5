/* The run configuration: one JSON file (jansson) plus `--set path=value` overrides.
 *
 * Every error names the file and the JSON path and says what was expected, e.g.
 *   configs/ddp.json: train.micro_batch_size: expected an integer >= 1, got "8"
 * Unknown keys are errors (typos must not be silently ignored). docs/config.md is the reference;
 * the defaults below are the ones documented there. */
#ifndef LOOM_CORE_CONFIG_H
#define LOOM_CORE_CONFIG_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "deepspeed.h"

#define LOOM_MAX_PARALLEL 8
#define LOOM_PATH_MAX 512
/* Upper bounds of counts in the config (steps, batch sizes, intervals, sample tokens): 2^30
 * keeps int counters and 64-bit products of counts (sequences x steps, tokens) exact. */
#define LOOM_MAX_COUNT (1 << 30)
#define LOOM_MAX_THREADS 4096    /* device.threads */
#define LOOM_MAX_TIMEOUT_S 31536000 /* train.timeout_s: a year */

/* A plugin named in the config, with its own options (validated by the plugin itself through
 * loom_options, so its error messages name the JSON path too). */
typedef struct loom_plugin_cfg {
  char name[LOOM_PATH_MAX]; /* plugin name ("ddp") or a path to a .so ("./x.so"); "" = none */
  char json_path[64];   /* where it sits in the config: "parallel[0]", "precision", ... */
  json_t *options;      /* the plugin's object minus "plugin" and "_" keys: a shallow copy owned
                           by the config (values shared with root), freed by loom_config_free */
} loom_plugin_cfg;

/* "model.attention": "auto" (default) = flash where the device has the ABI 1.9 lse slots (and,
 * under 16-bit activations end to end, its acts16 table has them), else materialized; "flash"
 * refuses a device without them; "materialized" keeps the (B,NH,T,T) probabilities (today's
 * kernels on every device: the A/B baseline). */
typedef enum {
  LOOM_ATTN_AUTO = 0,
  LOOM_ATTN_FLASH = 1,
  LOOM_ATTN_MATERIALIZED = 2
} loom_attention_impl;

/* "lr_schedule": {"type": "WarmupLR" | "WarmupDecayLR" | "WarmupCosineLR", ...}: DeepSpeed's
 * schedulers with their parameters' names and defaults (deepspeed/runtime/lr_schedules.py;
 * loom_lr_ds_at in train/lr_schedule.h computes them). */
typedef enum {
  LOOM_LR_LOOM = 0,       /* "loom" (default): warm-up, then cosine or constant (above) */
  LOOM_LR_WARMUP = 1,     /* WarmupLR: warmup_min_lr -> warmup_max_lr, then constant */
  LOOM_LR_WARMUP_DECAY = 2, /* WarmupDecayLR: then linear to 0 at total_num_steps */
  LOOM_LR_WARMUP_COSINE = 3 /* WarmupCosineLR: ratios of optimizer.lr, cosine to cos_min_ratio */
} loom_lr_type;

typedef struct loom_lr_ds {
  int type;             /* loom_lr_type */
  int log_warmup;       /* warmup_type "log" (DeepSpeed's default, 1) or "linear" (0) */
  int warmup_num_steps; /* default 1000 (DeepSpeed uses max(2, this)) */
  int total_num_steps;  /* WarmupDecayLR, WarmupCosineLR: required */
  double warmup_min_lr, warmup_max_lr; /* WarmupLR, WarmupDecayLR: defaults 0, 0.001 */
  double warmup_min_ratio, cos_min_ratio; /* WarmupCosineLR: defaults 0, 0.0001 */
} loom_lr_ds;

typedef struct loom_config {
  char path[LOOM_PATH_MAX]; /* the file it was read from */
  json_t *root;             /* the whole document after overrides (owned) */

  struct {
    int vocab_size;   /* default 256 (byte-level tokenizer) */
    int padded_vocab_size; /* rows of wte and columns of the logits, >= vocab_size (default
                            * vocab_size): llm.c pads GPT-2's 50257 to 50304 = 393 x 128 for
                            * the GEMMs; the extra columns are masked out of softmax and loss */
    int context_length; /* max sequence length, default 256 */
    int n_layer, n_head, n_embd; /* defaults 4, 4, 128 */
    int attention; /* loom_attention_impl: how attention keeps what backward needs (not part of
                      the model's function: a checkpoint resumes under either) */
  } model;

  struct {
    int policy; /* GPT_CKPT_NONE (default), GPT_CKPT_FULL, GPT_CKPT_SELECTIVE (model/gpt.h) */
    int every;  /* the policy applies to blocks whose index is a multiple of this; default 1 */
  } activation_checkpointing;

  struct {
    char train[LOOM_PATH_MAX]; /* glob of train shards, required for `loom train` */
    char val[LOOM_PATH_MAX];   /* glob of val shards, "" = no eval */
    char vocab[LOOM_PATH_MAX]; /* vocabulary file written by loom-prepare, "" = bytes */
  } data;

  struct {
    int micro_batch_size;  /* B per rank per micro-step, default 4 */
    int seq_len;           /* T, default = model.context_length, <= context_length */
    int grad_accum_steps;  /* default 1 */
    int global_batch_size; /* sequences per optimizer step; 0 = derived (B*accum*dp) */
    int steps;             /* optimizer steps, default 100 */
    int eval_interval;     /* steps between evals, 0 = only at the end; default 0 */
    int eval_batches;      /* micro-batches per rank per eval, default 8 */
    uint64_t seed;         /* default 1337 */
    int timeout_s;         /* no progress (a step, an eval, a save) for this long brings the
                              job down: a stalled rank or a hung collective; 0 = never;
                              default 600 */
  } train;

  struct {
    double lr;           /* peak learning rate, default 3e-4 */
    double beta1, beta2; /* "betas": [0.9, 0.95] */
    double eps;          /* default 1e-8 */
    double weight_decay; /* default 0.0; applied to 2-D weights only */
    double grad_clip;    /* max global L2 norm, 0 = off; default 1.0 */
  } optimizer;

  struct {
    int warmup_steps;   /* linear warm-up from 0, default 0 */
    char decay[16];     /* "cosine" (default) or "constant" */
    double min_lr;      /* floor reached at the last step, default 0.1 * lr */
    int decay_steps;    /* the cosine's horizon: it reaches min_lr at this step and stays
                           there; 0 (default) = train.steps. Set it to extend a finished run
                           without stretching the cosine (the lr continues at min_lr). */
    loom_lr_ds ds;      /* lr_schedule.type: one of DeepSpeed's schedulers instead (above
                           then: warmup 0, "constant", min_lr = lr, unused) */
  } lr_schedule;

  struct {
    char type[LOOM_PATH_MAX]; /* "cpu" (default, built in), or a device plugin: a name on the
                                 plugin search path ("cuda" -> cuda.so) or a path to a .so */
    int threads;        /* OpenMP threads per rank (loom's kernels, oneDNN), 0 = auto; default 0 */
    json_t *options;    /* the whole "device" object, borrowed */
  } device;

  loom_plugin_cfg comm;                       /* default "mpi" */
  int n_parallel;                             /* 0 = single rank semantics, no plugin */
  loom_plugin_cfg parallel[LOOM_MAX_PARALLEL];
  loom_plugin_cfg precision;                  /* default "fp32" */
  loom_plugin_cfg checkpoint;                 /* default none ("") */

  struct {
    int interval;                  /* steps between progress lines, default 1 */
    char metrics[LOOM_PATH_MAX];   /* JSONL file, "" = none */
    char tensorboard[LOOM_PATH_MAX]; /* directory of TensorBoard event files, "" = none */
    double peak_gflops;            /* one rank's peak GFLOP/s (MFU's denominator), 0 = unknown */
  } logging;

  struct {
    char prompt[1024]; /* default "\n" */
    int tokens;        /* tokens to generate at the end, 0 = none; default 0 */
    double temperature; /* default 1.0, > 0 */
    int top_k;          /* 0 = full distribution; default 0 */
  } sample;

  struct {
    char path[LOOM_PATH_MAX]; /* model file the parameters start from; "" = none (default):
                                 GPT-2 initialisation from train.seed */
    char format[16];          /* "safetensors" (Hugging Face GPT-2 names) or "llmc" (llm.c's
                                 model file); "" in the file = from path's extension */
  } init_from;                /* ignored when the run resumes from a checkpoint */

  loom_deepspeed deepspeed;   /* "deepspeed": the DeepSpeed file read into the sections above
                                 (deepspeed.h); its path "" when the config names none */
} loom_config;

/* Read and validate `path` into cfg (which need not be initialised; a loaded one must be
 * freed first; after a failure cfg is zeroed), applying each "a.b.c=value" override in order (value is parsed as
 * JSON when it parses, else taken as a string; "parallel[0].plugin=zero1" indexes arrays).
 * Returns 0, or -1 with a one-line message (file, JSON path, what was expected) in err. */
int loom_config_load(loom_config *cfg, const char *path, const char *const *overrides,
                     int n_overrides, char *err, size_t errlen);

/* Same from an in-memory JSON text (`name` stands for the file in messages). */
int loom_config_load_string(loom_config *cfg, const char *name, const char *json_text,
                            const char *const *overrides, int n_overrides, char *err,
                            size_t errlen);

/* When CONFIG (after the overrides) names a DeepSpeed file: print the mapping, one line a key
 * ("loom: deepspeed: FILE: PATH = VALUE: mapped -> ...", accepted or refused), to out, whether
 * or not the file is refused (the load then says why). Returns the number of lines, 0 when
 * CONFIG names none or cannot be read (loom_config_load reports that). */
int loom_config_deepspeed_report(FILE *out, const char *path, const char *const *overrides,
                                 int n_overrides);

/* Release what loom_config_load allocated. Safe on a zeroed struct. */
void loom_config_free(loom_config *cfg);

/* Check global batch = micro_batch_size * grad_accum_steps * dp_size when global_batch_size is
 * set (else set it). Returns 0, or -1 with a message showing the numbers. Under a DeepSpeed
 * file (cfg->deepspeed.path), DeepSpeed's rule instead: of the three numbers either file gives,
 * any two derive the third (loom__deepspeed_batch), and the micro-batch is checked again. */
int loom_config_check_batch(loom_config *cfg, int dp_size, char *err, size_t errlen);

/* ---- plugin options: typed getters that report errors with the config file and JSON path ----
 * `opts` is a plugin's options object (may be NULL = empty); `where` is its JSON path
 * ("parallel[0]"). Each getter returns 0 and stores the value (or the default when the key is
 * absent), or -1 with "FILE: WHERE.KEY: expected ..., got ..." in err. */
typedef struct loom_options {
  const char *file;  /* config file name for messages */
  const char *where; /* JSON path of the object */
  json_t *obj;       /* the object (borrowed); NULL = {} */
} loom_options;

int loom_opt_int(const loom_options *o, const char *key, int64_t dflt, int64_t min, int64_t max,
                 int64_t *out, char *err, size_t errlen);
int loom_opt_double(const loom_options *o, const char *key, double dflt, double min, double max,
                    double *out, char *err, size_t errlen);
int loom_opt_bool(const loom_options *o, const char *key, int dflt, int *out, char *err,
                  size_t errlen);
/* *out points into the JSON document (valid while the config lives) or at dflt. */
int loom_opt_string(const loom_options *o, const char *key, const char *dflt, const char **out,
                    char *err, size_t errlen);
/* Every key of the object must be in `allowed` (NULL-terminated); else an error naming the
 * unknown key and listing the allowed ones. */
int loom_opt_check_keys(const loom_options *o, const char *const *allowed, char *err,
                        size_t errlen);

#endif
