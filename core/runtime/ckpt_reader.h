/* A checkpoint opened for reading by a command (loom export) through the checkpoint plugin's
 * reader slots (checkpoint_v1.h, ABI 1.6): the plugin is dlopened on its own, with no mesh, no
 * device and no job; nothing is created, locked or written. */
#ifndef LOOM_CORE_CKPT_READER_H
#define LOOM_CORE_CKPT_READER_H

#include <jansson.h>
#include <stddef.h>

#include "loader.h"
#include "runtime.h"

typedef struct loom_ckpt_reader {
  loom_plugin plugin;       /* the checkpoint plugin (its table: plugin.u.checkpoint) */
  loom_host host;           /* what the reader reports to (no runtime behind it) */
  char label[160];          /* "NAME (checkpoint)" or "NAME (CONFIG: checkpoint)" */
  void *r;                  /* the plugin's reader */
  loom_ckpt_info_v1 info;   /* the selected step (info.meta_json, info.where: the plugin's) */
} loom_ckpt_reader;

/* Open checkpoint plugin `plugin` (a name or a path, as a config's checkpoint.plugin) with
 * `options` (its config object minus "plugin"; NULL = {}; `file` and `json_path` name it in
 * messages, NULL for none) and read `path` (NULL: where the options say), selecting `step` (0:
 * the newest complete one). 0, or -1 with err naming the plugin: not found, no reader (a
 * plugin built before ABI 1.6, or one without it), or the plugin's own message. */
int loom__ckpt_reader_open(loom_ckpt_reader *rd, const char *plugin, json_t *options,
                           const char *file, const char *json_path, const char *path,
                           int step, char *err, size_t errlen);

/* The selected step's saved tensor `name` into *out: 0, or -1 when there is none. */
int loom__ckpt_reader_find(loom_ckpt_reader *rd, const char *name, loom_ckpt_tensor_v1 *out);

/* Elements [first, first + count) of saved tensor `name` into host dst, in its saved dtype.
 * 0, or -1 with the plugin's message in err. */
int loom__ckpt_reader_read(loom_ckpt_reader *rd, const char *name, uint64_t first,
                           uint64_t count, void *dst, char *err, size_t errlen);

void loom__ckpt_reader_close(loom_ckpt_reader *rd);

#endif
