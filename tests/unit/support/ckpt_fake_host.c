/* The checkpoint tests' fake host (ckpt_fake_host.h). */
#include "ckpt_fake_host.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void h_log(loom_host *h, loom_log_level level, const char *fmt, ...) {
  (void)fmt;
  if (level <= LOOM_LOG_WARN) h->warnings++;
}
static void h_set_error(loom_host *h, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(h->error, sizeof h->error, fmt, ap);
  va_end(ap);
}
static int h_opt_int(loom_host *h, const loom_options *o, const char *key, int64_t dflt,
                     int64_t min, int64_t max, int64_t *out) {
  (void)h, (void)o, (void)key, (void)min, (void)max;
  *out = dflt;
  return LOOM_OK;
}
static int h_opt_bool(loom_host *h, const loom_options *o, const char *key, int dflt, int *out) {
  (void)h, (void)o, (void)key;
  *out = dflt;
  return LOOM_OK;
}
static int h_opt_string(loom_host *h, const loom_options *o, const char *key, const char *dflt,
                        const char **out) {
  (void)h;
  *out = strcmp(key, "dir") == 0 ? o->dir : dflt;
  return LOOM_OK;
}
static int h_opt_check_keys(loom_host *h, const loom_options *o, const char *const *allowed) {
  (void)h, (void)o, (void)allowed;
  return LOOM_OK;
}
static int h_rank(loom_host *h, loom_axis a) { (void)h, (void)a; return 0; }
static int h_size(loom_host *h, loom_axis a) { (void)h, (void)a; return 1; }
static loom_comm *h_comm(loom_host *h, loom_axis a) { (void)h, (void)a; return NULL; }
static void d_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  memcpy(dst, src, bytes);
}
static const loom_device_v1 g_dev = {.to_host = d_copy, .from_host = d_copy};
static const loom_device_v1 *h_device(loom_host *h, void **ctx) {
  (void)h;
  *ctx = NULL;
  return &g_dev;
}

const loom_host_api_v1 ckpt_fake_api = {
  .struct_size = sizeof(loom_host_api_v1), .log = h_log, .set_error = h_set_error,
  .opt_int = h_opt_int, .opt_bool = h_opt_bool, .opt_string = h_opt_string,
  .opt_check_keys = h_opt_check_keys, .rank = h_rank, .size = h_size, .comm = h_comm,
  .device = h_device,
};

void *ckpt_fake_create(const loom_checkpoint_v1 *plugin, loom_host *host, const char *dir) {
  loom_options o = {.dir = dir};
  void *ctx = NULL;
  ck_assert_int_eq(plugin->create(&ckpt_fake_api, host, &o, &ctx), LOOM_OK);
  return ctx;
}
