/* Writing a file so that it appears whole or not at all: the parts go to PATH.tmp.PID, which is
 * fsynced, renamed over PATH, and the directory fsynced (so the rename survives a crash). */
#ifndef LOOM_CORE_ATOMIC_FILE_H
#define LOOM_CORE_ATOMIC_FILE_H

#include <stddef.h>

/* Write the n buffers parts[i] (lens[i] bytes each, in order) as PATH. Returns 0, or -1 with
 * "PATH: cannot create|write|fsync|close|rename: reason" in err (the temporary file removed). */
int loom__write_file_atomic(const char *path, const void *const *parts, const size_t *lens,
                            int n, char *err, size_t errlen);

#endif
