/* loom export RUN_OR_CKPT_OR_CONFIG --format safetensors|llmc OUT
 *
 * From a checkpoint (a step directory, a checkpoint directory, or a run directory with ckpt/):
 * the parameters of that step, assembled tensor by tensor from whatever layout saved them
 * (ckpt_view.h), written as a Hugging Face GPT-2 safetensors file or an llm.c model file
 * (model_files.h). From a config (a .json file): the parameters that config's run starts from
 * (its init_from file or the seed's GPT-2 initialisation), built on one rank in host memory. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/config.h"
#include "device/device.h"
#include "ckpt_view.h"
#include "export_cmd.h"
#include "formats/gpt2_layout.h"
#include "formats/init_from.h"
#include "formats/model_files.h"
#include "util/fs_util.h"
#include "util/one_line.h"

void loom_export_help(FILE *out) {
  fprintf(out,
          "usage: loom export RUN_OR_CKPT --format safetensors|llmc OUT [--checkpoint PLUGIN |\n"
          "                   --config CONFIG.json]\n"
          "Write a checkpoint's parameters as a Hugging Face GPT-2 safetensors file (names\n"
          "wte.weight, h.N.attn.c_attn.weight, ...; Conv1D weights (in, out)) or an llm.c model\n"
          "file (header 20240326, version 3, vocabulary padded to a multiple of 128).\n"
          "RUN_OR_CKPT: a step directory (ckpt/step-00000100), a checkpoint directory or a run\n"
          "directory with ckpt/ (its newest checkpoint), written under any layout (ddp, ZeRO,\n"
          "tensor or pipeline parallel); or a config file (CONFIG.json): the parameters its run\n"
          "starts from (init_from or the seed's initialisation).\n"
          "The checkpoint is read by a checkpoint plugin's reader: loom's own (checkpoint) unless\n"
          "  --checkpoint PLUGIN  names another (a name on the plugin path, or a .so's path), or\n"
          "  --config CONFIG.json gives a config whose checkpoint section names the plugin and\n"
          "                       its options (the run's own config).\n"
          "To start a run from such a file: \"init_from\": {\"path\": FILE} in the config\n"
          "(docs/checkpoints.md).\n");
}

/* ---- tensors from a config's initial model ---- */

typedef struct initial_model {
  loom_dev dev;
  gpt_model m;
} initial_model;

/* The model's tensor p->name; a padded wte (Vp rows) gives its first V rows (p->numel floats,
 * row-major: a prefix). */
static int initial_read(void *ctx, const gpt_param *p, float *dst, char *err, size_t errlen) {
  initial_model *im = ctx;
  for (int i = 0; i < im->m.n_params; i++)
    if (!strcmp(im->m.params[i].name, p->name)) {
      im->dev.ops->to_host(im->dev.ctx, dst, im->m.params[i].data, p->numel * sizeof(float));
      return 0;
    }
  loom__set_err(err, errlen, "no tensor '%s' in the model", p->name); /* defensive */
  return -1;
}

static int initial_open(initial_model *im, const loom_config *cfg, char *err, size_t errlen) {
  char e[1024];
  memset(im, 0, sizeof *im);
  if (loom__dev_open(&im->dev, loom__cpu_device(), "{\"type\":\"cpu\",\"threads\":0}", 0, e,
                     sizeof e) != LOOM_OK) {
    loom__set_err(err, errlen, "device: %s", e);
    return -1;
  }
  gpt_config mc = {.vocab_size = cfg->model.vocab_size, .max_seq_len = cfg->model.context_length,
                   .n_layer = cfg->model.n_layer, .n_head = cfg->model.n_head,
                   .n_embd = cfg->model.n_embd,
                   .padded_vocab_size = cfg->model.padded_vocab_size};
  if (gpt_init_ex(&im->m, &mc, &im->dev, GPT_NO_GRAD_STORAGE, e, sizeof e) != LOOM_OK) {
    loom__set_err(err, errlen, "%s: %s", cfg->path, e);
    loom__dev_close(&im->dev);
    return -1;
  }
  loom_model_file *f;
  int rc = loom__init_from_open(cfg, &f, err, errlen);
  if (!rc && f) {
    rc = loom__model_file_fill(f, &im->m, 0, im->m.num_parameters, im->m.params_memory, e,
                               sizeof e);
    if (rc) loom__set_err(err, errlen, "%s: init_from.path: %s", cfg->path, e);
  } else if (!rc) {
    gpt_init_weights(&im->m, cfg->train.seed);
  }
  loom__model_file_close(f);
  if (rc) {
    gpt_free(&im->m);
    loom__dev_close(&im->dev);
  }
  return rc;
}

/* ---- tensors from a checkpoint ---- */

static int ckpt_read(void *ctx, const gpt_param *p, float *dst, char *err, size_t errlen) {
  return loom__ckpt_view_read(ctx, p, dst, err, errlen);
}

