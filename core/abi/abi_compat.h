/* The host side of ABI compatibility: the one place that knows what each 1.x minor lacked and
 * adapts it, so no consumer of a plugin table probes struct_size. (The plugin side, reading
 * an older host's structs, is sdk/include/loom/compat.h.)
 *
 *  - Plugin tables: every table the loader hands out (parallel, precision, checkpoint, comm,
 *    device) is this host's full-size struct of the kind, zero-filled, with min(struct_size,
 *    sizeof) bytes of the plugin's copied (OBS's rule) and the defaults of the slots and
 *    fields an older minor lacks filled in here. A consumer tests a slot for NULL.
 *  - Device tables handed to loom__dev_open directly (the built-in CPU device, a test's table)
 *    get the same copy, into the loom_dev.
 *  - The host API table as an older host would offer it (LOOM_TEST_HOST_MINOR, tests only). */
#ifndef LOOM_CORE_ABI_COMPAT_H
#define LOOM_CORE_ABI_COMPAT_H

#include <loom/loom.h>
#include <stddef.h>

/* sizeof this host's struct of `kind` (0 for an unknown kind). */
size_t loom__abi_table_size(loom_plugin_kind kind);

/* Copy the table at `hdr` (built with hdr->struct_size bytes, of kind hdr->kind) into dst,
 * this host's struct of that kind (loom__abi_table_size bytes; dst_size may be larger: the
 * rest is zeroed too), and adapt what the plugin's minor lacks. hdr.struct_size and
 * hdr.abi_minor keep the plugin's values (what `loom plugins` and conformance report). */
void loom__abi_copy_table(void *dst, size_t dst_size, const loom_plugin_header *hdr);

/* A device table for a loom_dev: as loom__abi_copy_table, but dst->hdr.struct_size is what
 * the copy really holds (min of the table's and sizeof), because plugins receive this table
 * through api->device() and probe it with LOOM_HAS. */
void loom__abi_copy_device(loom_device_v1 *dst, const loom_device_v1 *src);

/* The host API table this run offers: `full`, or, under LOOM_TEST_HOST_MINOR=4 (tests: a
 * 1.5+ plugin's fallback for an older host), a copy whose struct_size ends before the 1.5
 * slots and whose abi_minor is 4. Read once per process. */
const loom_host_api_v1 *loom__abi_host_table(const loom_host_api_v1 *full);

/* The minor of the host API this run offers (LOOM_ABI_MINOR, or 4 as above). */
int loom__abi_host_minor(void);

/* struct_size of the model view this run hands plugins: sizeof(loom_model_v1), or under
 * LOOM_TEST_HOST_MINOR=4 the size a 1.4 host's view has (ending before the 1.6 plan), so a
 * plugin reads the plan through compat.h's rebuild as it would on such a host. */
uint32_t loom__abi_model_view_size(void);

#endif
