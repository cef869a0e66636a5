/* checkpoint.so's reader slots (checkpoint_v1.h, ABI 1.6; reader.c): a checkpoint read by a
 * command with no job. Each is the slot of the same name without the ckpt_ prefix. */
#ifndef LOOM_CKPT_READER_H
#define LOOM_CKPT_READER_H

#include <loom/loom.h>

int ckpt_reader_open(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                     const char *path, void **reader);
void ckpt_reader_close(void *reader);
int ckpt_reader_steps(void *reader, int *steps, int max, int *n);
int ckpt_reader_select(void *reader, int step, loom_ckpt_info_v1 *info);
int ckpt_reader_tensor(void *reader, int i, loom_ckpt_tensor_v1 *out);
int ckpt_reader_read(void *reader, const char *name, uint64_t first, uint64_t count,
                     void *dst);

#endif
