/* Resume decisions that follow from the checkpoint's metadata (ckpt_report.c): where the data
 * continues, and what rank 0 tells the user changed. */
#ifndef LOOM_CORE_CKPT_RESUME_H
#define LOOM_CORE_CKPT_RESUME_H

#include "ckpt_meta.h"
#include "train/trainer.h"

/* Set the train loader's cursor from the saved position (epoch, shard, token offset): the same
 * tokens continue under another seq_len or world size. The shard is found by path (then by
 * file name) and token count; when the data no longer holds it, reading starts at the new
 * data's beginning (reported). 0, or -1 with tr->err (a position no loader can reach). */
int loom__ckpt_seek_data(loom_trainer *tr, const loom_ckpt_meta *m);

/* Rank 0: print every setting that changes how the run continues as `old -> new` with its
 * effect (for the schedule: the lr of the next step against the checkpoint's last lr), and a
 * warning when the lr jumps or data is skipped. */
void loom__ckpt_report(loom_trainer *tr, const loom_ckpt_meta *m);

#endif
