/* The TensorBoard sink of the training loop: every numeric field of a metrics record (the JSONL
 * line metrics.c writes) becomes a scalar at the record's step, nested objects joined with '/'
 * ("loss", "mem_peak_bytes/params", "val_loss"). A field added to the record (loss scale,
 * skipped steps, ...) becomes a scalar without code here, and the event file holds exactly the
 * JSONL's values (as float32, TensorBoard's scalar type). */
#ifndef LOOM_CORE_TB_SINK_H
#define LOOM_CORE_TB_SINK_H

#include <stddef.h>

#include "tb_writer.h"

/* record: one JSON object with an integer "step" (a JSONL line). 0, or -1 + err when it is not
 * such an object (naming the record) or the event file cannot be written. */
int loom_tb_write_record(loom_tb_writer *w, const char *record, char *err, size_t errlen);

#endif
