"""Random-token training shards in llm.c's format (the loom loader's and llm.c's): 2^20 tokens
each, the same tokens for the same vocabulary on every call (seed 1337).

    token_shards.py DIR NAME:VOCAB...   writes DIR/NAME_train.bin for each
"""
import array
import random
import struct
import sys

out = sys.argv[1]
for arg in sys.argv[2:]:
    name, vocab = arg.split(":")
    rng = random.Random(1337)
    n = 1 << 20
    toks = array.array("H", (rng.randrange(int(vocab)) for _ in range(n)))
    with open(f"{out}/{name}_train.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(toks.tobytes())
