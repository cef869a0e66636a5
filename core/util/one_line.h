/* Printing an error as exactly one line: messages quote what users wrote (file names, --set
 * values, glob patterns), which may hold a newline or other control characters. */
#ifndef LOOM_CORE_ONE_LINE_H
#define LOOM_CORE_ONE_LINE_H

#include <stdio.h>

/* Write prefix, msg and one '\n' to f, each control character of msg (< 0x20, 0x7f) written as
 * '?': the line stays one line, and no quoted value can forge another ("...\nloom: ok"). */
void loom__put_line(FILE *f, const char *prefix, const char *msg);

#endif
