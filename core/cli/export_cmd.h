/* loom export (core/cli/main.c dispatches to it): the process's exit status, 0, 1 on a failure,
 * 2 on bad usage. argv[0] = "loom", argv[1] = "export", the rest as loom_export_help says. */
#ifndef LOOM_CORE_EXPORT_EXPORT_CMD_H
#define LOOM_CORE_EXPORT_EXPORT_CMD_H

#include <stdio.h>

int loom_cmd_export(int argc, char **argv);
void loom_export_help(FILE *out);

#endif
