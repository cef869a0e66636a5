/* Internal to checkpoint.so: its exported table, declared for the unit tests that link the
 * plugin's objects (tests/CMakeLists.txt, checkpoint_obj) and drive it with a fake host. The
 * module exports this one symbol and nothing else; what the tests need besides is in
 * manifest.h and slice.h. */
#ifndef LOOM_CKPT_CHECKPOINT_H
#define LOOM_CKPT_CHECKPOINT_H

#include <loom/loom.h>

LOOM_EXPORT extern const loom_checkpoint_v1 loom_plugin_v1;

#endif
