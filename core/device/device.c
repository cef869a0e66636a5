/* The core's handle on a device backend: opening/closing a backend and per-category memory
 * accounting (see device.h). Every live allocation is a node of a singly linked list, so free()
 * knows its size and category and close() can release whatever is still live. The list is
 * short (tens of entries: parameter, gradient, optimizer, activation pools): O(n) is fine. */
#include "device.h"
#include "abi/abi_compat.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct loom_dev_alloc {
  loom_dev_alloc *next;
  void *ptr;              /* device pointer returned by ops->alloc */
  size_t bytes;           /* as requested (the accounting unit) */
  loom_mem_category cat;
};

static const char *status_text(int rc) {
  switch (rc) {
#define LOOM__STATUS_TEXT(name, value, text) case value: return text;
    LOOM_STATUS_MAP(LOOM__STATUS_TEXT)
#undef LOOM__STATUS_TEXT
  }
  return "unknown error";
}

int loom__dev_open(loom_dev *dev, const loom_device_v1 *ops, const char *options_json,
                   int local_rank, char *err, size_t errlen) {
  char why[768];
  int rc = loom__dev_open_ex(dev, ops, options_json, local_rank, 1, why, sizeof why);
  if (rc != LOOM_OK && err)
    snprintf(err, errlen, "device '%s': %s", (ops && ops->hdr.name) ? ops->hdr.name : "?", why);
  return rc;
}

int loom__dev_open_ex(loom_dev *dev, const loom_device_v1 *ops, const char *options_json,
                      int local_rank, int local_size, char *err, size_t errlen) {
  memset(dev, 0, sizeof *dev);
  if (err && errlen) err[0] = '\0';
  const char *name = (ops && ops->hdr.name) ? ops->hdr.name : "?";
  /* defensive: a plugin table that lacks what every backend must provide */
  if (!ops || ops->hdr.kind != LOOM_KIND_DEVICE || !ops->create || !ops->destroy ||
      !ops->alloc || !ops->free) {
    if (err) snprintf(err, errlen, "'%s' is not a usable device backend table", name);
    return LOOM_INVALID_USAGE;
  }
  const char *opts = options_json ? options_json : "{}";
  void *ctx = NULL;
  int rc;
  /* every consumer reads the full-size copy: a slot the backend's minor lacks is NULL */
  loom__abi_copy_device(&dev->table, ops);
  ops = &dev->table;
  if (ops->create_ex) {
    /* the backend says why (no GPU, no driver, too few GPUs for the local ranks) */
    char why[512] = "";
    rc = ops->create_ex(opts, local_rank, local_size < 1 ? 1 : local_size, &ctx, why,
                        sizeof why);
    if (rc != LOOM_OK) {
      if (err)
        snprintf(err, errlen, "create failed: %s", why[0] ? why : status_text(rc));
      return rc;
    }
  } else {
    rc = ops->create(opts, local_rank, &ctx);
    if (rc != LOOM_OK) {
      if (err)
        snprintf(err, errlen, "create failed: %s (options: %s)", status_text(rc), opts);
      return rc;
    }
  }
  dev->ops = ops;
  dev->ctx = ctx;
  return LOOM_OK;
}

void loom__dev_close(loom_dev *dev) {
  if (!dev->ops) return;
  loom_dev_alloc *a = dev->allocs;
  while (a) {
    loom_dev_alloc *next = a->next;
    dev->ops->free(dev->ctx, a->ptr);
    free(a);
    a = next;
  }
  dev->ops->destroy(dev->ctx);
  memset(dev, 0, sizeof *dev);
}

void *loom__dev_alloc(loom_dev *dev, size_t bytes, loom_mem_category cat) {
  assert(dev->ops && (int)cat >= 0 && cat < LOOM_MEM__COUNT);
  loom_dev_alloc *node = malloc(sizeof *node);
  if (!node) return NULL;
  void *ptr = dev->ops->alloc(dev->ctx, bytes);
  if (!ptr) {
    free(node);
    return NULL;
  }
  node->ptr = ptr;
  node->bytes = bytes;
  node->cat = cat;
  node->next = dev->allocs;
  dev->allocs = node;
  dev->bytes_now[cat] += bytes;
  if (dev->bytes_now[cat] > dev->bytes_peak[cat]) dev->bytes_peak[cat] = dev->bytes_now[cat];
  dev->total_now += bytes;
  if (dev->total_now > dev->total_peak) dev->total_peak = dev->total_now;
  return ptr;
}

void loom__dev_free(loom_dev *dev, void *ptr) {
  if (!ptr) return;
  for (loom_dev_alloc **pp = &dev->allocs; *pp; pp = &(*pp)->next) {
    loom_dev_alloc *a = *pp;
    if (a->ptr != ptr) continue;
    *pp = a->next;
    dev->bytes_now[a->cat] -= a->bytes;
    dev->total_now -= a->bytes;
    dev->ops->free(dev->ctx, ptr);
    free(a);
    return;
  }
  assert(!"loom__dev_free: pointer not from loom__dev_alloc");
}

int loom__dev_owns(const loom_dev *dev, const void *ptr) {
  uintptr_t p = (uintptr_t)ptr;
  for (const loom_dev_alloc *a = dev->allocs; a; a = a->next) {
    uintptr_t lo = (uintptr_t)a->ptr;
    if (p >= lo && p - lo < (a->bytes ? a->bytes : 1)) return 1;
  }
  return 0;
}

const char *loom__dev_error(const loom_dev *dev) {
  if (!dev || !dev->ops || !dev->ops->error) return NULL; /* an older table: never failing */
  const char *msg = dev->ops->error(dev->ctx);
  return msg && !msg[0] ? "(the device gave no message)" : msg;
}

const char *loom__mem_category_name(loom_mem_category cat) {
  static const char *const names[LOOM_MEM__COUNT] = {
      [LOOM_MEM_PARAMS] = "params", [LOOM_MEM_GRADS] = "grads",
      [LOOM_MEM_OPTIM] = "optim",   [LOOM_MEM_ACTIVATIONS] = "activations",
      [LOOM_MEM_COMM] = "comm",     [LOOM_MEM_HOST] = "host",
      [LOOM_MEM_OTHER] = "other",
  };
  if ((int)cat < 0 || cat >= LOOM_MEM__COUNT) return "?";
  return names[cat];
}
