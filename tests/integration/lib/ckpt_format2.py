#!/usr/bin/python3
"""Rewrite a checkpoint step directory of format 3 (the global view) as format 2, the layout
loom wrote before it, to test that old checkpoints still resume.

usage: ckpt_format2.py STEP_DIR_IN STEP_DIR_OUT

Only for a run whose ranks are its tensor-parallel ranks (dp 1, pp 1; tp 1 too): rank r gets
the flat items "params", "optim.m", "optim.v" (named "NAME@tpRofN" under tp) of its local flat
layout (the tensor table meta.tensors: each tensor's local offset and numel, tp rank r's slice
of it), one chunk each, then its private blob copied; manifest format "loom-checkpoint-2" with
no slice fields, meta without "items"; every CRC-32 recomputed. The standard library only."""
import array
import json
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_runs import local_positions, read_global  # noqa: E402


def main():
    src, dst = sys.argv[1], sys.argv[2]
    man = json.load(open(os.path.join(src, "manifest.json")))
    meta = man["meta"]
    tp, world = meta["tp"], man["world_size"]
    if meta.get("items") != "global" or meta["pp"] != 1 or world != tp:
        sys.exit(f"{src}: not a format-3 checkpoint of a run with dp 1 and pp 1")
    tensors = meta["tensors"]
    numel = sum(t["numel"] for t in tensors)
    glob = {(k, t["name"]): read_global(src, man, f"{k}/{t['name']}")
            for k in ("params", "optim.m", "optim.v") for t in tensors}
    os.makedirs(dst)
    shards = []
    for r in range(world):
        fname = f"rank-{r:05d}.bin"
        data, chunks = bytearray(), []
        for k in ("params", "optim.m", "optim.v"):
            flat = array.array("f", bytes(4 * numel))
            for t in tensors:
                g = glob[(k, t["name"])]
                for j, i in enumerate(local_positions(t, tp, r)):
                    flat[t["offset"] + j] = g[i]
            raw = flat.tobytes()
            chunks.append({"name": k + (f"@tp{r}of{tp}" if tp > 1 else ""), "dtype": 0,
                           "global_numel": numel, "offset": 0, "count": numel, "rank": r,
                           "file": fname, "at": len(data), "crc32": zlib.crc32(raw)})
            data += raw
        old = man["shards"][r]
        with open(os.path.join(src, fname), "rb") as f:
            f.seek(old["blob_at"])
            blob = f.read(old["blob_bytes"])
        shards.append({"rank": r, "chunks": chunks, "blob_at": len(data),
                       "blob_bytes": len(blob), "blob_crc32": zlib.crc32(blob)})
        with open(os.path.join(dst, fname), "wb") as f:
            f.write(data + blob)
    meta = dict(meta)
    del meta["items"]
    text = json.dumps({"format": "loom-checkpoint-2", "step": man["step"], "world_size": world,
                       "meta": meta, "shards": shards}, indent=1).encode()
    with open(os.path.join(dst, "manifest.json"), "wb") as f:
        f.write(text)
    with open(os.path.join(dst, "manifest.crc32"), "w") as f:
        f.write("%08x\n" % zlib.crc32(text))


if __name__ == "__main__":
    main()
