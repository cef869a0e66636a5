/* init_from: opening the model file a run starts from (init_from.h). */
#include "init_from.h"

#include <sys/stat.h>

#include "gpt2_layout.h"
#include "util/fs_util.h"

int loom__init_from_open(const loom_config *cfg, loom_model_file **out, char *err,
                         size_t errlen) {
  *out = NULL;
  if (!cfg->init_from.path[0]) return 0;
  gpt_model table;
  char e[1024];
  if (loom__gpt2_table(&table, cfg->model.vocab_size, cfg->model.context_length,
                       cfg->model.n_layer, cfg->model.n_head, cfg->model.n_embd, e,
                       sizeof e) != 0) {
    loom__set_err(err, errlen, "%s: model: %s", cfg->path, e);
    return -1;
  }
  *out = loom__model_file_open(cfg->init_from.path,
                               (loom_model_format)loom__model_format(cfg->init_from.format),
                               &table, e, sizeof e);
  gpt_free(&table);
  if (!*out) {
    loom__set_err(err, errlen, "%s: init_from.path: %s", cfg->path, e);
    return -1;
  }
  return 0;
}

json_t *loom__init_from_record(const loom_config *cfg) {
  if (!cfg->init_from.path[0]) return NULL;
  struct stat sb;
  json_int_t bytes = stat(cfg->init_from.path, &sb) == 0 ? (json_int_t)sb.st_size : -1;
  return json_pack("{s:s, s:s, s:I}", "path", cfg->init_from.path, "format",
                   cfg->init_from.format, "bytes", bytes);
}
