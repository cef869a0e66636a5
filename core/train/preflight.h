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

/* Returns 0, or -1 with one line in err (the message train would print, minus its prefix). */
int loom_preflight(const char *config_path, const char *const *overrides, int n_overrides,
                   int world, char *err, size_t errlen);

#endif
