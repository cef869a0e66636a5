/* "init_from" in the config: a run's parameters start from a Hugging Face GPT-2 safetensors
 * file or an llm.c model file instead of the seed's GPT-2 initialisation. Every rank opens the
 * file and fills only the parameters it holds (its tensor-parallel piece, its pipeline stage,
 * its ZeRO-3 partition through the host's init_params_range). A run that resumes from a
 * checkpoint does not read it: resume wins. */
#ifndef LOOM_CORE_EXPORT_INIT_FROM_H
#define LOOM_CORE_EXPORT_INIT_FROM_H

#include <jansson.h>
#include <stddef.h>

#include "config/config.h"
#include "model_files.h"

/* Open cfg->init_from's file and check it against the config's whole model (model.*): *out is
 * the open file (close with loom__model_file_close), or NULL when init_from is unset. 0, or -1
 * with "CONFIG: init_from.path: FILE: ..." in err. */
int loom__init_from_open(const loom_config *cfg, loom_model_file **out, char *err,
                         size_t errlen);

/* What checkpoints record of the source: {"path", "format", "bytes"}; NULL when unset. */
json_t *loom__init_from_record(const loom_config *cfg);

#endif
