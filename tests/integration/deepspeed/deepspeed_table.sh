#!/bin/bash
# docs/config.md's table of DeepSpeed keys against `loom check`: every row's fate (mapped,
# accepted, refused) and mapped path is what loom reports for a DeepSpeed file holding that key,
# and every key of core/config/deepspeed_keys.c's table has a row (check_table.py).
. "$(dirname "$0")/../lib/lib.sh"
make_data
/usr/bin/python3 "$HERE/check_table.py" "$LOOM" "$LOOM_SRC" "$LOOM_SRC/tests/fixtures/deepspeed/model.json" \
  "$WORK" --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
  --set "data.vocab=$WORK/data/vocab.json" || die "docs/config.md's DeepSpeed table and loom check differ"
