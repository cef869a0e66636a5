/* Reading a checkpoint through its plugin, outside a job (ckpt_reader.h). */
#include "ckpt_reader.h"

#include <stdio.h>
#include <string.h>

/* The reader's message, named by the plugin ("checkpoint: runs/x: no checkpoint there ..."). */
static int reader_error(loom_ckpt_reader *rd, const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: %s", rd->plugin.u.hdr.name ? rd->plugin.u.hdr.name : rd->plugin.name,
           rd->host.error[0] ? rd->host.error : what);
  return -1;
}

int loom__ckpt_reader_open(loom_ckpt_reader *rd, const char *plugin, json_t *options,
                           const char *file, const char *json_path, const char *path,
                           int step, char *err, size_t errlen) {
  memset(rd, 0, sizeof *rd);
  if (loom__plugin_open(&rd->plugin, plugin, LOOM_KIND_CHECKPOINT, err, errlen) != 0) return -1;
  const loom_checkpoint_v1 *ck = &rd->plugin.u.checkpoint;
  /* the loader's copy is zero-filled past the plugin's struct_size: a slot it lacks is NULL */
  if (!ck->reader_open || !ck->reader_close || !ck->reader_steps || !ck->reader_select ||
      !ck->reader_tensor || !ck->reader_read) {
    snprintf(err, errlen, "checkpoint plugin '%s' (%s, ABI %d.%d) has no reader (the ABI 1.6 "
             "reader slots): its checkpoints can be resumed by loom train but not read by "
             "this command", plugin, rd->plugin.path, ck->hdr.abi_major, ck->hdr.abi_minor);
    loom__plugin_close(&rd->plugin);
    return -1;
  }
  snprintf(rd->label, sizeof rd->label, "%s (%s)", plugin, json_path ? json_path : "checkpoint");
  loom__host_init(&rd->host, NULL, rd->label, file ? file : "", json_path ? json_path : "",
                  options);
  if (ck->reader_open(loom__host_api(), &rd->host, &rd->host.opts, path, &rd->r) != LOOM_OK) {
    rd->r = NULL;
    reader_error(rd, "opening the checkpoint failed", err, errlen);
    loom__ckpt_reader_close(rd);
    return -1;
  }
  rd->info.struct_size = sizeof rd->info;
  if (ck->reader_select(rd->r, step, &rd->info) != LOOM_OK || !rd->info.meta_json ||
      !rd->info.where) {
    reader_error(rd, "selecting a checkpoint failed", err, errlen);
    loom__ckpt_reader_close(rd);
    return -1;
  }
  return 0;
}

int loom__ckpt_reader_find(loom_ckpt_reader *rd, const char *name, loom_ckpt_tensor_v1 *out) {
  const loom_checkpoint_v1 *ck = &rd->plugin.u.checkpoint;
  for (int i = 0; i < rd->info.n_tensors; i++) {
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    if (ck->reader_tensor(rd->r, i, out) == LOOM_OK && out->name && !strcmp(out->name, name))
      return 0;
  }
  return -1;
}

int loom__ckpt_reader_read(loom_ckpt_reader *rd, const char *name, uint64_t first,
                           uint64_t count, void *dst, char *err, size_t errlen) {
  rd->host.error[0] = '\0';
  if (rd->plugin.u.checkpoint.reader_read(rd->r, name, first, count, dst) == LOOM_OK) return 0;
  return reader_error(rd, "reading failed", err, errlen);
}

void loom__ckpt_reader_close(loom_ckpt_reader *rd) {
  if (rd->r) rd->plugin.u.checkpoint.reader_close(rd->r);
  rd->r = NULL;
  if (rd->plugin.handle) {
    loom__host_release(&rd->host);
    loom__plugin_close(&rd->plugin);
  }
  memset(rd, 0, sizeof *rd);
}
