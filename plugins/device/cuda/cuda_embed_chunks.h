/* cuda.so: the embedding gradient's scatter-add (encoder_backward's dwte) in fixed chunks of
 * occurrences, as two per-(chunk, column) steps that cuda_kernels.cu runs as two kernels and
 * tests/unit/check_cuda_embed.c runs on the host, in any order of the chunks. Plain C (and
 * CUDA C++ under nvcc): no CUDA runtime, no state.
 *
 * Input: the B*T positions sorted stably by token (tok ascending; pos: each entry's position,
 * increasing within a token), so each token's occurrences are one run of the sorted order. The
 * sorted order is cut into chunks of EMB_CHUNK entries, whatever the tokens: chunk k holds
 * entries [k*EMB_CHUNK, (k+1)*EMB_CHUNK). A chunk splits its entries into segments (maximal
 * stretches of one token) and adds each segment's rows of dout in position order:
 *  - a run that lies inside one chunk is finished there: dwte[t] + its rows, in position order,
 *    which is the CPU device's order exactly (bitwise the CPU's dwte for that token);
 *  - a run that crosses chunk boundaries leaves one partial per chunk: its first chunk's
 *    `head` (dwte[t] + the rows there) and each later chunk's `cont` (the rows there, from 0);
 *    the join step adds them in chunk order, head first.
 * So a token that occurs M times costs about EMB_CHUNK + M/EMB_CHUNK dependent adds instead of
 * M, and every sum has a shape fixed by the sorted tokens alone: the result does not depend on
 * which chunk runs first (deterministic), though a run longer than a chunk is not summed in the
 * CPU's order (fp32 rounding of a different association).
 *
 * Legend: BT = B*T sorted entries, C = channels; head and cont are (n_chunks, C) floats. */
#ifndef LOOM_CUDA_EMBED_CHUNKS_H
#define LOOM_CUDA_EMBED_CHUNKS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define EMB_HD __host__ __device__
#else
#define EMB_HD
#endif

#define EMB_CHUNK 64 /* sorted entries per chunk */

EMB_HD static inline int emb_n_chunks(int BT) { return (BT + EMB_CHUNK - 1) / EMB_CHUNK; }

/* Step 1, chunk k, column c: finish the runs inside the chunk into dwte (+=), and write the
 * partials of the runs that cross its boundaries into head[k] / cont[k]. */
EMB_HD static inline void emb_chunk_sum(float *dwte, float *head, float *cont, const float *dout,
                                        const int32_t *tok, const int32_t *pos, int BT, int C,
                                        int k, int c) {
  const int s = k * EMB_CHUNK, e = s + EMB_CHUNK < BT ? s + EMB_CHUNK : BT;
  for (int j = s; j < e;) {
    const int t = tok[j];
    const int continued = j == s && j > 0 && tok[j - 1] == t; /* began in an earlier chunk */
    float acc = continued ? 0.0f : dwte[(size_t)t * C + c];
    for (; j < e && tok[j] == t; j++) acc += dout[(size_t)pos[j] * C + c];
    const int continues = j == e && e < BT && tok[e] == t; /* goes on in the next chunk */
    if (continued) cont[(size_t)k * C + c] = acc;
    else if (continues) head[(size_t)k * C + c] = acc;
    else dwte[(size_t)t * C + c] = acc;
  }
}

/* Step 2 (after every chunk's step 1), chunk k, column c: when the chunk's last run begins in it
 * and goes on past it, dwte[t] = head[k] + cont[k+1] + cont[k+2] + ... over the chunks the run
 * covers, in that order. Every other chunk does nothing. */
EMB_HD static inline void emb_chunk_join(float *dwte, const float *head, const float *cont,
                                         const int32_t *tok, int BT, int C, int k, int c) {
  const int s = k * EMB_CHUNK, last = (s + EMB_CHUNK < BT ? s + EMB_CHUNK : BT) - 1;
  const int t = tok[last];
  if (last + 1 >= BT || tok[last + 1] != t) return; /* the chunk's last run ends in it */
  if (s > 0 && tok[s - 1] == t) return; /* a middle piece: its run's first chunk joins it */
  float acc = head[(size_t)k * C + c];
  const int n = emb_n_chunks(BT);
  for (int j = k + 1; j < n && tok[j * EMB_CHUNK] == t; j++) acc += cont[(size_t)j * C + c];
  dwte[(size_t)t * C + c] = acc;
}

#endif
