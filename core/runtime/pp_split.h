/* The pipeline split: every stage's contiguous unit range [first, last], from the pipeline
 * entry's "stages" (units per stage) or balanced by parameter count. Shared by the trainer
 * (which builds its stage from it) and `loom estimate` (which accounts every stage), so the two
 * cannot disagree. Needs no device: the parameter table is built without storage. */
#ifndef LOOM_CORE_PP_SPLIT_H
#define LOOM_CORE_PP_SPLIT_H

#include <stddef.h>

#include "../model/gpt.h"
#include "runtime.h"

/* Fill rt->pp_first/pp_last for rt->pp_size stages (read by loom__plugins_open: pp_size,
 * pp_explicit, pp_units). `full` is the whole model's config (pp_first = pp_end = 0) with the
 * tensor-parallel size of the run. Without "stages": contiguous unit ranges minimising the
 * largest stage's parameters, the last stage counted with its copy of the tied wte (V*C), by
 * dynamic programming (the first such split in the order of the recursion: deterministic).
 * With "chunks" v > 1 (rt->pp_chunks): pp * v virtual stages (rt->pp_vfirst/pp_vlast) of
 * n_layer / (pp * v) blocks each (refused, naming the numbers, when that does not divide) or
 * as "stages" gives them, stage s holding virtual stages k * pp + s; pp_first/pp_last are
 * then each stage's hull. Returns 0, or -1 with one line in err. */
int loom__pp_split(loom_runtime *rt, const gpt_config *full, char *err, size_t errlen);

/* `full` restricted to stage s of rt's split: pp_first/pp_end set, and its chunks (pp 1:
 * `full` unchanged). */
gpt_config loom__pp_stage_config(const loom_runtime *rt, const gpt_config *full, int s);

#endif
