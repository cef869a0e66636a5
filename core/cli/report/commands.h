/* loom compare and loom report (core/cli/main.c dispatches to these). Both return the process's
 * exit status: 0, 1 on a failure or (compare --expect-equal) a difference, 2 on bad usage. */
#ifndef LOOM_CORE_REPORT_COMMANDS_H
#define LOOM_CORE_REPORT_COMMANDS_H

#include <stdio.h>

/* argv[0] = "loom", argv[1] = "compare", the rest as `loom help compare` says. */
int loom_cmd_compare(int argc, char **argv);
/* argv[0] = "loom", argv[1] = "report", argv[2] = RUN_DIR [--out DIR]. */
int loom_cmd_report(int argc, char **argv);
/* The usage text of each (for `loom help compare|report`). */
void loom_compare_help(FILE *out);
void loom_report_help(FILE *out);

#endif
