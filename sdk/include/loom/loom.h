/* loom — the plugin SDK. Include this one header; it names the current ABI version.
 *
 * A plugin is a shared object exporting one const symbol, `loom_plugin_v1`, of its kind's
 * struct (whose first member is a loom_plugin_header). See docs/abi.md and sdk/template/. */
#ifndef LOOM_H
#define LOOM_H

#include "checkpoint_v1.h"
#include "comm_v1.h"
#include "common_v1.h"
#include "compat.h"
#include "device_v1.h"
#include "host_v1.h"
#include "parallel_v1.h"
#include "precision_v1.h"

typedef loom_host_api_v1 loom_host_api;
typedef loom_parallel_v1 loom_parallel;
typedef loom_precision_v1 loom_precision;
typedef loom_checkpoint_v1 loom_checkpoint;
typedef loom_comm_v1 loom_comm_plugin;
typedef loom_device_v1 loom_device;
typedef loom_tensor_v1 loom_tensor;
typedef loom_model_v1 loom_model;
typedef loom_step_args_v1 loom_step_args;
typedef loom_partition_v1 loom_partition;
typedef loom_ckpt_item_v1 loom_ckpt_item;
typedef loom_ckpt_state_v1 loom_ckpt_state;
typedef loom_storage_plan_v1 loom_storage_plan;

/* The entry symbol of the current ABI. */
#define LOOM_PLUGIN_SYMBOL "loom_plugin_v1"
#define LOOM_PLUGIN_ENTRY loom_plugin_v1

#endif
