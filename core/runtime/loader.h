/* The plugin loader: find a plugin by name or path, dlopen it, check its identity and ABI, and
 * copy its table into a host-side struct of the kind (zero-filled, full size, min(size) copied,
 * so fields an older plugin lacks read as NULL = "use the default": abi_compat.c). Consumers
 * of p->u test a slot for NULL; hdr.struct_size and hdr.abi_minor stay the plugin's own.
 *
 * Search order for a bare name NAME (file NAME.so): each directory of $LOOM_PLUGIN_PATH
 * (colon-separated), then <directory of the loom executable>/../lib/loom/plugins (build and install trees alike),
 * then the install directory. A name containing '/' or ending in ".so" is used as a path. */
#ifndef LOOM_CORE_LOADER_H
#define LOOM_CORE_LOADER_H

#include <limits.h>
#include <loom/loom.h>
#include <stddef.h>
#include <stdio.h>

#define LOOM_MAX_SEARCH_DIRS 16

typedef struct loom_plugin {
  char name[128];        /* as asked for */
  char path[PATH_MAX];   /* the file that was opened */
  void *handle;          /* dlopen handle */
  loom_plugin_kind kind;
  union {
    loom_plugin_header hdr;
    loom_parallel_v1 parallel;
    loom_precision_v1 precision;
    loom_checkpoint_v1 checkpoint;
    loom_comm_v1 comm;
    loom_device_v1 device;
  } u;                   /* host copy of the plugin's table */
} loom_plugin;

/* Name of a kind ("parallel", "precision", ...). */
const char *loom__kind_name(loom_plugin_kind kind);

/* Fill dirs with the search path (see above); returns how many. */
int loom__plugin_search_path(char dirs[][PATH_MAX], int max);

/* Resolve `name` to a file. Returns 0, or -1 with "plugin 'NAME': not found (searched: ...)". */
int loom__plugin_resolve(const char *name, char *path, size_t pathlen, char *err, size_t errlen);

/* Open and check a plugin. kind == 0 accepts any kind. On failure returns -1 and err holds one
 * line naming the plugin, the file and the reason: not found, not a shared object, entry symbol
 * missing, wrong ABI major, wrong kind, required callback missing. */
int loom__plugin_open(loom_plugin *p, const char *name, loom_plugin_kind kind, char *err,
                      size_t errlen);
void loom__plugin_close(loom_plugin *p);

/* Print every plugin found on the search path: name, kind, version, ABI, caps, file
 * (and a line for each file that fails to load, with the reason). Returns the count found. */
int loom__plugin_list(FILE *out);

#endif
