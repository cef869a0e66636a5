/* Whether a checkpoint's saved state means the same thing under this run's config: the checks
 * `loom train` makes before loading any tensor (refusing another model or vocabulary; another
 * tensor- or pipeline-parallel split only for a checkpoint from before the global view, or a
 * checkpoint plugin that cannot read it), shared with `loom check`, which runs them against the checkpoint
 * train would resume from so that the two cannot disagree. */
#ifndef LOOM_CORE_CKPT_COMPAT_H
#define LOOM_CORE_CKPT_COMPAT_H

#include <stddef.h>

#include "config/config.h"
#include "data/tokenizer.h"
#include "runtime/runtime.h"
#include "ckpt_meta.h"

/* The identity of the vocabulary: FNV-1a 64 of data.vocab's canonical JSON (sorted keys,
 * compact), or of the byte tokenizer's when there is no file, as 16 hex digits into out[17].
 * Returns 0, or -1 with "CONFIG: data.vocab: PATH: ..." in err. */
int loom__vocab_fingerprint(const loom_config *cfg, char out[17], char *err, size_t errlen);

/* 0 when checkpoint metadata `m` can be loaded by a run with rt's mesh (tp, pp and the stage
 * split in rt->pp_first/pp_last), rt->cfg's model keys, tokenizer `tok` and the vocabulary
 * fingerprint `fingerprint`; else -1 with "checkpoint step N: KEY was OLD, this run has NEW:
 * ..." in err. */
int loom__ckpt_check_compat(const loom_runtime *rt, const loom_tokenizer *tok,
                            const char *fingerprint, const loom_ckpt_meta *m, char *err,
                            size_t errlen);

/* `loom check`: find the checkpoint `loom train` would resume from in the checkpoint plugin's
 * directory (rt's plugins created, its mesh the stand-in one), verify its manifest and read
 * its metadata as train does, then loom__ckpt_check_compat. The plugin instance is recreated
 * for one rank for this (the stand-in world has no communicators; the choice of the step and
 * the manifest are the same on every rank). Returns 0 (also with no checkpoint or no
 * checkpoint plugin), or -1 with "CONFIG: checkpoint.dir: ..." in err. *resume_step is the
 * step train would resume from (0: none, the run starts at step 1). What it cannot see: a
 * damaged tensor chunk, found when train loads it. */
int loom__ckpt_preflight(loom_runtime *rt, const loom_tokenizer *tok, int *resume_step,
                         char *err, size_t errlen);

#endif
