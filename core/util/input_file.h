/* Opening a file the user named (config, vocabulary, token shard, plugin) so that start-up can
 * never block on it: a FIFO, a terminal or a device given where a file belongs is refused with
 * a message instead of hanging `loom train` before its watchdog runs. */
#ifndef LOOM_CORE_INPUT_FILE_H
#define LOOM_CORE_INPUT_FILE_H

#include <stddef.h>
#include <sys/types.h>

/* Open `path` read-only without blocking (O_NONBLOCK, cleared again once the file is known to
 * be regular) and check it is a regular file. Returns the descriptor (caller closes) and its
 * size in *size_bytes, or -1 with "PATH: cannot open: REASON" or "PATH: not a regular file
 * (a FIFO|a directory|...)" in err. */
int loom__open_regular(const char *path, off_t *size_bytes, char *err, size_t errlen);

/* Read the whole regular file `path` (at most max_bytes) into a malloc'd buffer with a NUL
 * after the last byte; *len gets the byte count. Returns the buffer (caller frees) or NULL
 * with "PATH: ..." in err (as above, or "larger than MAX bytes", "read error: REASON"). */
char *loom__read_regular(const char *path, size_t max_bytes, size_t *len, char *err,
                         size_t errlen);

/* An output path (metrics file) must be a regular file (opening a FIFO for writing waits for a
 * reader), or absent with its nearest existing ancestor a writable directory. Returns 0, or -1
 * with "PATH: expected a regular file (or none), got a FIFO (named pipe)" or "PATH: cannot be
 * created: DIR is a regular file, not a directory" in err. */
int loom__check_output_path(const char *path, char *err, size_t errlen);

/* Create the temporary file `path` (one loom writes and then renames into place) for writing,
 * replacing whatever is there first: a stale file left by a killed run, a FIFO (which a plain
 * open for writing would wait on forever), a symlink (which would send the bytes elsewhere).
 * Returns the descriptor (caller closes), or -1 with "PATH: cannot create: REASON" in err
 * (a directory in the way is such an error, never removed). */
int loom__create_tmp(const char *path, char *err, size_t errlen);

/* What kind of file st_mode is, for messages: "a FIFO", "a directory", ... */
const char *loom__file_kind(unsigned mode);

#endif
