/* A one-rank fake host for the tests that compile the checkpoint plugin's source in
 * (check_ckpt_fuzz.c, check_ckpt_reshard.c): options from a struct, errors into a buffer, host
 * memory as "device" memory, so thousands of saves and loads run in-process. Linked into those
 * two tests only (tests/CMakeLists.txt). */
#ifndef LOOM_TEST_CKPT_FAKE_HOST_H
#define LOOM_TEST_CKPT_FAKE_HOST_H

#include <loom/loom.h>

struct loom_host {
  char error[1024]; /* the plugin's last set_error */
  int warnings;     /* messages logged at LOOM_LOG_WARN or worse */
};
struct loom_options {
  const char *dir; /* "dir"; every other option takes its default */
};

/* The host table: rank 0 of 1 on every axis, no communicators, every option its default but
 * "dir", the device's copies plain memcpy. */
extern const loom_host_api_v1 ckpt_fake_api;

/* An instance of `plugin` (the test's compiled-in loom_plugin_v1) reporting to `host`, saving
 * to and loading from `dir`; fails the running Check test when create fails. */
void *ckpt_fake_create(const loom_checkpoint_v1 *plugin, loom_host *host, const char *dir);

#endif
