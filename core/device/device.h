/* The core's handle on a device backend: the backend's table plus memory accounting.
 * Every allocation made through loom__dev_alloc carries a loom_mem_category; current and peak
 * bytes are tracked per category so each rank can report where its memory went. */
#ifndef LOOM_CORE_DEVICE_H
#define LOOM_CORE_DEVICE_H

#include <loom/device_v1.h>
#include <stddef.h>

typedef struct loom_dev_alloc loom_dev_alloc; /* one live allocation (internal list node) */

typedef struct loom_dev {
  const loom_device_v1 *ops; /* the backend's kernels and memory functions: &table while open
                                (a slot an older backend lacks is NULL there) */
  loom_device_v1 table;      /* this host's full-size, zero-filled copy of the backend's table
                                (abi_compat.c); hdr.struct_size = the bytes it really holds */
  void *ctx;                 /* the backend's context, passed to every ops call */
  size_t bytes_now[LOOM_MEM__COUNT];  /* live bytes per category */
  size_t bytes_peak[LOOM_MEM__COUNT]; /* high-water mark per category */
  size_t total_now, total_peak;       /* all categories together */
  loom_dev_alloc *allocs;             /* live allocations, for free() and leak reports */
} loom_dev;

/* Device memory is host memory (the CPU device): buffers may be handed to host code as is. */
#define LOOM_DEVICE_HOST_ADDRESSABLE(ops) (((ops)->hdr.caps & LOOM_DEVICE_CAP_HOST_ADDRESSABLE) != 0)

/* The built-in CPU backend (oneDNN GEMMs, OpenMP elsewhere). */
const loom_device_v1 *loom__cpu_device(void);

/* What the CPU backend of an open `dev` runs on, one line for the start-up banner:
 * "oneDNN avx512_core_bf16, 2 threads, GEMM operands bf16" (the ISA oneDNN dispatches to within
 * ONEDNN_MAX_CPU_ISA, OpenMP's thread count, and the operand dtype of the linear layers' GEMMs:
 * bf16 only under a bf16 compute dtype on a CPU with the units). Returns 0 and writes nothing
 * when dev is not the built-in CPU backend. */
int loom__cpu_describe(const loom_dev *dev, char *buf, size_t n);

/* Open `ops` with its JSON options and a zeroed accounting state.
 * Returns LOOM_OK or the backend's error; `err` gets a message. */
int loom__dev_open(loom_dev *dev, const loom_device_v1 *ops, const char *options_json,
                   int local_rank, char *err, size_t errlen);
/* loom__dev_open with the node's number of ranks (local_size, for create_ex: a backend that
 * needs one GPU per local rank refuses fewer). A backend with create_ex (ABI 1.4) says why it
 * failed: err = "create failed: REASON". */
int loom__dev_open_ex(loom_dev *dev, const loom_device_v1 *ops, const char *options_json,
                      int local_rank, int local_size, char *err, size_t errlen);
/* Free every live allocation and destroy the backend context. */
void loom__dev_close(loom_dev *dev);

/* Allocate `bytes` of zeroed device memory charged to `cat`; NULL when out of memory. */
void *loom__dev_alloc(loom_dev *dev, size_t bytes, loom_mem_category cat);
/* Free memory from loom__dev_alloc (NULL is a no-op). */
void loom__dev_free(loom_dev *dev, void *ptr);

/* 1 if ptr lies inside a live allocation of loom__dev_alloc (device memory), else 0 (host
 * memory, or device memory the accounting does not know). O(live allocations). */
int loom__dev_owns(const loom_dev *dev, const void *ptr);

/* The device's fault (device_v1.error, ABI 1.10): NULL while it is healthy, or when its table
 * has no error slot (a device of ABI 1.9 or older); else its message, owned by the device and
 * valid until loom__dev_close. Cheap: it waits for nothing (call it after a slot that waits,
 * e.g. to_host or sum_squares, to see a fault of queued work). */
const char *loom__dev_error(const loom_dev *dev);

/* Name of a category as printed in reports ("params", "grads", "optim", ...). */
const char *loom__mem_category_name(loom_mem_category cat);

#endif
