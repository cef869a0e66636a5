#include "fs_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void loom__set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

int loom__mkdir_p(const char *dir, char *err, size_t errlen) {
  char *p = strdup(dir);
  if (!p) {
    loom__set_err(err, errlen, "%s: out of memory", dir);
    return -1;
  }
  int rc = 0;
  /* every parent first; EEXIST is fine for them (a file there fails at the next level) */
  for (char *s = p + 1; *s && rc == 0; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
      loom__set_err(err, errlen, "%s: cannot create directory: %s", p, strerror(errno));
      rc = -1;
    }
    *s = '/';
  }
  struct stat st;
  if (rc == 0 && mkdir(p, 0755) != 0 && errno != EEXIST) {
    loom__set_err(err, errlen, "%s: cannot create directory: %s", p, strerror(errno));
    rc = -1;
  } else if (rc == 0 && (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))) {
    loom__set_err(err, errlen, "%s: not a directory", p);
    rc = -1;
  }
  free(p);
  return rc;
}
