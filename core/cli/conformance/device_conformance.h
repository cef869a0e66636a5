/* `loom conformance --device NAME`: the device conformance suite (device_conformance.c). */
#ifndef LOOM_CORE_DEVICE_CONFORMANCE_H
#define LOOM_CORE_DEVICE_CONFORMANCE_H

/* argv as main got it (argv[1] == "conformance", "--device NAME" among the rest). Prints one
 * line per check, "PASS|FAIL|SKIP  NAME  detail", and a summary. Returns 0 when nothing failed
 * (a backend whose create refuses, e.g. no GPU, is all SKIP with the reason: 0), 1 when a check
 * failed or the plugin does not load, 2 on a usage error. */
int loom_device_conformance_main(int argc, char **argv);

#endif
