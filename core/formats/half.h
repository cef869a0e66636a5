/* 16-bit floats widened to fp32 on the host (exact: every bf16 and fp16 value is an fp32). */
#ifndef LOOM_CORE_EXPORT_HALF_H
#define LOOM_CORE_EXPORT_HALF_H

#include <stddef.h>
#include <stdint.h>

/* dst[i] = src[i] as fp32, bf16 (bf16 = 1) or IEEE binary16 (bf16 = 0). src may be the upper
 * half of dst's 4n bytes (widening in place): the loop runs forward, so dst[i] only ever
 * overwrites src elements already read. */
void loom__widen_16(int bf16, const uint16_t *src, float *dst, size_t n);

#endif
