/* Tensor-parallel slices of a global tensor as runs of contiguous elements, and the overlap of
 * two slicings: the arithmetic of loading a tensor saved under one mesh into another (the
 * global view, docs/checkpoints.md "Resharding at load"). Pure functions, no I/O. */
#ifndef LOOM_CKPT_SLICE_H
#define LOOM_CKPT_SLICE_H

#include <stdint.h>

/* A slice of a row-major global tensor of `rows` x `cols` elements (1-D: cols = 1): dim
 * `split_dim` (-1 none, 0 rows, 1 cols) is `parts` equal blocks, each cut into `size` equal
 * slices; this slice is slice `index` of every block, blocks in order. The slice's own layout
 * is row-major over its local shape. */
typedef struct ckpt_slice {
  int64_t rows, cols;
  int split_dim, parts, index, size;
} ckpt_slice;

/* Elements of the slice (rows * cols / size when split, else rows * cols). */
uint64_t ckpt_slice_numel(const ckpt_slice *s);

/* The slice is a sequence of equal runs: run k is local elements [k * len, (k + 1) * len),
 * global elements [ckpt_slice_run_global(s, k), + len), global starts increasing with k. */
uint64_t ckpt_slice_run_len(const ckpt_slice *s);
uint64_t ckpt_slice_run_global(const ckpt_slice *s, uint64_t k);

/* Called for each element range the two slices share: `len` elements at local element `a` of
 * slice A and local element `b` of slice B. Returns 0 to go on. */
typedef int (*ckpt_overlap_fn)(void *ud, uint64_t a, uint64_t b, uint64_t len);

/* Walk the elements that local range [a_lo, a_hi) of slice A and local range [b_lo, b_hi) of
 * slice B (of the same global tensor) have in common, in increasing global order, calling fn
 * once per maximal piece inside one run of each (fn may be NULL: count only). Returns the elements shared, or UINT64_MAX
 * when fn stopped the walk. Cost: O(runs of A in range + runs of B in range). */
uint64_t ckpt_slice_overlap(const ckpt_slice *A, uint64_t a_lo, uint64_t a_hi,
                            const ckpt_slice *B, uint64_t b_lo, uint64_t b_hi,
                            ckpt_overlap_fn fn, void *ud);

/* 0 when the slice is well formed (rows, cols >= 1, split_dim in {-1, 0, 1} and 1 only with
 * cols > 1 ... , parts and size >= 1, index < size, the split dim divisible by parts * size),
 * else -1. */
int ckpt_slice_valid(const ckpt_slice *s);

#endif
