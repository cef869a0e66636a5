/* TensorBoard event files: the record format TensorBoard, TensorFlow's summary writers and
 * wandb's TensorBoard sync read. A file is a sequence of records
 *   uint64 length (little endian) | uint32 masked CRC-32C of the length bytes |
 *   length bytes of an Event protobuf | uint32 masked CRC-32C of those bytes
 * (masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8), the first Event carrying the file
 * version "brain.Event:2". Every record is flushed when written, so a TensorBoard pointed at the
 * directory shows a run's curves while it trains and a reader never sees half a record except
 * the one being written. Protobuf encoding: protobuf-c with tensorboard.proto (TensorFlow's
 * field numbers); CRC-32C: Intel ISA-L's crc32_iscsi. */
#ifndef LOOM_CORE_TB_WRITER_H
#define LOOM_CORE_TB_WRITER_H

#include <stddef.h>
#include <stdint.h>

typedef struct loom_tb_writer loom_tb_writer;

/* Create DIR (and its parents) and open DIR/events.out.tfevents.<unix seconds>.<host>.<pid>
 * for writing, with the file-version record. NULL + err on failure. Free with loom_tb_close. */
loom_tb_writer *loom_tb_open(const char *dir, char *err, size_t errlen);

/* A SessionLog START at `step`: the first step this process logs. TensorBoard's event
 * accumulator takes every START after a run's first as a restart and drops what it read at
 * steps >= `step` (for brain.Event:2 files it purges on nothing else), so the steps an
 * interrupted process logged after the checkpoint its successor resumes from are not shown
 * twice. 0, or -1 + err. */
int loom_tb_session_start(loom_tb_writer *w, int64_t step, char *err, size_t errlen);

/* One Event at `step` holding `n` scalars (tags[i], values[i]; float32 as TensorBoard stores
 * them). 0, or -1 + err when the file cannot be written. */
int loom_tb_scalars(loom_tb_writer *w, int64_t step, int n, const char *const *tags,
                    const double *values, char *err, size_t errlen);

/* One Event at `step` with `text` (Markdown) for the text plugin under `tag`. 0 or -1 + err. */
int loom_tb_text(loom_tb_writer *w, int64_t step, const char *tag, const char *text, char *err,
                 size_t errlen);

/* The file's path (for messages). */
const char *loom_tb_path(const loom_tb_writer *w);

void loom_tb_close(loom_tb_writer *w);

/* CRC-32C (Castagnoli) of n bytes, and TensorBoard's mask of it (exposed for the unit test). */
uint32_t loom_tb_crc32c(const void *data, size_t n);
uint32_t loom_tb_masked_crc(const void *data, size_t n);

#endif
