#include "tb_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <isa-l/crc.h>

#include "tensorboard.pb-c.h"
#include "../util/fs_util.h"

struct loom_tb_writer {
  FILE *f;
  char path[4096];
};

uint32_t loom_tb_crc32c(const void *data, size_t n) {
  /* ISA-L's crc32_iscsi neither pre- nor post-inverts: seed with ~0 and invert the result to get
   * the standard CRC-32C (check value of "123456789": 0xe3069283, tests/unit/check_monitor.c).
   * Its length argument is an int: feed large buffers in pieces. */
  uint32_t crc = 0xffffffffu;
  const unsigned char *p = data;
  while (n > 0) {
    int k = n > (1u << 30) ? (1 << 30) : (int)n;
    crc = crc32_iscsi((unsigned char *)p, k, crc);
    p += k;
    n -= (size_t)k;
  }
  return crc ^ 0xffffffffu;
}

uint32_t loom_tb_masked_crc(const void *data, size_t n) {
  uint32_t crc = loom_tb_crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le(unsigned char *out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) out[i] = (unsigned char)(v >> (8 * i));
}

static double wall_seconds(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

/* Pack ev and append it as one record; flushed so a reader sees whole records only. */
static int write_event(loom_tb_writer *w, const Tensorboard__Event *ev, char *err, size_t errlen) {
  size_t n = tensorboard__event__get_packed_size(ev);
  unsigned char *buf = malloc(n + 16);
  if (!buf) {
    snprintf(err, errlen, "%s: out of memory for a %zu-byte event", w->path, n);
    return -1;
  }
  unsigned char *data = buf + 12;
  tensorboard__event__pack(ev, data);
  put_le(buf, n, 8);
  put_le(buf + 8, loom_tb_masked_crc(buf, 8), 4);
  put_le(data + n, loom_tb_masked_crc(data, n), 4);
  size_t wrote = fwrite(buf, 1, n + 16, w->f);
  free(buf);
  if (wrote != n + 16 || fflush(w->f) != 0) {
    snprintf(err, errlen, "writing %s failed: %s", w->path, strerror(errno));
    return -1;
  }
  return 0;
}

loom_tb_writer *loom_tb_open(const char *dir, char *err, size_t errlen) {
  loom_tb_writer *w = calloc(1, sizeof *w);
  if (!w) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (loom__mkdir_p(dir, err, errlen) != 0) {
    free(w);
    return NULL;
  }
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  /* TensorBoard orders a directory's files by name: the timestamp keeps a resumed run's file
   * after the first one's; the pid keeps two files of the same second apart. */
  snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%ld", dir,
           (long long)time(NULL), host, (long)getpid());
  w->f = fopen(w->path, "wb");
  if (!w->f) {
    snprintf(err, errlen, "cannot create %s: %s", w->path, strerror(errno));
    free(w);
    return NULL;
  }
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = wall_seconds();
  ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
  ev.file_version = "brain.Event:2";
  if (write_event(w, &ev, err, errlen) != 0) {
    loom_tb_close(w);
    return NULL;
  }
  return w;
}

int loom_tb_session_start(loom_tb_writer *w, int64_t step, char *err, size_t errlen) {
  Tensorboard__SessionLog log = TENSORBOARD__SESSION_LOG__INIT;
  log.status = TENSORBOARD__SESSION_LOG__SESSION_STATUS__START;
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = wall_seconds();
  ev.step = step;
  ev.what_case = TENSORBOARD__EVENT__WHAT_SESSION_LOG;
  ev.session_log = &log;
  return write_event(w, &ev, err, errlen);
}

int loom_tb_scalars(loom_tb_writer *w, int64_t step, int n, const char *const *tags,
                    const double *values, char *err, size_t errlen) {
  Tensorboard__Summary__Value *vals = calloc((size_t)n + 1, sizeof *vals);
  Tensorboard__Summary__Value **ptrs = calloc((size_t)n + 1, sizeof *ptrs);
  if (!vals || !ptrs) {
    free(vals);
    free(ptrs);
    snprintf(err, errlen, "%s: out of memory", w->path);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    Tensorboard__Summary__Value v = TENSORBOARD__SUMMARY__VALUE__INIT;
    v.tag = (char *)tags[i];
    v.value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = (float)values[i];
    vals[i] = v;
    ptrs[i] = &vals[i];
  }
  Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
  sum.n_value = (size_t)n;
  sum.value = ptrs;
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = wall_seconds();
  ev.step = step;
  ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
  ev.summary = &sum;
  int rc = write_event(w, &ev, err, errlen);
  free(vals);
  free(ptrs);
  return rc;
}

int loom_tb_text(loom_tb_writer *w, int64_t step, const char *tag, const char *text, char *err,
                 size_t errlen) {
  Tensorboard__SummaryMetadata__PluginData plugin = TENSORBOARD__SUMMARY_METADATA__PLUGIN_DATA__INIT;
  plugin.plugin_name = "text";
  Tensorboard__SummaryMetadata meta = TENSORBOARD__SUMMARY_METADATA__INIT;
  meta.plugin_data = &plugin;
  Tensorboard__TensorShapeProto shape = TENSORBOARD__TENSOR_SHAPE_PROTO__INIT; /* a scalar */
  ProtobufCBinaryData s = {.len = strlen(text), .data = (uint8_t *)text};
  Tensorboard__TensorProto tensor = TENSORBOARD__TENSOR_PROTO__INIT;
  tensor.dtype = 7; /* DT_STRING */
  tensor.tensor_shape = &shape;
  tensor.n_string_val = 1;
  tensor.string_val = &s;
  Tensorboard__Summary__Value v = TENSORBOARD__SUMMARY__VALUE__INIT;
  v.tag = (char *)tag;
  v.metadata = &meta;
  v.value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_TENSOR;
  v.tensor = &tensor;
  Tensorboard__Summary__Value *pv = &v;
  Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
  sum.n_value = 1;
  sum.value = &pv;
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = wall_seconds();
  ev.step = step;
  ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
  ev.summary = &sum;
  return write_event(w, &ev, err, errlen);
}

const char *loom_tb_path(const loom_tb_writer *w) { return w->path; }

void loom_tb_close(loom_tb_writer *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  free(w);
}
