#include "util/one_line.h"

void loom__put_line(FILE *f, const char *prefix, const char *msg) {
  fputs(prefix, f);
  for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
    fputc(*p < 0x20 || *p == 0x7f ? '?' : *p, f);
  fputc('\n', f);
}
