/* Unit tests for core/config: loading, defaults, every error message (asserted on the text),
 * --set overrides, the global batch rule and the loom_opt_* getters. */
#include "config/config.h"
#include "model/gpt.h"

#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "support/check_suite.h"

static loom_config cfg;
static char err[2048];

static int load(const char *json) {
  return loom_config_load_string(&cfg, "t.json", json, NULL, 0, err, sizeof err);
}

static int load_set(const char *json, const char *const *sets, int n) {
  return loom_config_load_string(&cfg, "t.json", json, sets, n, err, sizeof err);
}

static void teardown(void) { loom_config_free(&cfg); }

/* Write `text` to a fresh temp file; path in buf. */
static void write_temp(char *buf, size_t n, const char *text) {
  snprintf(buf, n, "/tmp/check_config_XXXXXX");
  int fd = mkstemp(buf);
  ck_assert_int_ge(fd, 0);
  FILE *f = fdopen(fd, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* ---- valid documents ------------------------------------------------------------------------ */

static const char *FULL =
    "{\"_comment\": \"every key, none at its default\",\n"
    " \"model\": {\"vocab_size\": 50257, \"context_length\": 1024, \"n_layer\": 12, \"n_head\": 12,"
    "  \"n_embd\": 768, \"_note\": 1},\n"
    " \"data\": {\"train\": \"d/train_*.bin\", \"val\": \"d/val_*.bin\", \"vocab\": \"d/v.json\"},\n"
    " \"train\": {\"micro_batch_size\": 8, \"seq_len\": 512, \"grad_accum_steps\": 2,"
    "  \"global_batch_size\": 32, \"steps\": 5000, \"eval_interval\": 250, \"eval_batches\": 20,"
    "  \"seed\": 9007199254740993},\n"
    " \"optimizer\": {\"name\": \"adamw\", \"lr\": 6e-4, \"betas\": [0.8, 0.999], \"eps\": 1e-6,"
    "  \"weight_decay\": 0.1, \"grad_clip\": 0},\n"
    " \"lr_schedule\": {\"warmup_steps\": 700, \"decay\": \"constant\", \"min_lr\": 0},\n"
    " \"device\": {\"type\": \"cpu\", \"threads\": 3},\n"
    " \"comm\": {\"plugin\": \"./build/plugins/mpi.so\", \"timeout_ms\": 500},\n"
    " \"parallel\": [{\"plugin\": \"ddp\", \"bucket_size_mb\": 10, \"_c\": \"x\"},"
    "  {\"plugin\": \"tensor_parallel\", \"size\": 2}],\n"
    " \"precision\": {\"plugin\": \"bf16\"},\n"
    " \"checkpoint\": {\"plugin\": \"checkpoint\", \"dir\": \"runs/x/ckpt\", \"every\": 50},\n"
    " \"logging\": {\"interval\": 10, \"metrics\": \"runs/x/metrics.jsonl\"},\n"
    " \"sample\": {\"prompt\": \"Once\", \"tokens\": 64, \"temperature\": 0.8, \"top_k\": 40}}\n";

START_TEST(test_full_round_trip) {
  ck_assert_msg(load(FULL) == 0, "%s", err);
  ck_assert_str_eq(cfg.path, "t.json");
  ck_assert_ptr_nonnull(cfg.root);
  ck_assert_int_eq(cfg.model.vocab_size, 50257);
  ck_assert_int_eq(cfg.model.padded_vocab_size, 50257); /* default: vocab_size, unpadded */
  ck_assert_int_eq(cfg.model.context_length, 1024);
  ck_assert_int_eq(cfg.model.n_layer, 12);
  ck_assert_int_eq(cfg.model.n_head, 12);
  ck_assert_int_eq(cfg.model.n_embd, 768);
  ck_assert_str_eq(cfg.data.train, "d/train_*.bin");
  ck_assert_str_eq(cfg.data.val, "d/val_*.bin");
  ck_assert_str_eq(cfg.data.vocab, "d/v.json");
  ck_assert_int_eq(cfg.train.micro_batch_size, 8);
  ck_assert_int_eq(cfg.train.seq_len, 512);
  ck_assert_int_eq(cfg.train.grad_accum_steps, 2);
  ck_assert_int_eq(cfg.train.global_batch_size, 32);
  ck_assert_int_eq(cfg.train.steps, 5000);
  ck_assert_int_eq(cfg.train.eval_interval, 250);
  ck_assert_int_eq(cfg.train.eval_batches, 20);
  ck_assert(cfg.train.seed == 9007199254740993ull);
  ck_assert_double_eq(cfg.optimizer.lr, 6e-4);
  ck_assert_double_eq(cfg.optimizer.beta1, 0.8);
  ck_assert_double_eq(cfg.optimizer.beta2, 0.999);
  ck_assert_double_eq(cfg.optimizer.eps, 1e-6);
  ck_assert_double_eq(cfg.optimizer.weight_decay, 0.1);
  ck_assert_double_eq(cfg.optimizer.grad_clip, 0.0);
  ck_assert_int_eq(cfg.lr_schedule.warmup_steps, 700);
  ck_assert_str_eq(cfg.lr_schedule.decay, "constant");
  ck_assert_double_eq(cfg.lr_schedule.min_lr, 0.0);
  ck_assert_str_eq(cfg.device.type, "cpu");
  ck_assert_int_eq(cfg.device.threads, 3);
  ck_assert_ptr_eq(cfg.device.options, json_object_get(cfg.root, "device"));
  ck_assert_str_eq(cfg.comm.name, "./build/plugins/mpi.so");
  ck_assert_str_eq(cfg.comm.json_path, "comm");
  ck_assert_int_eq(json_integer_value(json_object_get(cfg.comm.options, "timeout_ms")), 500);
  ck_assert_int_eq(cfg.n_parallel, 2);
  ck_assert_str_eq(cfg.parallel[0].name, "ddp");
  ck_assert_str_eq(cfg.parallel[0].json_path, "parallel[0]");
  /* the options object: without "plugin" and without "_comments" */
  ck_assert_int_eq(json_object_size(cfg.parallel[0].options), 1);
  ck_assert_int_eq(json_integer_value(json_object_get(cfg.parallel[0].options, "bucket_size_mb")),
                   10);
  ck_assert_str_eq(cfg.parallel[1].name, "tensor_parallel");
  ck_assert_str_eq(cfg.parallel[1].json_path, "parallel[1]");
  ck_assert_int_eq(json_object_size(cfg.parallel[1].options), 1);
  ck_assert_str_eq(cfg.precision.name, "bf16");
  ck_assert_str_eq(cfg.precision.json_path, "precision");
  ck_assert_int_eq(json_object_size(cfg.precision.options), 0);
  ck_assert_str_eq(cfg.checkpoint.name, "checkpoint");
  ck_assert_str_eq(cfg.checkpoint.json_path, "checkpoint");
  ck_assert_str_eq(json_string_value(json_object_get(cfg.checkpoint.options, "dir")),
                   "runs/x/ckpt");
  ck_assert_int_eq(json_object_size(cfg.checkpoint.options), 2);
  ck_assert_int_eq(cfg.logging.interval, 10);
  ck_assert_str_eq(cfg.logging.metrics, "runs/x/metrics.jsonl");
  ck_assert_str_eq(cfg.sample.prompt, "Once");
  ck_assert_int_eq(cfg.sample.tokens, 64);
  ck_assert_double_eq(cfg.sample.temperature, 0.8);
  ck_assert_int_eq(cfg.sample.top_k, 40);
  /* the document itself is untouched by the options copies */
  json_t *p0 = json_array_get(json_object_get(cfg.root, "parallel"), 0);
  ck_assert_str_eq(json_string_value(json_object_get(p0, "plugin")), "ddp");
}
END_TEST

START_TEST(test_defaults) {
  ck_assert_msg(load("{}") == 0, "%s", err);
  ck_assert_int_eq(cfg.model.vocab_size, 256);
  ck_assert_int_eq(cfg.model.padded_vocab_size, 256);
  ck_assert_int_eq(cfg.model.context_length, 256);
  ck_assert_int_eq(cfg.model.n_layer, 4);
  ck_assert_int_eq(cfg.model.n_head, 4);
  ck_assert_int_eq(cfg.model.n_embd, 128);
  ck_assert_str_eq(cfg.data.train, "");
  ck_assert_str_eq(cfg.data.val, "");
  ck_assert_str_eq(cfg.data.vocab, "");
  ck_assert_int_eq(cfg.train.micro_batch_size, 4);
  ck_assert_int_eq(cfg.train.seq_len, 256);
  ck_assert_int_eq(cfg.train.grad_accum_steps, 1);
  ck_assert_int_eq(cfg.train.global_batch_size, 0);
  ck_assert_int_eq(cfg.train.steps, 100);
  ck_assert_int_eq(cfg.train.eval_interval, 0);
  ck_assert_int_eq(cfg.train.eval_batches, 8);
  ck_assert(cfg.train.seed == 1337);
  ck_assert_double_eq(cfg.optimizer.lr, 3e-4);
  ck_assert_double_eq(cfg.optimizer.beta1, 0.9);
  ck_assert_double_eq(cfg.optimizer.beta2, 0.95);
  ck_assert_double_eq(cfg.optimizer.eps, 1e-8);
  ck_assert_double_eq(cfg.optimizer.weight_decay, 0.0);
  ck_assert_double_eq(cfg.optimizer.grad_clip, 1.0);
  ck_assert_int_eq(cfg.lr_schedule.warmup_steps, 0);
  ck_assert_str_eq(cfg.lr_schedule.decay, "cosine");
  ck_assert_double_eq_tol(cfg.lr_schedule.min_lr, 3e-5, 1e-18);
  ck_assert_str_eq(cfg.device.type, "cpu");
  ck_assert_int_eq(cfg.device.threads, 0);
  ck_assert(json_is_object(cfg.device.options)); /* never NULL */
  ck_assert_str_eq(cfg.comm.name, "mpi");
  ck_assert_str_eq(cfg.comm.json_path, "comm");
  ck_assert(json_is_object(cfg.comm.options));
  ck_assert_int_eq(cfg.n_parallel, 0);
  ck_assert_str_eq(cfg.precision.name, "fp32");
  ck_assert_str_eq(cfg.precision.json_path, "precision");
  ck_assert(json_is_object(cfg.precision.options));
  ck_assert_str_eq(cfg.checkpoint.name, "");
  ck_assert_ptr_null(cfg.checkpoint.options);
  ck_assert_int_eq(cfg.logging.interval, 1);
  ck_assert_str_eq(cfg.logging.metrics, "");
  ck_assert_str_eq(cfg.sample.prompt, "\n");
  ck_assert_int_eq(cfg.sample.tokens, 0);
  ck_assert_double_eq(cfg.sample.temperature, 1.0);
  ck_assert_int_eq(cfg.sample.top_k, 0);
  ck_assert_str_eq(cfg.init_from.path, "");
}
END_TEST

START_TEST(test_init_from) {
  /* the format from the extension, or given; null is "none" */
  ck_assert_int_eq(load("{\"init_from\": {\"path\": \"m/gpt2.safetensors\"}}"), 0);
  ck_assert_str_eq(cfg.init_from.path, "m/gpt2.safetensors");
  ck_assert_str_eq(cfg.init_from.format, "safetensors");
  loom_config_free(&cfg);
  ck_assert_int_eq(load("{\"init_from\": {\"path\": \"gpt2_124M.bin\"}}"), 0);
  ck_assert_str_eq(cfg.init_from.format, "llmc");
  loom_config_free(&cfg);
  ck_assert_int_eq(load("{\"init_from\": {\"path\": \"w\", \"format\": \"llmc\"}}"), 0);
  ck_assert_str_eq(cfg.init_from.format, "llmc");
  loom_config_free(&cfg);
  ck_assert_int_eq(load("{\"init_from\": null}"), 0);
  ck_assert_str_eq(cfg.init_from.path, "");
}
END_TEST

START_TEST(test_derived_defaults) {
  /* seq_len follows context_length; min_lr follows lr */
  ck_assert_msg(load("{\"model\": {\"context_length\": 64}, \"optimizer\": {\"lr\": 0.01}}") == 0,
                "%s", err);
  ck_assert_int_eq(cfg.train.seq_len, 64);
  ck_assert_double_eq_tol(cfg.lr_schedule.min_lr, 0.001, 1e-15);
}
END_TEST

START_TEST(test_parallel_forms) {
  ck_assert_msg(load("{\"parallel\": {\"plugin\": \"zero1\"}}") == 0, "%s", err);
  ck_assert_int_eq(cfg.n_parallel, 1);
  ck_assert_str_eq(cfg.parallel[0].name, "zero1");
  ck_assert_str_eq(cfg.parallel[0].json_path, "parallel[0]");
  ck_assert(json_is_array(json_object_get(cfg.root, "parallel"))); /* normalized */
  loom_config_free(&cfg);
  ck_assert_msg(load("{\"parallel\": []}") == 0, "%s", err);
  ck_assert_int_eq(cfg.n_parallel, 0);
  loom_config_free(&cfg);
  ck_assert_msg(load("{\"parallel\": null, \"checkpoint\": null}") == 0, "%s", err);
  ck_assert_int_eq(cfg.n_parallel, 0);
  ck_assert_str_eq(cfg.checkpoint.name, "");
  loom_config_free(&cfg);
  ck_assert_msg(load("{\"parallel\": [{\"plugin\": \"ddp\"}, {\"plugin\": \"a\"}, {\"plugin\": "
                     "\"b\"}, {\"plugin\": \"c\"}, {\"plugin\": \"d\"}, {\"plugin\": \"e\"}, "
                     "{\"plugin\": \"f\"}, {\"plugin\": \"./g.so\"}]}") == 0,
                "%s", err);
  ck_assert_int_eq(cfg.n_parallel, LOOM_MAX_PARALLEL);
  ck_assert_str_eq(cfg.parallel[7].name, "./g.so");
  ck_assert_str_eq(cfg.parallel[7].json_path, "parallel[7]");
}
END_TEST

/* "activation_checkpointing": absent = none, a policy name, or {policy, every}; errors name the
 * key and what was expected. */
START_TEST(test_activation_checkpointing) {
  static const struct { const char *json; int policy, every; } ok[] = {
      {"{}", GPT_CKPT_NONE, 1},
      {"{\"activation_checkpointing\": null}", GPT_CKPT_NONE, 1},
      {"{\"activation_checkpointing\": \"none\"}", GPT_CKPT_NONE, 1},
      {"{\"activation_checkpointing\": \"full\"}", GPT_CKPT_FULL, 1},
      {"{\"activation_checkpointing\": \"selective\"}", GPT_CKPT_SELECTIVE, 1},
      {"{\"activation_checkpointing\": {\"policy\": \"full\", \"every\": 2}}", GPT_CKPT_FULL, 2},
      {"{\"activation_checkpointing\": {\"every\": 3}}", GPT_CKPT_FULL, 3},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    ck_assert_msg(load(ok[i].json) == 0, "%s: %s", ok[i].json, err);
    ck_assert_int_eq(cfg.activation_checkpointing.policy, ok[i].policy);
    ck_assert_int_eq(cfg.activation_checkpointing.every, ok[i].every);
    loom_config_free(&cfg);
  }
  static const struct { const char *json, *msg; } bad[] = {
      {"{\"activation_checkpointing\": \"ful\"}",
       "t.json: activation_checkpointing: expected \"none\", \"full\" or \"selective\", or an "
       "object {\"policy\": ..., \"every\": k}, got \"ful\""},
      {"{\"activation_checkpointing\": true}",
       "t.json: activation_checkpointing: expected \"none\", \"full\" or \"selective\", or an "
       "object {\"policy\": ..., \"every\": k}, got true"},
      {"{\"activation_checkpointing\": {\"policy\": \"all\"}}",
       "t.json: activation_checkpointing.policy: expected \"none\", \"full\" or \"selective\", "
       "or an object {\"policy\": ..., \"every\": k}, got \"all\""},
      {"{\"activation_checkpointing\": {\"every\": 0}}",
       "t.json: activation_checkpointing.every: expected an integer in [1, 65536], got 0"},
      {"{\"activation_checkpointing\": {\"k\": 2}}",
       "t.json: activation_checkpointing.k: unknown key (expected one of: policy, every)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_msg(load(bad[i].json) == -1, "%s loaded", bad[i].json);
    ck_assert_msg(strcmp(err, bad[i].msg) == 0, "got      %s\nexpected %s", err, bad[i].msg);
  }
}
END_TEST

START_TEST(test_free_twice_and_zeroed) {
  loom_config z;
  memset(&z, 0, sizeof z);
  loom_config_free(&z);
  loom_config_free(NULL);
  ck_assert_int_eq(load("{}"), 0);
  loom_config_free(&cfg);
  loom_config_free(&cfg);
  ck_assert_ptr_null(cfg.root);
  /* a failed load leaves nothing to free */
  ck_assert_int_eq(load("{\"train\": {\"steps\": 0}}"), -1);
  ck_assert_ptr_null(cfg.root);
}
END_TEST

START_TEST(test_tiny_json) {
  const char *path = LOOM_TEST_SOURCE_DIR "/configs/tiny.json";
  ck_assert_msg(loom_config_load(&cfg, path, NULL, 0, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(cfg.path, path);
  ck_assert_int_eq(cfg.model.vocab_size, 256);
  ck_assert_int_eq(cfg.model.context_length, 64);
  ck_assert_int_eq(cfg.model.n_layer, 2);
  ck_assert_int_eq(cfg.model.n_head, 2);
  ck_assert_int_eq(cfg.model.n_embd, 32);
  ck_assert_int_eq(cfg.train.steps, 20);
  ck_assert_int_eq(cfg.train.micro_batch_size, 4);
  ck_assert_int_eq(cfg.n_parallel, 1);
  ck_assert_str_eq(cfg.parallel[0].name, "ddp");
  ck_assert_int_eq(loom_config_check_batch(&cfg, 2, err, sizeof err), 0);
  ck_assert_int_eq(cfg.train.global_batch_size, 8);
}
END_TEST

/* ---- errors: each kind, asserted on the exact text ------------------------------------------ */

typedef struct err_case {
  const char *json;
  const char *msg;
} err_case;

static const err_case ERR_CASES[] = {
    /* integers */
    {"{\"train\": {\"micro_batch_size\": \"8\"}}",
     "t.json: train.micro_batch_size: expected an integer in [1, 1073741824], got \"8\""},
    {"{\"train\": {\"micro_batch_size\": 4.0}}",
     "t.json: train.micro_batch_size: expected an integer in [1, 1073741824], got 4.0"},
    {"{\"train\": {\"steps\": 0}}", "t.json: train.steps: expected an integer in [1, 1073741824], got 0"},
    {"{\"train\": {\"steps\": null}}", "t.json: train.steps: expected an integer in [1, 1073741824], got null"},
    {"{\"train\": {\"steps\": 3000000000}}",
     "t.json: train.steps: expected an integer in [1, 1073741824], got 3000000000"},
    {"{\"train\": {\"global_batch_size\": -1}}",
     "t.json: train.global_batch_size: expected an integer >= 0, got -1"},
    {"{\"train\": {\"eval_interval\": true}}",
     "t.json: train.eval_interval: expected an integer in [0, 1073741824], got true"},
    {"{\"train\": {\"eval_batches\": 0}}",
     "t.json: train.eval_batches: expected an integer in [1, 1073741824], got 0"},
    {"{\"train\": {\"grad_accum_steps\": [2]}}",
     "t.json: train.grad_accum_steps: expected an integer in [1, 1073741824], got [2]"},
    {"{\"train\": {\"seed\": -1}}", "t.json: train.seed: expected an integer >= 0, got -1"},
    {"{\"model\": {\"vocab_size\": 1}}",
     "t.json: model.vocab_size: expected an integer in [2, 65536], got 1"},
    {"{\"model\": {\"vocab_size\": 65537}}",
     "t.json: model.vocab_size: expected an integer in [2, 65536], got 65537"},
    {"{\"model\": {\"n_layer\": 0}}", "t.json: model.n_layer: expected an integer in [1, 65536], got 0"},
    {"{\"device\": {\"threads\": -2}}",
     "t.json: device.threads: expected an integer in [0, 4096], got -2"},
    {"{\"logging\": {\"interval\": 0}}",
     "t.json: logging.interval: expected an integer in [1, 1073741824], got 0"},
    {"{\"sample\": {\"tokens\": -1}}", "t.json: sample.tokens: expected an integer in [0, 1073741824], got -1"},
    {"{\"model\": {\"vocab_size\": 300, \"padded_vocab_size\": 256}}",
     "t.json: model.padded_vocab_size: expected an integer in [300, 65536], got 256"},
    {"{\"sample\": {\"top_k\": 1.5}}", "t.json: sample.top_k: expected an integer in [0, 65536], got 1.5"},
    {"{\"lr_schedule\": {\"warmup_steps\": -1}}",
     "t.json: lr_schedule.warmup_steps: expected an integer >= 0, got -1"},
    /* numbers */
    {"{\"optimizer\": {\"lr\": 0}}", "t.json: optimizer.lr: expected a number > 0, got 0"},
    {"{\"optimizer\": {\"lr\": \"3e-4\"}}",
     "t.json: optimizer.lr: expected a number > 0, got \"3e-4\""},
    {"{\"optimizer\": {\"eps\": -1e-8}}",
     "t.json: optimizer.eps: expected a number > 0, got -1e-8"},
    {"{\"optimizer\": {\"weight_decay\": -0.1}}",
     "t.json: optimizer.weight_decay: expected a number >= 0, got -0.1"},
    {"{\"optimizer\": {\"grad_clip\": -1}}",
     "t.json: optimizer.grad_clip: expected a number >= 0, got -1"},
    {"{\"optimizer\": {\"betas\": [0.9]}}",
     "t.json: optimizer.betas: expected an array of 2 numbers [beta1, beta2], got [0.9]"},
    {"{\"optimizer\": {\"betas\": 0.9}}",
     "t.json: optimizer.betas: expected an array of 2 numbers [beta1, beta2], got 0.9"},
    {"{\"optimizer\": {\"betas\": [0.9, 1.0]}}",
     "t.json: optimizer.betas[1]: expected a number in [0, 1), got 1.0"},
    {"{\"optimizer\": {\"betas\": [-0.5, 0.9]}}",
     "t.json: optimizer.betas[0]: expected a number in [0, 1), got -0.5"},
    {"{\"sample\": {\"temperature\": 0}}",
     "t.json: sample.temperature: expected a number > 0, got 0"},
    {"{\"init_from\": {}}",
     "t.json: init_from.path: required key missing (expected the model file to start from, a "
     ".safetensors or llm.c .bin file)"},
    {"{\"init_from\": {\"path\": \"w.pt\"}}",
     "t.json: init_from.format: required when path does not end in .safetensors or .bin "
     "(expected \"safetensors\" or \"llmc\")"},
    {"{\"init_from\": {\"path\": \"w.bin\", \"format\": \"gguf\"}}",
     "t.json: init_from.format: expected \"safetensors\" or \"llmc\", got \"gguf\""},
    {"{\"init_from\": {\"path\": \"w.bin\", \"fmt\": \"llmc\"}}",
     "t.json: init_from.fmt: unknown key (expected one of: path, format)"},
    {"{\"init_from\": \"w.bin\"}", "t.json: init_from: expected an object, got \"w.bin\""},
    /* choices */
    {"{\"optimizer\": {\"name\": \"sgd\"}}",
     "t.json: optimizer.name: expected \"adamw\" (the only optimizer so far), got \"sgd\""},
    {"{\"lr_schedule\": {\"decay\": \"linear\"}}",
     "t.json: lr_schedule.decay: expected \"cosine\" or \"constant\", got \"linear\""},
    {"{\"device\": {\"type\": \"\"}}",
     "t.json: device.type: expected \"cpu\", a device plugin's name (\"cuda\") or a path to a "
     "device plugin .so, got \"\""},
    {"{\"device\": {\"type\": \"cpu\", \"tf32\": true}}",
     "t.json: device.tf32: unknown key (expected one of: type, threads)"},
    /* strings */
    {"{\"data\": {\"train\": 3}}", "t.json: data.train: expected a string, got 3"},
    {"{\"sample\": {\"prompt\": null}}", "t.json: sample.prompt: expected a string, got null"},
    /* cross-field */
    {"{\"model\": {\"context_length\": 128}, \"train\": {\"seq_len\": 256}}",
     "t.json: train.seq_len: expected <= model.context_length (128), got 256"},
    {"{\"model\": {\"n_head\": 3}}",
     "t.json: model.n_embd: expected a multiple of model.n_head (3), got 128"},
    {"{\"train\": {\"steps\": 10}, \"lr_schedule\": {\"warmup_steps\": 11}}",
     "t.json: lr_schedule.warmup_steps: expected <= train.steps (10), got 11"},
    {"{\"lr_schedule\": {\"min_lr\": 0.001}}",
     "t.json: lr_schedule.min_lr: expected a number in [0, optimizer.lr (0.0003)], got 0.001"},
    {"{\"optimizer\": {\"lr\": 1e-5}, \"lr_schedule\": {\"min_lr\": 2e-5}}",
     "t.json: lr_schedule.min_lr: expected a number in [0, optimizer.lr (1e-5)], got 2e-5"},
    {"{\"optimizer\": {\"lr\": 1e300}, \"lr_schedule\": {\"min_lr\": \"0\"}}",
     "t.json: lr_schedule.min_lr: expected a number in [0, optimizer.lr (1e300)], got \"0\""},
    {"{\"lr_schedule\": {\"min_lr\": -1e-5}}",
     "t.json: lr_schedule.min_lr: expected a number in [0, optimizer.lr (0.0003)], got -1e-5"},
    /* sizes: every count computed from config values must fit its type (issue 7, §5) */
    {"{\"model\": {\"n_layer\": 2000000000}}",
     "t.json: model.n_layer: expected an integer in [1, 65536], got 2000000000"},
    {"{\"model\": {\"n_embd\": 2147483647, \"n_head\": 1}}",
     "t.json: model.n_embd: expected an integer in [1, 1048576], got 2147483647"},
    {"{\"model\": {\"n_head\": 2147483647}}",
     "t.json: model.n_head: expected an integer in [1, 1048576], got 2147483647"},
    {"{\"model\": {\"context_length\": 2147483647}}",
     "t.json: model.context_length: expected an integer in [1, 1048576], got 2147483647"},
    {"{\"model\": {\"vocab_size\": 2147483647}}",
     "t.json: model.vocab_size: expected an integer in [2, 65536], got 2147483647"},
    {"{\"model\": {\"n_layer\": 65536, \"n_embd\": 1048576, \"n_head\": 1}}",
     "t.json: model.n_layer: n_layer 65536 x n_embd 1048576 gives 8.65e+17 parameters, more than "
     "the 2^40 (1.1e+12) this loom can size: lower model.n_layer or model.n_embd"},
    {"{\"model\": {\"context_length\": 1048576}, \"train\": {\"micro_batch_size\": 4096}}",
     "t.json: train.micro_batch_size: micro_batch_size 4096 x seq_len 1048576 = 4294967296 tokens "
     "per micro-batch, more than 2147483647: lower it and raise train.grad_accum_steps"},
    {"{\"train\": {\"micro_batch_size\": 2147483647}}",
     "t.json: train.micro_batch_size: expected an integer in [1, 1073741824], got 2147483647"},
    {"{\"train\": {\"grad_accum_steps\": 2147483647}}",
     "t.json: train.grad_accum_steps: expected an integer in [1, 1073741824], got 2147483647"},
    {"{\"train\": {\"steps\": 2147483647}}",
     "t.json: train.steps: expected an integer in [1, 1073741824], got 2147483647"},
    {"{\"train\": {\"eval_batches\": 2147483647}}",
     "t.json: train.eval_batches: expected an integer in [1, 1073741824], got 2147483647"},
    {"{\"train\": {\"timeout_s\": 2147483647}}",
     "t.json: train.timeout_s: expected an integer in [0, 31536000], got 2147483647"},
    {"{\"device\": {\"threads\": 100000}}",
     "t.json: device.threads: expected an integer in [0, 4096], got 100000"},
    {"{\"sample\": {\"tokens\": 2147483647}}",
     "t.json: sample.tokens: expected an integer in [0, 1073741824], got 2147483647"},
    /* unknown keys (comments are fine) */
    {"{\"_c\": 1, \"train\": {\"_c\": 2, \"stpes\": 3}}",
     "t.json: train.stpes: unknown key (expected one of: micro_batch_size, seq_len, "
     "grad_accum_steps, global_batch_size, steps, eval_interval, eval_batches, seed, timeout_s)"},
    {"{\"modle\": {}}",
     "t.json: modle: unknown key (expected one of: model, activation_checkpointing, data, train, "
     "optimizer, lr_schedule, device, comm, parallel, precision, checkpoint, logging, sample, "
     "init_from)"},
    {"{\"device\": {\"gpus\": 8}}",
     "t.json: device.gpus: unknown key (expected one of: type, threads)"},
    {"{\"optimizer\": {\"momentum\": 0.9}}",
     "t.json: optimizer.momentum: unknown key (expected one of: name, lr, betas, eps, "
     "weight_decay, grad_clip)"},
    /* sections and the top level */
    {"{\"model\": 3}", "t.json: model: expected an object, got 3"},
    {"{\"sample\": []}", "t.json: sample: expected an object, got []"},
    {"[1, 2]", "t.json: expected a JSON object at the top level, got [1,2]"},
    {"\"x\"", "t.json:1:3: '[' or '{' expected near '\"x\"'"},
    /* JSON syntax */
    {"{\"train\": {\"steps\": 3,}}", "t.json:1:23: string or '}' expected near '}'"},
    {"{\n  \"train\": {\"steps\": 1, \"steps\": 2}\n}",
     "t.json:2:31: duplicate object key near '\"steps\"'"},
    {"", "t.json:1:0: '[' or '{' expected near end of file"},
    /* plugins */
    {"{\"parallel\": \"ddp\"}",
     "t.json: parallel: expected an array of plugin objects like [{\"plugin\": \"ddp\"}], got "
     "\"ddp\""},
    {"{\"parallel\": [\"ddp\"]}",
     "t.json: parallel[0]: expected an object like {\"plugin\": \"ddp\"}, got \"ddp\""},
    {"{\"parallel\": [{\"plugin\": \"ddp\"}, {\"size\": 2}]}",
     "t.json: parallel[1].plugin: required key missing (expected a plugin name like \"ddp\" or a "
     "path ending in .so)"},
    {"{\"precision\": {\"plugin\": \"\"}}",
     "t.json: precision.plugin: expected a plugin name like \"fp32\" or a path ending in .so, got "
     "\"\""},
    {"{\"comm\": {\"plugin\": 1}}",
     "t.json: comm.plugin: expected a plugin name like \"mpi\" or a path ending in .so, got 1"},
    {"{\"checkpoint\": {\"plugin\": \"./ckpt\"}}",
     "t.json: checkpoint.plugin: expected a plugin name like \"checkpoint\" or a path ending in "
     ".so, got \"./ckpt\""},
    {"{\"precision\": null}",
     "t.json: precision: expected an object like {\"plugin\": \"fp32\"}, got null"},
    {"{\"checkpoint\": \"runs/ckpt\"}",
     "t.json: checkpoint: expected an object like {\"plugin\": \"checkpoint\"}, got "
     "\"runs/ckpt\""},
    {"{\"parallel\": [{\"plugin\": \"a\"}, {\"plugin\": \"b\"}, {\"plugin\": \"c\"}, {\"plugin\": "
     "\"d\"}, {\"plugin\": \"e\"}, {\"plugin\": \"f\"}, {\"plugin\": \"g\"}, {\"plugin\": \"h\"}, "
     "{\"plugin\": \"i\"}]}",
     "t.json: parallel: expected at most 8 plugins, got 9"},
    /* long values are cut in messages */
    {"{\"model\": \"0123456789012345678901234567890123456789012345678901234567890123456789\"}",
     "t.json: model: expected an object, got "
     "\"01234567890123456789012345678901234567890123456789012345..."},
};

START_TEST(test_error_messages) {
  const err_case *c = &ERR_CASES[_i];
  ck_assert_msg(load(c->json) == -1, "case %d loaded: %s", _i, c->json);
  ck_assert_msg(strcmp(err, c->msg) == 0, "case %d:\n  got      %s\n  expected %s", _i, err,
                c->msg);
  ck_assert_ptr_null(cfg.root);
  ck_assert_ptr_null(strchr(err, '\n'));
}
END_TEST

START_TEST(test_too_long_strings) {
  char json[2048], big[1100];
  memset(big, 'a', 600);
  big[600] = '\0';
  snprintf(json, sizeof json, "{\"data\": {\"train\": \"%s\"}}", big);
  ck_assert_int_eq(load(json), -1);
  ck_assert_str_eq(err, "t.json: data.train: expected a string of at most 511 bytes, got "
                        "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa... (600 bytes)");
  /* exactly at the limit fits */
  big[511] = '\0';
  snprintf(json, sizeof json, "{\"data\": {\"train\": \"%s\"}}", big);
  ck_assert_msg(load(json) == 0, "%s", err);
  ck_assert_uint_eq(strlen(cfg.data.train), 511);
  loom_config_free(&cfg);
  /* plugin names (or paths): 511 bytes */
  memset(big, 'p', 512);
  big[512] = '\0';
  snprintf(json, sizeof json, "{\"comm\": {\"plugin\": \"%s\"}}", big);
  ck_assert_int_eq(load(json), -1);
  ck_assert_ptr_nonnull(strstr(err, "t.json: comm.plugin: expected a string of at most 511 bytes"));
  ck_assert_ptr_nonnull(strstr(err, "(512 bytes)"));
  /* sample.prompt: 1023 bytes; \n escapes count once */
  memset(big, 'x', 1024);
  big[1024 - 1] = '\0';
  char *j2 = malloc(2048);
  snprintf(j2, 2048, "{\"sample\": {\"prompt\": \"%s\"}}", big);
  ck_assert_msg(load(j2) == 0, "%s", err);
  loom_config_free(&cfg);
  snprintf(j2, 2048, "{\"sample\": {\"prompt\": \"%sy\"}}", big);
  ck_assert_int_eq(load(j2), -1);
  ck_assert_ptr_nonnull(strstr(err, "sample.prompt: expected a string of at most 1023 bytes"));
  free(j2);
}
END_TEST

START_TEST(test_unicode_cut) {
  /* a cut value never splits a UTF-8 sequence: 2-byte characters from byte 1 */
  char json[512] = "{\"model\": \"";
  for (int i = 0; i < 40; i++) strcat(json, "\xc3\xa9"); /* é */
  strcat(json, "\"}");
  ck_assert_int_eq(load(json), -1);
  /* value text: '"' + 28 x é (56 bytes) = 57 bytes, then "..." */
  char want[256] = "t.json: model: expected an object, got \"";
  for (int i = 0; i < 28; i++) strcat(want, "\xc3\xa9");
  strcat(want, "...");
  ck_assert_str_eq(err, want);
}
END_TEST

/* ---- files ---------------------------------------------------------------------------------- */

START_TEST(test_file_missing) {
  ck_assert_int_eq(loom_config_load(&cfg, "/nonexistent/x.json", NULL, 0, err, sizeof err), -1);
  ck_assert_str_eq(err, "/nonexistent/x.json: cannot open: No such file or directory");
  ck_assert_int_eq(loom_config_load(&cfg, "/tmp", NULL, 0, err, sizeof err), -1);
  ck_assert_str_eq(err, "/tmp: cannot open: Is a directory");
}
END_TEST

/* A file that does not parse, or is not a document: the message names the file, the line and
 * the column (want: a format of the file's path). */
static const struct {
  const char *text, *want;
} FILE_PARSE_CASES[] = {
    /* a syntax error */
    {"{\n  \"train\": {\n    \"steps\": 10\n    \"seed\": 1\n  }\n}\n",
     "%s:4:10: '}' expected near '\"seed\"'"},
    /* not an object */
    {"42\n", "%s:1:2: '[' or '{' expected near '42'"},
};

START_TEST(test_file_parse_errors) {
  char path[64], want[256];
  write_temp(path, sizeof path, FILE_PARSE_CASES[_i].text);
  ck_assert_int_eq(loom_config_load(&cfg, path, NULL, 0, err, sizeof err), -1);
  snprintf(want, sizeof want, FILE_PARSE_CASES[_i].want, path);
  ck_assert_str_eq(err, want);
  unlink(path);
}
END_TEST

START_TEST(test_file_override_names_file) {
  char path[64], want[256];
  write_temp(path, sizeof path, "{\"train\": {\"micro_batch_size\": 4}}\n");
  const char *sets[] = {"train.micro_batch_size=\"8\""};
  ck_assert_int_eq(loom_config_load(&cfg, path, sets, 1, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: train.micro_batch_size: expected an integer in [1, 1073741824], got \"8\"",
           path);
  ck_assert_str_eq(err, want);
  const char *ok[] = {"train.micro_batch_size=8"};
  ck_assert_msg(loom_config_load(&cfg, path, ok, 1, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(cfg.train.micro_batch_size, 8);
  ck_assert_str_eq(cfg.path, path);
  unlink(path);
}
END_TEST

START_TEST(test_file_name_too_long) {
  char path[600];
  memset(path, 'a', sizeof path - 1);
  path[sizeof path - 1] = '\0';
  ck_assert_int_eq(loom_config_load(&cfg, path, NULL, 0, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, ": file name too long (at most 511 bytes)"));
}
END_TEST

/* ---- overrides ---------------------------------------------------------------------------- */

START_TEST(test_override_scalars) {
  const char *sets[] = {"train.steps=7", "train.steps=9", "optimizer.lr=1e-3",
                        "sample.prompt=hello world", "data.val=", "train.seed=0"};
  ck_assert_msg(load_set("{\"train\": {\"steps\": 100}}", sets, 6) == 0, "%s", err);
  ck_assert_int_eq(cfg.train.steps, 9); /* later wins */
  ck_assert_double_eq(cfg.optimizer.lr, 1e-3);
  ck_assert_str_eq(cfg.sample.prompt, "hello world"); /* not JSON: a plain string */
  ck_assert_str_eq(cfg.data.val, "");
  ck_assert(cfg.train.seed == 0);
  /* the document reflects the overrides */
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(cfg.root, "train"),
                                                      "steps")),
                   9);
}
END_TEST

START_TEST(test_override_json_vs_string) {
  const char *quoted[] = {"sample.prompt=\"42\""};
  ck_assert_msg(load_set("{}", quoted, 1) == 0, "%s", err);
  ck_assert_str_eq(cfg.sample.prompt, "42");
  loom_config_free(&cfg);
  const char *number[] = {"sample.prompt=42"};
  ck_assert_int_eq(load_set("{}", number, 1), -1);
  ck_assert_str_eq(err, "t.json: sample.prompt: expected a string, got 42");
  const char *broken[] = {"train.steps={\"a\":"}; /* not valid JSON: a string */
  ck_assert_int_eq(load_set("{}", broken, 1), -1);
  ck_assert_str_eq(err, "t.json: train.steps: expected an integer in [1, 1073741824], got \"{\\\"a\\\":\"");
  const char *obj[] = {"checkpoint={\"plugin\": \"checkpoint\", \"dir\": \"c\"}",
                       "checkpoint.every=5", "checkpoint.resume=true"};
  ck_assert_msg(load_set("{}", obj, 3) == 0, "%s", err);
  ck_assert_str_eq(cfg.checkpoint.name, "checkpoint");
  ck_assert_int_eq(json_integer_value(json_object_get(cfg.checkpoint.options, "every")), 5);
  ck_assert(json_is_true(json_object_get(cfg.checkpoint.options, "resume")));
  loom_config_free(&cfg);
  const char *off[] = {"checkpoint=null"};
  ck_assert_msg(load_set("{\"checkpoint\": {\"plugin\": \"checkpoint\"}}", off, 1) == 0, "%s",
                err);
  ck_assert_str_eq(cfg.checkpoint.name, "");
}
END_TEST

START_TEST(test_override_creates_path) {
  const char *sets[] = {"data.train=x/train_*.bin", "model.n_layer=2", "logging.metrics=m.jsonl"};
  ck_assert_msg(load_set("{}", sets, 3) == 0, "%s", err);
  ck_assert_str_eq(cfg.data.train, "x/train_*.bin");
  ck_assert_int_eq(cfg.model.n_layer, 2);
  ck_assert_str_eq(cfg.logging.metrics, "m.jsonl");
  loom_config_free(&cfg);
  /* a null intermediate counts as missing */
  const char *ck[] = {"checkpoint.plugin=checkpoint", "checkpoint.dir=d"};
  ck_assert_msg(load_set("{\"checkpoint\": null}", ck, 2) == 0, "%s", err);
  ck_assert_str_eq(cfg.checkpoint.name, "checkpoint");
  loom_config_free(&cfg);
  /* an unknown key made by an override is still an unknown key */
  const char *typo[] = {"train.stpes=3"};
  ck_assert_int_eq(load_set("{}", typo, 1), -1);
  ck_assert_ptr_nonnull(strstr(err, "t.json: train.stpes: unknown key (expected one of: "));
}
END_TEST

START_TEST(test_override_arrays) {
  const char *base = "{\"parallel\": [{\"plugin\": \"ddp\", \"bucket_size_mb\": 25}], "
                     "\"optimizer\": {\"betas\": [0.9, 0.95]}}";
  const char *sets[] = {"parallel[0].plugin=zero1", "parallel[0].bucket_size_mb=50",
                        "parallel[1]={\"plugin\": \"tp\"}", "parallel[1].size=2",
                        "optimizer.betas[1]=0.99"};
  ck_assert_msg(load_set(base, sets, 5) == 0, "%s", err);
  ck_assert_int_eq(cfg.n_parallel, 2);
  ck_assert_str_eq(cfg.parallel[0].name, "zero1");
  ck_assert_int_eq(json_integer_value(json_object_get(cfg.parallel[0].options, "bucket_size_mb")),
                   50);
  ck_assert_str_eq(cfg.parallel[1].name, "tp");
  ck_assert_int_eq(json_integer_value(json_object_get(cfg.parallel[1].options, "size")), 2);
  ck_assert_double_eq(cfg.optimizer.beta1, 0.9);
  ck_assert_double_eq(cfg.optimizer.beta2, 0.99);
}
END_TEST

START_TEST(test_override_betas_missing) {
  /* optimizer.betas[1] on a missing array: only index 0 (= length) may be appended */
  const char *sets[] = {"optimizer.betas[1]=0.99"};
  ck_assert_int_eq(load_set("{}", sets, 1), -1);
  ck_assert_str_eq(err, "--set 'optimizer.betas[1]=0.99': optimizer.betas[1]: index out of range "
                        "(the array has 0 elements)");
  const char *two[] = {"optimizer.betas[0]=0.8", "optimizer.betas[1]=0.9"};
  ck_assert_msg(load_set("{}", two, 2) == 0, "%s", err);
  ck_assert_double_eq(cfg.optimizer.beta1, 0.8);
  ck_assert_double_eq(cfg.optimizer.beta2, 0.9);
}
END_TEST

START_TEST(test_override_parallel_object_and_absent) {
  /* a single plugin object is parallel[0] */
  const char *sets[] = {"parallel[0].bucket_size_mb=50"};
  ck_assert_msg(load_set("{\"parallel\": {\"plugin\": \"ddp\"}}", sets, 1) == 0, "%s", err);
  ck_assert_int_eq(cfg.n_parallel, 1);
  ck_assert_int_eq(json_integer_value(json_object_get(cfg.parallel[0].options, "bucket_size_mb")),
                   50);
  loom_config_free(&cfg);
  /* absent: the array is created and index 0 appends */
  const char *add[] = {"parallel[0].plugin=ddp"};
  ck_assert_msg(load_set("{}", add, 1) == 0, "%s", err);
  ck_assert_int_eq(cfg.n_parallel, 1);
  ck_assert_str_eq(cfg.parallel[0].name, "ddp");
  loom_config_free(&cfg);
  /* a whole object set on "parallel", then indexed */
  const char *whole[] = {"parallel={\"plugin\": \"zero2\"}", "parallel[0].x=1"};
  ck_assert_msg(load_set("{}", whole, 2) == 0, "%s", err);
  ck_assert_str_eq(cfg.parallel[0].name, "zero2");
  ck_assert_int_eq(json_object_size(cfg.parallel[0].options), 1);
}
END_TEST

typedef struct set_err_case {
  const char *json, *set, *msg;
} set_err_case;

static const set_err_case SET_ERR_CASES[] = {
    {"{}", "xyz", "--set 'xyz': expected PATH=VALUE"},
    {"{}", "=3", "--set '=3': expected PATH=VALUE"},
    {"{}", "train..steps=3", "--set 'train..steps=3': expected PATH=VALUE"},
    {"{}", "train.=3", "--set 'train.=3': expected PATH=VALUE"},
    {"{}", ".train=3", "--set '.train=3': expected PATH=VALUE"},
    {"{}", "parallel[x]=3", "--set 'parallel[x]=3': expected PATH=VALUE"},
    {"{}", "parallel[0=3", "--set 'parallel[0=3': expected PATH=VALUE"},
    {"{}", "parallel[]=3", "--set 'parallel[]=3': expected PATH=VALUE"},
    {"{}", "parallel[-1]=3", "--set 'parallel[-1]=3': expected PATH=VALUE"},
    {"{}", "[0]=3", "--set '[0]=3': expected PATH=VALUE"},
    {"{}", "a]=3", "--set 'a]=3': expected PATH=VALUE"},
    {"{}", "a[0]b=3", "--set 'a[0]b=3': expected PATH=VALUE"},
    {"{}", "a\nb", "--set 'a?b': expected PATH=VALUE"},
    {"{\"parallel\": [{\"plugin\": \"ddp\"}]}", "parallel[2].plugin=x",
     "--set 'parallel[2].plugin=x': parallel[2]: index out of range (the array has 1 element)"},
    {"{\"train\": {\"steps\": 100}}", "train.steps.x=1",
     "--set 'train.steps.x=1': train.steps: expected an object, got 100"},
    {"{\"train\": {\"steps\": 100}}", "train[0]=1",
     "--set 'train[0]=1': train: expected an array, got {\"steps\":100}"},
    {"{\"optimizer\": {\"betas\": [0.9, 0.95]}}", "optimizer.betas[0].x=1",
     "--set 'optimizer.betas[0].x=1': optimizer.betas[0]: expected an object, got 0.9"},
    {"{}", "a.b=\xff", "--set 'a.b=\xff': value is not valid UTF-8"},
};

START_TEST(test_override_errors) {
  const set_err_case *c = &SET_ERR_CASES[_i];
  const char *sets[] = {c->set};
  ck_assert_msg(load_set(c->json, sets, 1) == -1, "case %d loaded", _i);
  ck_assert_msg(strcmp(err, c->msg) == 0, "case %d:\n  got      %s\n  expected %s", _i, err,
                c->msg);
  ck_assert_ptr_null(cfg.root);
}
END_TEST

START_TEST(test_override_long_arg_cut) {
  char arg[200];
  memset(arg, 'k', 150);
  arg[150] = '\0';
  const char *sets[] = {arg};
  ck_assert_int_eq(load_set("{}", sets, 1), -1);
  char want[200];
  snprintf(want, sizeof want, "--set '%.77s...': expected PATH=VALUE", arg);
  ck_assert_str_eq(err, want);
}
END_TEST

/* ---- global batch ---------------------------------------------------------------------------- */

START_TEST(test_batch_derived) {
  ck_assert_int_eq(load("{\"train\": {\"micro_batch_size\": 4, \"grad_accum_steps\": 2}}"), 0);
  ck_assert_int_eq(loom_config_check_batch(&cfg, 2, err, sizeof err), 0);
  ck_assert_int_eq(cfg.train.global_batch_size, 16);
  ck_assert_int_eq(loom_config_check_batch(&cfg, 2, err, sizeof err), 0); /* now it is set */
}
END_TEST

START_TEST(test_batch_mismatch) {
  ck_assert_int_eq(load("{\"train\": {\"micro_batch_size\": 4, \"grad_accum_steps\": 2, "
                        "\"global_batch_size\": 32}}"),
                   0);
  ck_assert_int_eq(loom_config_check_batch(&cfg, 2, err, sizeof err), -1);
  ck_assert_str_eq(err, "t.json: train.global_batch_size: 32 != micro_batch_size 4 x "
                        "grad_accum_steps 2 x data-parallel size 2 (= 16)");
  ck_assert_int_eq(cfg.train.global_batch_size, 32);
  ck_assert_int_eq(loom_config_check_batch(&cfg, 4, err, sizeof err), 0);
}
END_TEST

START_TEST(test_batch_bad_dp) {
  ck_assert_int_eq(load("{}"), 0);
  ck_assert_int_eq(loom_config_check_batch(&cfg, 0, err, sizeof err), -1);
  ck_assert_str_eq(err, "t.json: train.global_batch_size: data-parallel size must be >= 1, got 0");
  loom_config_free(&cfg);
  ck_assert_int_eq(loom_config_load_string(&cfg, "t.json",
                                           "{\"train\": {\"micro_batch_size\": 65536, "
                                           "\"grad_accum_steps\": 65536}}",
                                           NULL, 0, err, sizeof err),
                   0);
  ck_assert_int_eq(loom_config_check_batch(&cfg, 1, err, sizeof err), -1);
  ck_assert_str_eq(err, "t.json: train.global_batch_size: micro_batch_size 65536 x "
                        "grad_accum_steps 65536 x data-parallel size 1 (= 4294967296) is larger "
                        "than 2147483647");
}
END_TEST

/* ---- option getters ------------------------------------------------------------------------- */

static json_t *opts_obj;
static loom_options opts;

static void opts_setup(void) {
  opts_obj = json_loads("{\"a\": 3, \"b\": 2.5, \"c\": true, \"d\": \"s\", \"_x\": 1, "
                        "\"bucket_size_mb\": \"x\", \"n\": null}",
                        0, NULL);
  ck_assert_ptr_nonnull(opts_obj);
  opts = (loom_options){.file = "f.json", .where = "parallel[0]", .obj = opts_obj};
}

static void opts_teardown(void) { json_decref(opts_obj); }

START_TEST(test_opt_int) {
  int64_t v = -7;
  ck_assert_int_eq(loom_opt_int(&opts, "a", 0, 0, 10, &v, err, sizeof err), 0);
  ck_assert_int_eq(v, 3);
  ck_assert_int_eq(loom_opt_int(&opts, "zz", 42, 0, 10, &v, err, sizeof err), 0);
  ck_assert_int_eq(v, 42); /* default, as given */
  ck_assert_int_eq(loom_opt_int(&opts, "a", 0, 5, 10, &v, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: parallel[0].a: expected an integer in [5, 10], got 3");
  ck_assert_int_eq(loom_opt_int(&opts, "b", 0, 0, INT64_MAX, &v, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: parallel[0].b: expected an integer >= 0, got 2.5");
  ck_assert_int_eq(loom_opt_int(&opts, "d", 0, INT64_MIN, INT64_MAX, &v, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: parallel[0].d: expected an integer, got \"s\"");
  ck_assert_int_eq(loom_opt_int(&opts, "a", 0, INT64_MIN, 2, &v, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: parallel[0].a: expected an integer <= 2, got 3");
  ck_assert_int_eq(loom_opt_int(&opts, "n", 0, 1, INT_MAX, &v, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: parallel[0].n: expected an integer >= 1, got null");
}
END_TEST

START_TEST(test_opt_double) {
  double v = -1;
  ck_assert_int_eq(loom_opt_double(&opts, "b", 0, 0, 10, &v, err, sizeof err), 0);
  ck_assert_double_eq(v, 2.5);
  ck_assert_int_eq(loom_opt_double(&opts, "a", 0, 0, 10, &v, err, sizeof err), 0);
  ck_assert_double_eq(v, 3.0); /* integers are numbers */
  ck_assert_int_eq(loom_opt_double(&opts, "zz", 25, 0.001, 4096, &v, err, sizeof err), 0);
  ck_assert_double_eq(v, 25.0);
  ck_assert_int_eq(loom_opt_double(&opts, "bucket_size_mb", 25, 0.001, 4096, &v, err, sizeof err),
                   -1);
  ck_assert_str_eq(err,
                   "f.json: parallel[0].bucket_size_mb: expected a number in [0.001, 4096], got "
                   "\"x\"");
  ck_assert_int_eq(loom_opt_double(&opts, "b", 0, 3, INFINITY, &v, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: parallel[0].b: expected a number >= 3, got 2.5");
  ck_assert_int_eq(loom_opt_double(&opts, "b", 0, -INFINITY, 1, &v, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: parallel[0].b: expected a number <= 1, got 2.5");
  ck_assert_int_eq(loom_opt_double(&opts, "c", 0, -INFINITY, INFINITY, &v, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: parallel[0].c: expected a number, got true");
}
END_TEST

START_TEST(test_opt_bool_string) {
  int b = -1;
  ck_assert_int_eq(loom_opt_bool(&opts, "c", 0, &b, err, sizeof err), 0);
  ck_assert_int_eq(b, 1);
  ck_assert_int_eq(loom_opt_bool(&opts, "zz", 0, &b, err, sizeof err), 0);
  ck_assert_int_eq(b, 0);
  ck_assert_int_eq(loom_opt_bool(&opts, "a", 0, &b, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: parallel[0].a: expected true or false, got 3");
  const char *s = NULL, *dflt = "auto";
  ck_assert_int_eq(loom_opt_string(&opts, "d", dflt, &s, err, sizeof err), 0);
  ck_assert_str_eq(s, "s");
  ck_assert_ptr_eq(s, json_string_value(json_object_get(opts_obj, "d"))); /* points into doc */
  ck_assert_int_eq(loom_opt_string(&opts, "zz", dflt, &s, err, sizeof err), 0);
  ck_assert_ptr_eq(s, dflt);
  ck_assert_int_eq(loom_opt_string(&opts, "c", dflt, &s, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: parallel[0].c: expected a string, got true");
}
END_TEST

START_TEST(test_opt_check_keys) {
  static const char *const all[] = {"a", "b", "c", "d", "bucket_size_mb", "n", NULL};
  ck_assert_int_eq(loom_opt_check_keys(&opts, all, err, sizeof err), 0); /* "_x" ignored */
  static const char *const some[] = {"a", "b", "c", NULL};
  ck_assert_int_eq(loom_opt_check_keys(&opts, some, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: parallel[0].d: unknown key (expected one of: a, b, c)");
  static const char *const none[] = {NULL};
  ck_assert_int_eq(loom_opt_check_keys(&opts, none, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: parallel[0].a: unknown key (this object takes no keys)");
}
END_TEST

START_TEST(test_opt_empty_and_odd) {
  /* NULL object = {}: defaults, no unknown keys */
  loom_options empty = {.file = "f.json", .where = "precision", .obj = NULL};
  int64_t i;
  double d;
  int b;
  const char *s;
  static const char *const none[] = {NULL};
  ck_assert_int_eq(loom_opt_int(&empty, "k", 5, 0, 10, &i, err, sizeof err), 0);
  ck_assert_int_eq(i, 5);
  ck_assert_int_eq(loom_opt_double(&empty, "k", 0.5, 0, 1, &d, err, sizeof err), 0);
  ck_assert_double_eq(d, 0.5);
  ck_assert_int_eq(loom_opt_bool(&empty, "k", 1, &b, err, sizeof err), 0);
  ck_assert_int_eq(b, 1);
  ck_assert_int_eq(loom_opt_string(&empty, "k", "v", &s, err, sizeof err), 0);
  ck_assert_str_eq(s, "v");
  ck_assert_int_eq(loom_opt_check_keys(&empty, none, err, sizeof err), 0);
  ck_assert_int_eq(loom_opt_int(NULL, "k", 6, 0, 10, &i, err, sizeof err), 0);
  ck_assert_int_eq(i, 6);
  /* not an object */
  json_t *arr = json_array();
  loom_options bad = {.file = "f.json", .where = "comm", .obj = arr};
  ck_assert_int_eq(loom_opt_int(&bad, "k", 5, 0, 10, &i, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: comm: expected an object, got []");
  json_decref(arr);
  /* no file / no where */
  loom_options bare = {.obj = opts_obj};
  ck_assert_int_eq(loom_opt_bool(&bare, "a", 0, &b, err, sizeof err), -1);
  ck_assert_str_eq(err, "a: expected true or false, got 3");
  loom_options nowhere = {.file = "f.json", .obj = opts_obj};
  ck_assert_int_eq(loom_opt_bool(&nowhere, "a", 0, &b, err, sizeof err), -1);
  ck_assert_str_eq(err, "f.json: a: expected true or false, got 3");
  /* a small err buffer is cut, never overrun; NULL err is allowed */
  char small[8];
  ck_assert_int_eq(loom_opt_bool(&opts, "a", 0, &b, small, sizeof small), -1);
  ck_assert_str_eq(small, "f.json:");
  ck_assert_int_eq(loom_opt_bool(&opts, "a", 0, &b, NULL, 0), -1);
}
END_TEST

START_TEST(test_opt_with_loaded_config) {
  ck_assert_int_eq(load("{\"parallel\": [{\"plugin\": \"ddp\", \"_c\": \"big buckets\", "
                        "\"bucket_size_mb\": \"x\"}]}"),
                   0);
  loom_options o = {.file = cfg.path, .where = cfg.parallel[0].json_path,
                    .obj = cfg.parallel[0].options};
  static const char *const keys[] = {"bucket_size_mb", NULL};
  ck_assert_int_eq(loom_opt_check_keys(&o, keys, err, sizeof err), 0); /* no "plugin", no "_c" */
  double mb;
  ck_assert_int_eq(loom_opt_double(&o, "bucket_size_mb", 25, 0.001, 4096, &mb, err, sizeof err),
                   -1);
  ck_assert_str_eq(err, "t.json: parallel[0].bucket_size_mb: expected a number in [0.001, 4096], "
                        "got \"x\"");
}
END_TEST

static Suite *config_suite(void) {
  Suite *s = suite_create("config");
  check_add_tcase(s, "valid",
                  CHECK_TESTS(test_full_round_trip, test_defaults, test_derived_defaults,
                              test_init_from, test_parallel_forms, test_activation_checkpointing,
                              test_free_twice_and_zeroed, test_tiny_json),
                  NULL, teardown, 0);

  TCase *tc = check_add_tcase(s, "errors", CHECK_TESTS(test_too_long_strings, test_unicode_cut),
                              NULL, teardown, 0);
  tcase_add_loop_test(tc, test_error_messages, 0, (int)(sizeof ERR_CASES / sizeof *ERR_CASES));

  tc = check_add_tcase(s, "files",
                       CHECK_TESTS(test_file_missing, test_file_override_names_file,
                                   test_file_name_too_long),
                       NULL, teardown, 0);
  tcase_add_loop_test(tc, test_file_parse_errors, 0,
                      (int)(sizeof FILE_PARSE_CASES / sizeof *FILE_PARSE_CASES));

  tc = check_add_tcase(s, "overrides",
                       CHECK_TESTS(test_override_scalars, test_override_json_vs_string,
                                   test_override_creates_path, test_override_arrays,
                                   test_override_betas_missing,
                                   test_override_parallel_object_and_absent,
                                   test_override_long_arg_cut),
                       NULL, teardown, 0);
  tcase_add_loop_test(tc, test_override_errors, 0,
                      (int)(sizeof SET_ERR_CASES / sizeof *SET_ERR_CASES));

  check_add_tcase(s, "batch", CHECK_TESTS(test_batch_derived, test_batch_mismatch, test_batch_bad_dp),
                  NULL, teardown, 0);

  tc = check_add_tcase(s, "options",
                       CHECK_TESTS(test_opt_int, test_opt_double, test_opt_bool_string,
                                   test_opt_check_keys, test_opt_empty_and_odd,
                                   test_opt_with_loaded_config),
                       opts_setup, opts_teardown, 0);
  tcase_add_checked_fixture(tc, NULL, teardown);
  return s;
}

int main(void) {
  return check_run_suite(config_suite(), CK_FORK_GETENV);
}
