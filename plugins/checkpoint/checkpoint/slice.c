/* Slices as runs, and the merge of two slicings' runs (slice.h). */
#include "slice.h"

static int whole(const ckpt_slice *s) { return s->split_dim < 0 || s->size == 1; }

uint64_t ckpt_slice_numel(const ckpt_slice *s) {
  uint64_t n = (uint64_t)s->rows * (uint64_t)s->cols;
  return whole(s) ? n : n / (uint64_t)s->size;
}

/* Rows split: each block's slice is lrows whole rows, one run per block. Columns split: each
 * row holds one run of lcols elements per block. */
uint64_t ckpt_slice_run_len(const ckpt_slice *s) {
  if (whole(s)) return ckpt_slice_numel(s);
  uint64_t per = (uint64_t)s->parts * (uint64_t)s->size;
  if (s->split_dim == 0) return (uint64_t)s->rows / per * (uint64_t)s->cols;
  return (uint64_t)s->cols / per;
}

uint64_t ckpt_slice_run_global(const ckpt_slice *s, uint64_t k) {
  if (whole(s)) return 0;
  uint64_t P = (uint64_t)s->parts, idx = (uint64_t)s->index;
  if (s->split_dim == 0) {
    uint64_t block_rows = (uint64_t)s->rows / P, lrows = block_rows / (uint64_t)s->size;
    return (k * block_rows + idx * lrows) * (uint64_t)s->cols;
  }
  uint64_t block_cols = (uint64_t)s->cols / P, lcols = block_cols / (uint64_t)s->size;
  uint64_t row = k / P, b = k % P;
  return row * (uint64_t)s->cols + b * block_cols + idx * lcols;
}

uint64_t ckpt_slice_overlap(const ckpt_slice *A, uint64_t a_lo, uint64_t a_hi,
                            const ckpt_slice *B, uint64_t b_lo, uint64_t b_hi,
                            ckpt_overlap_fn fn, void *ud) {
  uint64_t la = ckpt_slice_run_len(A), lb = ckpt_slice_run_len(B), shared = 0;
  if (a_lo >= a_hi || b_lo >= b_hi || la == 0 || lb == 0) return 0;
  uint64_t i = a_lo / la, j = b_lo / lb;
  /* a merge of two lists of disjoint global ranges, each sorted by global start */
  while (i * la < a_hi && j * lb < b_hi) {
    uint64_t a0 = i * la > a_lo ? i * la : a_lo, a1 = (i + 1) * la < a_hi ? (i + 1) * la : a_hi;
    uint64_t b0 = j * lb > b_lo ? j * lb : b_lo, b1 = (j + 1) * lb < b_hi ? (j + 1) * lb : b_hi;
    uint64_t ga = ckpt_slice_run_global(A, i) + (a0 - i * la), gae = ga + (a1 - a0);
    uint64_t gb = ckpt_slice_run_global(B, j) + (b0 - j * lb), gbe = gb + (b1 - b0);
    uint64_t lo = ga > gb ? ga : gb, hi = gae < gbe ? gae : gbe;
    if (lo < hi) {
      if (fn && fn(ud, a0 + (lo - ga), b0 + (lo - gb), hi - lo) != 0) return UINT64_MAX;
      shared += hi - lo;
    }
    if (gae <= gbe) i++;
    if (gbe <= gae) j++;
  }
  return shared;
}

int ckpt_slice_valid(const ckpt_slice *s) {
  if (s->rows < 1 || s->cols < 1 || s->parts < 1 || s->size < 1 || s->index < 0 ||
      s->index >= s->size || s->split_dim < -1 || s->split_dim > 1)
    return -1;
  if (s->split_dim < 0) return s->size == 1 && s->parts == 1 ? 0 : -1;
  int64_t dim = s->split_dim == 0 ? s->rows : s->cols;
  int64_t per = (int64_t)s->parts * s->size;
  return per > 0 && dim % per == 0 ? 0 : -1;
}
