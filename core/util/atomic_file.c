#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* fsync the directory holding `path` so a rename into it survives a crash (best effort). */
static void sync_parent_dir(const char *path) {
  char *dir = strdup(path);
  if (!dir) return;
  char *slash = strrchr(dir, '/');
  const char *d = ".";
  if (slash) {
    if (slash == dir) slash[1] = '\0';
    else *slash = '\0';
    d = dir;
  }
  int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

int loom__write_file_atomic(const char *path, const void *const *parts, const size_t *lens,
                            int n, char *err, size_t errlen) {
  size_t tmplen = strlen(path) + 32;
  char *tmp = malloc(tmplen);
  if (!tmp) {
    snprintf(err, errlen, "%s: out of memory", path);
    return -1;
  }
  snprintf(tmp, tmplen, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
    free(tmp);
    return -1;
  }
  const char *what = "write";
  int ok = 1;
  for (int i = 0; ok && i < n; i++) ok = lens[i] == 0 || write_all(fd, parts[i], lens[i]) == 0;
  if (ok) {
    what = "fsync";
    ok = fsync(fd) == 0;
  }
  int saved = errno;
  if (close(fd) != 0 && ok) {
    what = "close";
    saved = errno;
    ok = 0;
  }
  if (ok) {
    what = "rename";
    ok = rename(tmp, path) == 0;
    saved = errno;
  }
  if (!ok) {
    snprintf(err, errlen, "%s: cannot %s: %s", strcmp(what, "rename") ? tmp : path, what,
             strerror(saved));
    unlink(tmp);
    free(tmp);
    return -1;
  }
  free(tmp);
  sync_parent_dir(path);
  return 0;
}
