/* Message helpers shared by config.c and options.c (defined in options.c). */
#ifndef LOOM_CORE_CONFIG_INTERNAL_H
#define LOOM_CORE_CONFIG_INTERNAL_H

#include "config.h"

/* Compact JSON text of v for "got VALUE", cut to ~60 bytes on a UTF-8 boundary. */
void loom__json_repr(const json_t *v, char *buf, size_t n);
/* Shortest text that reads back as x ("0.001", "1e-08"). */
void loom__fmt_double(double x, char *buf, size_t n);
/* "FILE: WHERE.KEY: <fmt>" into err; returns -1. */
int loom__opt_error(const loom_options *o, const char *key, char *err, size_t errlen,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Check that v is a number within (lo|[lo, hi|hi]) and store it; -1 with a message if not. */
int loom__opt_number(const loom_options *o, const char *key, const json_t *v, double lo,
                     int lo_open, double hi, int hi_open, double *out, char *err, size_t errlen);

#endif
