#!/bin/bash
# ctest: labels=integration,asan-full
# Resume across hybrid and non-hybrid meshes (issue 22): a checkpoint written under hybrid
# sharding (zero3 / zero2 with "shard_size": 2 on 4 ranks: shard groups {0,1}, {2,3}, each
# chunk written by the first replica only) continues on plain zero3 over 4 ranks and on ddp
# over 2, and theirs continue under hybrid sharding, each like the target's own straight run
# within compare_runs.py's equivalence tolerances (per-step loss, grad norm, lr, the final
# parameters and Adam's m and v: --state); the hybrid run resumed on its own mesh continues
# bitwise. Every layout trains the same 12 sequences of 64 tokens per step, 20 steps, saving
# at step 10.
. "$(dirname "$0")/../lib/lib.sh"
make_data
declare -A LAYOUT=(
  [hybrid3]="4 3 [{\"plugin\":\"zero3\",\"shard_size\":2}]"
  [hybrid2]="4 3 [{\"plugin\":\"zero2\",\"shard_size\":2}]"
  [zero3_dp4]="4 3 [{\"plugin\":\"zero3\"}]"
  [ddp_dp2]="2 6 [{\"plugin\":\"ddp\"}]"
)
# train NAME LAYOUT [CKPT_DIR]: LAYOUT's ranks and strategy, checkpoints every 10 steps into
# CKPT_DIR (default $WORK/NAME/ckpt; run empties $WORK/NAME first)
train() {
  local name=$1 layout=$2 dir=${3:-$WORK/$1/ckpt}
  local n b par
  read -r n b par <<<"${LAYOUT[$layout]}"
  run "$n" "$name" --set train.micro_batch_size="$b" --set "parallel=$par" \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$dir\",\"every\":10}"
}
for l in "${!LAYOUT[@]}"; do train "straight_$l" "$l"; done
# the chunks of a hybrid checkpoint: each (item, offset) written once, and only by the first
# replica (world ranks 0 and 1); the second replica (2, 3) holds the same shards
python3 - "$WORK/straight_hybrid3/ckpt/step-00000010/manifest.json" <<'PY' || die "chunk writers"
import collections, json, sys
man = json.load(open(sys.argv[1]))
n = collections.Counter((c["name"], c["offset"]) for s in man["shards"] for c in s["chunks"])
dup = [k for k, v in n.items() if v > 1]
late = [s["rank"] for s in man["shards"] if s["rank"] >= 2 and s["chunks"]]
print(f"hybrid checkpoint: {len(n)} chunks, {len(dup)} written twice, ranks >= 2 writing: {late}")
sys.exit(1 if dup or late else 0)
PY
# resume SRC DST: SRC's step-10 checkpoint continued under DST for steps 11-20
resume() {
  local src=$1 dst=$2 name=r_$1_$2
  rm -rf "$WORK/$name.ckpt" && mkdir -p "$WORK/$name.ckpt"
  cp -r "$WORK/straight_$src/ckpt/step-00000010" "$WORK/$name.ckpt/"
  printf 'step-00000010' >"$WORK/$name.ckpt/latest"
  train "$name" "$dst" "$WORK/$name.ckpt"
  rm -rf "$WORK/$name/ckpt" && ln -s "$WORK/$name.ckpt" "$WORK/$name/ckpt"
  grep -q "resumed at step 10" "$WORK/$name/out.log" || die "$name did not resume at step 10"
}
resume hybrid3 hybrid3
echo "== hybrid zero3 resumed on its own mesh: bitwise"
compare r_hybrid3_hybrid3 straight_hybrid3 --bitwise --steps 11:20
for pair in "hybrid3 zero3_dp4" "hybrid3 ddp_dp2" "zero3_dp4 hybrid3" "ddp_dp2 hybrid2" \
            "hybrid2 hybrid3"; do
  read -r src dst <<<"$pair"
  resume "$src" "$dst"
  echo "== $src -> $dst, steps 11-20 vs $dst's straight run"
  compare "r_${src}_$dst" "straight_$dst" --steps 11:20 --state
done
echo "resume_hybrid: hybrid checkpoints resume on plain zero3 and ddp and back"
