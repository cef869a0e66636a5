/* loom ABI v1 — definitions shared by every plugin kind.
 *
 * Rules of the ABI (docs/abi.md has the long form):
 *  - Every struct that crosses the boundary starts with `struct_size` (bytes) so it can grow at
 *    the end: the reader zero-fills its own copy and copies min(struct_size, sizeof) bytes, so a
 *    field it does not know reads as 0 / NULL, which always means "not set / use the default".
 *  - A plugin exports exactly one symbol, `loom_plugin_v1`, a const struct of its kind whose first
 *    member is a loom_plugin_header. A future ABI major 2 exports `loom_plugin_v2`; the host tries
 *    the newest first and adapts older structs itself.
 *  - Plugins link nothing of the core: everything they need arrives in the loom_host_api table.
 *  - Functions return loom_status (0 = ok, negative = error) and describe the error through
 *    host->set_error(); the host prints it with the plugin's name. */
#ifndef LOOM_COMMON_V1_H
#define LOOM_COMMON_V1_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_ABI_MAJOR 1
#define LOOM_ABI_MINOR 13

/* Mark the single symbol a plugin exports; build plugins with -fvisibility=hidden. */
#if defined(__GNUC__)
#define LOOM_EXPORT __attribute__((visibility("default")))
#else
#define LOOM_EXPORT
#endif

/* The one list of errors (libuv style): generates loom_status here and, in the host, the text
 * that error messages print for a status. */
#define LOOM_STATUS_MAP(X)                                                        \
  X(OK, 0, "ok")                                                                  \
  X(INVALID_CONFIG, -1, "invalid configuration")                                  \
  X(INVALID_USAGE, -2, "invalid usage")                                           \
  X(SYSTEM, -3, "system error")                                                   \
  X(REMOTE, -4, "a peer rank failed")                                             \
  X(UNSUPPORTED, -5, "not supported")                                             \
  X(NOMEM, -6, "out of memory")                                                   \
  X(IO, -7, "I/O error")                                                          \
  X(CORRUPT, -8, "corrupt or mismatched data")

typedef enum loom_status {
#define LOOM__STATUS_ENUM(name, value, text) LOOM_##name = value,
  LOOM_STATUS_MAP(LOOM__STATUS_ENUM)
#undef LOOM__STATUS_ENUM
} loom_status;

/* Plugin kinds. The value is part of the ABI. */
typedef enum loom_plugin_kind {
  LOOM_KIND_PARALLEL = 1,
  LOOM_KIND_PRECISION = 2,
  LOOM_KIND_CHECKPOINT = 3,
  LOOM_KIND_COMM = 4,
  LOOM_KIND_DEVICE = 5,
} loom_plugin_kind;

/* Element types of buffers handed across the ABI. */
typedef enum loom_dtype {
  LOOM_F32 = 0,
  LOOM_F64 = 1,
  LOOM_BF16 = 2,
  LOOM_F16 = 3,
  LOOM_I32 = 4,
  LOOM_U8 = 5,
  LOOM_I64 = 6,
} loom_dtype;

/* Size in bytes of one element of `dtype` (0 for an unknown dtype). */
static inline size_t loom_dtype_size(loom_dtype dtype) {
  switch (dtype) {
    case LOOM_F32: case LOOM_I32: return 4;
    case LOOM_F64: case LOOM_I64: return 8;
    case LOOM_BF16: case LOOM_F16: return 2;
    case LOOM_U8: return 1;
  }
  return 0;
}

/* Memory categories: every device allocation carries one, so peak memory is reported per
 * category and can be checked against the ZeRO paper's accounting (Rajbhandari et al. 2020, §3). */
typedef enum loom_mem_category {
  LOOM_MEM_PARAMS = 0,      /* model parameters (working copy) */
  LOOM_MEM_GRADS = 1,       /* parameter gradients */
  LOOM_MEM_OPTIM = 2,       /* optimizer state: Adam m, v, fp32 master copy */
  LOOM_MEM_ACTIVATIONS = 3, /* forward activations kept for backward, and their gradients */
  LOOM_MEM_COMM = 4,        /* communication buffers (buckets, gather scratch) */
  LOOM_MEM_HOST = 5,        /* host-side pool used by offload plugins */
  LOOM_MEM_OTHER = 6,       /* everything else (inputs, scratch) */
  LOOM_MEM__COUNT = 7
} loom_mem_category;

/* Every plugin struct starts with this header. */
typedef struct loom_plugin_header {
  uint32_t struct_size;    /* sizeof the plugin's whole kind struct, as the plugin was built */
  uint16_t abi_major;      /* LOOM_ABI_MAJOR the plugin was built against; must equal the host's */
  uint16_t abi_minor;      /* LOOM_ABI_MINOR the plugin was built against; may differ */
  uint32_t kind;           /* a loom_plugin_kind */
  uint32_t reserved;       /* zero */
  const char *name;        /* short name, e.g. "ddp"; matches the file name ddp.so */
  const char *version;     /* the plugin's own version, e.g. "1.0.0" */
  const char *description; /* one line for `loom plugins` */
  uint64_t caps;           /* capability flags; meaning depends on kind (see each kind's header) */
} loom_plugin_header;

/* ---- ABI 1.6: probing a struct that crosses the boundary ----
 * Every ABI struct starts with its size: the host's own structs (loom_host_api_v1,
 * loom_model_v1, loom_partition_v1, loom_step_args_v1, ...) with `struct_size`, a plugin's
 * table with hdr.struct_size, which is the same first four bytes. A struct written by an older
 * minor ends earlier; reading a field past its end reads someone else's memory.
 *
 * LOOM_STRUCT_SIZE(p): the size the writer of *p declared (bytes).
 * LOOM_COVERS(p, field): 1 when *p, as its writer built it, extends over the whole of `field`
 *   (for value fields such as loom_model_v1.param_dtype, where 0 is a meaningful value).
 * LOOM_HAS(p, slot): LOOM_COVERS and the slot is set (non-NULL / non-zero): the test before
 *   calling an optional function slot of a table someone else built — the host API table,
 *   the device table from api->device(), a plugin's table in the host.
 * The host zero-fills its own full-size copy of every plugin table it loads, so host code
 * tests a slot for NULL; a plugin, which gets structs from hosts of any minor, uses these. */
#define LOOM_STRUCT_SIZE(p) ((size_t)*(const uint32_t *)(const void *)(p))
#define LOOM_COVERS(p, field)                                                            \
  (LOOM_STRUCT_SIZE(p) >=                                                                \
   (size_t)((const char *)&(p)->field - (const char *)(p)) + sizeof((p)->field))
#define LOOM_HAS(p, slot) (LOOM_COVERS(p, slot) && (p)->slot)

/* Opaque handles owned by the host. */
typedef struct loom_host loom_host;         /* the host runtime instance */
typedef struct loom_comm loom_comm;         /* a communicator (a mesh axis or the world) */
typedef struct loom_request loom_request;   /* an outstanding asynchronous operation */

#define LOOM_PLUGIN_HEADER_INIT(kind_, name_, version_, desc_, caps_, type_)               \
  {.struct_size = (uint32_t)sizeof(type_), .abi_major = LOOM_ABI_MAJOR,                   \
   .abi_minor = LOOM_ABI_MINOR, .kind = (kind_), .reserved = 0, .name = (name_),          \
   .version = (version_), .description = (desc_), .caps = (caps_)}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_COMMON_V1_H */
