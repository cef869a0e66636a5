#include "util/one_line.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void loom__put_line(FILE *f, const char *prefix, const char *msg) {
  /* Composed first and written with one write(2): stderr is unbuffered, and ranks of one job
   * share it, so a line written piece by piece interleaves with another rank's mid-line
   * (a pipe keeps writes up to PIPE_BUF = 4096 bytes whole). */
  size_t np = strlen(prefix), nm = strlen(msg);
  char stack[4096];
  char *line = np + nm + 1 <= sizeof stack ? stack : malloc(np + nm + 1);
  if (!line) { /* no memory: piecewise is better than nothing */
    fputs(prefix, f);
    fputs(msg, f);
    fputc('\n', f);
    return;
  }
  memcpy(line, prefix, np);
  for (size_t i = 0; i < nm; i++) {
    unsigned char c = (unsigned char)msg[i];
    line[np + i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
  }
  line[np + nm] = '\n';
  fflush(f); /* whatever f holds goes first */
  size_t n = np + nm + 1, off = 0;
  int fd = fileno(f);
  while (off < n) {
    ssize_t w = write(fd, line + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += (size_t)w;
  }
  if (line != stack) free(line);
}
