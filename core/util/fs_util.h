/* Small file-system and message helpers shared by the core and its tools. */
#ifndef LOOM_CORE_FS_UTIL_H
#define LOOM_CORE_FS_UTIL_H

#include <stddef.h>

/* printf into err (at most errlen bytes, always NUL-terminated); a NULL err or errlen 0 is a
 * no-op, so callers may pass through an optional buffer. */
void loom__set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* `mkdir -p dir` (mode 0755). Returns 0 when dir exists as a directory afterwards, or -1 with
 * "PATH: cannot create directory: REASON" or "PATH: not a directory" in err. */
int loom__mkdir_p(const char *dir, char *err, size_t errlen);

#endif
