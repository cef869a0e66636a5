/* The config's plugins: open (check kind, ABI, roles), create (options), setup, destroy. */
#ifndef LOOM_CORE_PLUGINS_H
#define LOOM_CORE_PLUGINS_H

#include "runtime.h"
#include "storage_plan.h"

/* dlopen and check every plugin the config names (comm included); refuse conflicting roles (two owners of
 * gradient sync, of the optimizer step, of the schedule) and capabilities this host cannot
 * run. Returns 0 or -1 with one line in err. Needs no communication (runs before the mesh). */
int loom__plugins_open(loom_runtime *rt, char *err, size_t errlen);
/* Call create() of each plugin with its options (mesh and device exist; model does not). */
int loom__plugins_create(loom_runtime *rt, char *err, size_t errlen);
/* Create the precision plugin only (part of loom__plugins_create; `loom estimate` calls it
 * alone) and set rt->compute_dtype from it. 0, or -1 with err. */
int loom__precision_create(loom_runtime *rt, char *err, size_t errlen);
/* Call setup() of each parallel plugin (the model exists). */
int loom__plugins_setup(loom_runtime *rt, char *err, size_t errlen);
void loom__plugins_destroy(loom_runtime *rt);
/* loom__grads_predivided (1 when the loss gradient is divided by dp) lives with the rest of
 * the storage plan: storage_plan.h. */
/* Format the error of parallel plugin i's failed `hook` into err; returns -1. */
int loom__hook_error(loom_runtime *rt, int i, const char *hook, int rc, char *err,
                     size_t errlen);
/* The text of a loom_status (common_v1.h's LOOM_STATUS_MAP): "invalid configuration", ...;
 * "error" for a value outside the list. */
const char *loom__status_text(int rc);
/* Whether a plugin's error message already starts with "CONFIG_PATH:" (the host's option
 * getters name the file and the JSON path themselves), so a caller does not prefix it twice. */
int loom__error_names_config(const loom_runtime *rt, const char *msg);

#endif
