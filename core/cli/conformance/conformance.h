/* `loom conformance PLUGIN`: the battery loom's own plugins pass, run on any plugin.
 *
 * This C front opens the plugin through the real loader, runs the ABI checks that need its
 * table (header, struct_size, kind, caps against the hooks it fills), then hands over to the
 * installed battery script (<prefix>/share/loom/conformance/run.sh) with what it learned in
 * the environment (kind, caps, filled hooks, the counts so far). docs/conformance.md. */
#ifndef LOOM_CORE_CONFORMANCE_H
#define LOOM_CORE_CONFORMANCE_H

/* argv as main got it, argv[1] == "conformance". Returns the exit status when it does not
 * exec the battery (usage errors: 2; a plugin that does not load or an ABI failure with
 * --abi-only: 1); on success it does not return (the script's status is the job's). */
int loom_conformance_main(int argc, char **argv);

#endif