/* safetensors "__metadata__" (strings only): where the tensors came from and loom's config. */
static char *ckpt_metadata(const loom_ckpt_view *v) {
  json_t *md = json_object();
  char step[24];
  snprintf(step, sizeof step, "%d", v->step);
  json_object_set_new(md, "loom.source", json_string(v->dir));
  json_object_set_new(md, "loom.step", json_string(step));
  static const char *const keys[] = {"model", "config", "init_from"};
  for (int i = 0; i < 3; i++) {
    json_t *x = json_object_get(v->meta, keys[i]);
    char *s = x ? json_dumps(x, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    char k[32];
    snprintf(k, sizeof k, "loom.%s", keys[i]);
    if (s) json_object_set_new(md, k, json_string(s));
    free(s);
  }
  char *text = json_dumps(md, JSON_COMPACT);
  json_decref(md);
  return text;
}

static int is_config_file(const char *path) {
  struct stat sb;
  size_t n = strlen(path);
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && n > 5 && !strcmp(path + n - 5, ".json");
}

/* The initial parameters of config file `path` to `out`. 0, or -1 with err. */
static int export_initial(const char *path, const char *out, int format, char *err,
                          size_t errlen) {
  loom_config cfg;
  initial_model im;
  gpt_model table;
  if (loom_config_load(&cfg, path, NULL, 0, err, errlen) != 0) return -1;
  int rc = initial_open(&im, &cfg, err, errlen);
  if (!rc) {
    char md[256];
    snprintf(md, sizeof md, "{\"loom.source\": \"initial parameters of a config\"}");
    /* the unpadded table: a padded wte's rows past V are no token's and are not exported */
    rc = loom__gpt2_table(&table, cfg.model.vocab_size, cfg.model.context_length,
                          cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, err, errlen);
    if (!rc) {
      rc = loom__model_file_write(out, (loom_model_format)format, &table, initial_read, &im, md,
                                  err, errlen);
      gpt_free(&table);
    }
    gpt_free(&im.m);
    loom__dev_close(&im.dev);
  }
  loom_config_free(&cfg);
  return rc;
}

/* Checkpoint `src`, read by `plugin` (NULL: loom's own) or by the checkpoint plugin and options
 * of config file `config`, to `out`. 0, or -1 with err. */
static int export_checkpoint(const char *src, const char *plugin, const char *config,
                             const char *out, int format, const char *fmt, char *err,
                             size_t errlen) {
  loom_config cfg;
  loom_ckpt_source from = {.plugin = plugin};
  if (config) {
    if (loom_config_load(&cfg, config, NULL, 0, err, errlen) != 0) return -1;
    if (!cfg.checkpoint.name[0]) {
      loom__set_err(err, errlen, "%s: checkpoint: the config names no checkpoint plugin "
                    "(checkpoint is null)", config);
      loom_config_free(&cfg);
      return -1;
    }
    from = (loom_ckpt_source){.plugin = cfg.checkpoint.name, .options = cfg.checkpoint.options,
                              .file = cfg.path, .json_path = cfg.checkpoint.json_path};
  }
  loom_ckpt_view v;
  gpt_model table;
  int rc = loom__ckpt_view_open(&v, &from, src, err, errlen);
  if (!rc)
    rc = loom__gpt2_table(&table, v.vocab_size, v.context_length, v.n_layer, v.n_head, v.n_embd,
                          err, errlen);
  if (!rc) {
    char *md = ckpt_metadata(&v);
    rc = loom__model_file_write(out, (loom_model_format)format, &table, ckpt_read, &v, md, err,
                                errlen);
    free(md);
    gpt_free(&table);
    if (!rc)
      printf("loom export: %s (step %d, dp %d x tp %d x pp %d) -> %s (%s)\n", v.dir, v.step,
             (int)json_integer_value(json_object_get(v.meta, "dp")), v.tp, v.pp, out, fmt);
  }
  loom__ckpt_view_close(&v);
  if (config) loom_config_free(&cfg);
  return rc;
}

int loom_cmd_export(int argc, char **argv) {
  const char *src = NULL, *out = NULL, *fmt = NULL, *plugin = NULL, *config = NULL;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--format") && i + 1 < argc) fmt = argv[++i];
    else if (!strncmp(argv[i], "--format=", 9)) fmt = argv[i] + 9;
    else if (!strcmp(argv[i], "--checkpoint") && i + 1 < argc) plugin = argv[++i];
    else if (!strncmp(argv[i], "--checkpoint=", 13)) plugin = argv[i] + 13;
    else if (!strcmp(argv[i], "--config") && i + 1 < argc) config = argv[++i];
    else if (!strncmp(argv[i], "--config=", 9)) config = argv[i] + 9;
    else if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "loom export: unknown option '%s'\n", argv[i]);
      loom_export_help(stderr);
      return 2;
    } else if (!src) src = argv[i];
    else if (!out) out = argv[i];
    else {
      fprintf(stderr, "loom export: unexpected argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (!src || !out || !fmt) {
    fprintf(stderr, "loom export: missing %s\n", !src ? "RUN_OR_CKPT" : !fmt ? "--format" : "OUT");
    loom_export_help(stderr);
    return 2;
  }
  int format = loom__model_format(fmt);
  if (format < 0) {
    fprintf(stderr, "loom export: --format: expected safetensors or llmc, got '%s'\n", fmt);
    return 2;
  }
  if (plugin && config) {
    fprintf(stderr, "loom export: --checkpoint and --config both name the checkpoint plugin: "
            "give one\n");
    return 2;
  }
  char err[2048];
  int rc = plugin || config || !is_config_file(src)
               ? export_checkpoint(src, plugin, config, out, format, fmt, err, sizeof err)
               : export_initial(src, out, format, err, sizeof err);
  if (rc) {
    loom__put_line(stderr, "loom export: error: ", err);
    return 1;
  }
  return 0;
}
