/* Non-blocking opens of user-given input files (see input_file.h). */
#define _GNU_SOURCE
#include "util/input_file.h"
#include "fs_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


const char *loom__file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
  }
  return "not a regular file";
}

int loom__open_regular(const char *path, off_t *size_bytes, char *err, size_t errlen) {
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    loom__set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    loom__set_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  if (S_ISDIR(st.st_mode)) {
    loom__set_err(err, errlen, "%s: cannot open: %s", path, strerror(EISDIR));
    close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    loom__set_err(err, errlen, "%s: expected a regular file, got %s", path,
            loom__file_kind((unsigned)st.st_mode));
    close(fd);
    return -1;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK); /* a regular file: plain reads again */
  if (size_bytes) *size_bytes = st.st_size;
  return fd;
}

char *loom__read_regular(const char *path, size_t max_bytes, size_t *len, char *err,
                         size_t errlen) {
  off_t size;
  int fd = loom__open_regular(path, &size, err, errlen);
  if (fd < 0) return NULL;
  if (size < 0 || (unsigned long long)size > max_bytes) {
    loom__set_err(err, errlen, "%s: %lld bytes, larger than the %zu bytes such a file may have", path,
            (long long)size, max_bytes);
    close(fd);
    return NULL;
  }
  char *buf = malloc((size_t)size + 1);
  if (!buf) {
    loom__set_err(err, errlen, "%s: out of memory reading %lld bytes", path, (long long)size);
    close(fd);
    return NULL;
  }
  size_t got = 0;
  while (got < (size_t)size) { /* the file may shrink while read: stop at its end */
    ssize_t n = read(fd, buf + got, (size_t)size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      loom__set_err(err, errlen, "%s: read error: %s", path, strerror(errno));
      free(buf);
      close(fd);
      return NULL;
    }
    if (n == 0) break;
    got += (size_t)n;
  }
  close(fd);
  buf[got] = '\0';
  if (len) *len = got;
  return buf;
}

int loom__check_output_path(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (stat(path, &st) == 0) {
    if (S_ISREG(st.st_mode)) return 0;
    loom__set_err(err, errlen, "%s: expected a regular file (or none), got %s", path,
            loom__file_kind((unsigned)st.st_mode));
    return -1;
  }
  /* absent: the trainer makes the missing directories and creates it, which works only if the
   * nearest existing ancestor is a directory we may write in (checked here so that `loom check`
   * refuses what the trainer would) */
  size_t n = strlen(path);
  char *dir = malloc(n + 2);
  if (!dir) return 0; /* defensive: the trainer's open still reports it */
  memcpy(dir, path, n + 1);
  int rc = 0;
  for (;;) {
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, n + 2, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    if (stat(dir, &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        loom__set_err(err, errlen, "%s: cannot be created: %s is %s, not a directory", path, dir,
                loom__file_kind((unsigned)st.st_mode));
        rc = -1;
      } else if (access(dir, W_OK | X_OK) != 0) {
        loom__set_err(err, errlen, "%s: cannot be created: the directory %s is not writable: %s", path,
                dir, strerror(errno));
        rc = -1;
      }
      break;
    }
    if (errno != ENOENT || !slash || slash == dir) break; /* let the open report the rest */
  }
  free(dir);
  return rc;
}

int loom__create_tmp(const char *path, char *err, size_t errlen) {
  struct stat st;
  /* lstat: a symlink is itself replaced, never followed */
  if (lstat(path, &st) == 0 && !S_ISDIR(st.st_mode) && unlink(path) != 0 && errno != ENOENT) {
    loom__set_err(err, errlen, "%s: cannot create: it is %s and cannot be removed: %s", path,
            loom__file_kind((unsigned)st.st_mode), strerror(errno));
    return -1;
  }
  /* O_EXCL | O_NOFOLLOW: whatever appears between the unlink and here fails the open instead
   * of being written through; O_NONBLOCK so even that case cannot wait */
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    loom__set_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
    return -1;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}
