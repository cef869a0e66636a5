/* GPT-2 model files other tools read and write: safetensors with Hugging Face GPT-2's names
 * and layouts, and llm.c's model file. loom writes them from any source of global tensors (a
 * checkpoint, a model in memory) one tensor at a time, and reads them back into any rank's
 * piece of the model, reading only the elements that rank holds.
 *
 * safetensors (https://huggingface.co/docs/safetensors): u64 little-endian header length N,
 *   N bytes of JSON {"__metadata__": {string: string}, NAME: {"dtype": "F32", "shape": [...],
 *   "data_offsets": [begin, end]}, ...} padded with spaces to a multiple of 8, then the raw
 *   little-endian data (offsets relative to its start). Names as GPT2Model's state dict:
 *   wte.weight (V, C), wpe.weight (maxT, C), h.N.ln_1.weight/bias (C), h.N.attn.c_attn.weight
 *   (C, 3C) and .bias (3C), h.N.attn.c_proj.weight (C, C) and .bias, h.N.ln_2.*,
 *   h.N.mlp.c_fc.weight (C, 4C) and .bias (4C), h.N.mlp.c_proj.weight (4C, C) and .bias (C),
 *   ln_f.weight/bias — Conv1D weights (in, out), the transpose of loom's (out, in). Written
 *   fp32 ("F32"); read F32, F16 or BF16, with an optional "transformer." prefix
 *   (GPT2LMHeadModel's names); lm_head.weight (tied to wte) and the attention-mask buffers
 *   h.N.attn.bias / h.N.attn.masked_bias of older transformers versions are ignored.
 * llm.c (train_gpt2.c): 256 int32 header {20240326, 3, maxT, V, L, NH, C, Vp, 0...}, then
 *   fp32 wte (Vp, C) (rows V..Vp-1 zero), wpe (maxT, C), ln1w (L, C), ln1b (L, C),
 *   qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C), ln2w, ln2b (L, C),
 *   fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C), fcprojb (L, C), lnfw (C), lnfb (C):
 *   loom's own (out, in) layout, grouped by tensor kind across layers. */
#ifndef LOOM_CORE_EXPORT_MODEL_FILES_H
#define LOOM_CORE_EXPORT_MODEL_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"

typedef enum loom_model_format { LOOM_FORMAT_SAFETENSORS, LOOM_FORMAT_LLMC } loom_model_format;

/* "safetensors" / "llmc" -> the format; -1 for anything else. */
int loom__model_format(const char *name);

/* Where the tensors come from: the global tensor `p` (a tensor of the whole-model table) into
 * dst (host, p->numel floats, loom's (rows, cols) row-major). 0, or -1 with err. */
typedef int (*loom_tensor_reader)(void *ctx, const gpt_param *p, float *dst, char *err,
                                  size_t errlen);

/* Write the model whose whole-model table is `table` (loom__gpt2_table) to `path` in `format`,
 * reading each tensor once through rd. `metadata` (safetensors only; may be NULL): a JSON
 * object of string values for "__metadata__" ("format": "pt" is added, as transformers'
 * loader expects). Written to PATH.tmp, fsynced and renamed: a failure leaves no partial
 * file at path. Holds at most two tensors in host memory. 0, or -1 with err naming the file. */
int loom__model_file_write(const char *path, loom_model_format format, const gpt_model *table,
                           loom_tensor_reader rd, void *ctx, const char *metadata, char *err,
                           size_t errlen);

/* A model file opened for import, checked against a whole-model table. */
typedef struct loom_model_file loom_model_file;

/* Open `path` as `format` and check it holds exactly the tensors of `table` (the config's
 * whole model) with their shapes: a vocabulary, context length, layer count or width that
 * differs is refused naming the file's value and the config's (model.vocab_size, ...), a
 * tensor of another shape naming the tensor and both shapes. Returns the file (free with
 * loom__model_file_close) or NULL with err. */
loom_model_file *loom__model_file_open(const char *path, loom_model_format format,
                                       const gpt_model *table, char *err, size_t errlen);

/* Fill elements [begin, begin + n) of the flat parameter buffer of `local` (one rank's model:
 * its tensor-parallel piece and pipeline stage, the tied wte copy included) into dst (device
 * memory of local->dev, n floats) from the file, reading only those elements (whole runs of a
 * file row at a time). 0, or -1 with err. */
int loom__model_file_fill(loom_model_file *f, const gpt_model *local, size_t begin, size_t n,
                          float *dst, char *err, size_t errlen);
/* The same into a buffer of `dtype` elements (LOOM_F32, or LOOM_BF16 / LOOM_F16: the flat
 * parameter buffer under 16-bit storage; each value rounded to nearest even, as
 * device_v1.convert does). */
int loom__model_file_fill_as(loom_model_file *f, const gpt_model *local, size_t begin, size_t n,
                             void *dst, loom_dtype dtype, char *err, size_t errlen);

void loom__model_file_close(loom_model_file *f);

#endif
