#!/bin/bash
# ctest: labels=integration,asan-full
# Memory check: the peak bytes per category a rank measures (mem_peak_bytes in the metrics
# JSONL, rank 0) against the ZeRO paper's accounting (Rajbhandari et al. 2020, §3-5; fp32:
# params 4Ψ, grads 4Ψ, Adam K = 8, the sharded terms /N) and against `loom estimate --json` for
# the same config, for ddp, zero1, zero2, zero3 (each plugin that is built; the others are
# skipped with a note), each with and without cpu_offload, on 2 and 4 ranks, 3 steps of the
# tiny config. Fails when params+grads+optim+host differ by more than 5% from either, or when
# the activations differ from the estimate at all (they are computed, not modelled). The
# per-step communication is compared too (printed; more than 5% off the estimate fails). The
# estimate must bound every rank: each category and the total of mem_peak_bytes_max (the largest
# peak over all ranks) must not exceed it.
. "$(dirname "$0")/../lib/lib.sh"
make_data
PLUGINS=${LOOM_BUILD}/lib/loom/plugins
OFF='{"plugin":"cpu_offload","offload_optimizer":{"device":"cpu"}}'
RUNS=()
for strat in ddp zero1 zero2 zero3; do
  if [ ! -f "$PLUGINS/$strat.so" ]; then
    echo "SKIP $strat: $PLUGINS/$strat.so is not built (re-run once it is)"
    continue
  fi
  for off in 0 1; do
    par="{\"plugin\":\"$strat\"}"
    [ "$off" = 1 ] && par="$par,$OFF"
    par="[$par]"
    # a sharding plugin that does not own gradient sync itself gets ddp in front (its roles
    # decide, as loom estimate reports them)
    if [ "$strat" != ddp ] && "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world 2 --json \
        --set "parallel=$par" 2>/dev/null | grep -q '"grad_sync": false'; then
      par="[{\"plugin\":\"ddp\"},${par#[}"
    fi
    for n in 2 4; do
      name=${strat}$([ "$off" = 1 ] && echo _off)_n$n
      args=(--set train.steps=3 --set train.micro_batch_size=2 --set train.eval_interval=0
            --set checkpoint=null --set "parallel=$par")
      run "$n" "$name" "${args[@]}"
      "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world "$n" --json "${args[@]}" \
        >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
      RUNS+=("$name:$strat:$off:$n")
    done
  done
done

# variants on 2 ranks: zero3 prefetching (two gathered units); zero2 and zero3 with gradient
# accumulation (they reduce on every micro-step: the traffic grows with A)
extra() { # extra NAME STRATEGY[+prefetch] PARALLEL_JSON [--set ...]
  local name=$1 label=$2 par=$3
  shift 3
  [ -f "$PLUGINS/${label%+prefetch}.so" ] || return 0
  local args=(--set train.steps=3 --set train.micro_batch_size=2 --set train.eval_interval=0
              --set checkpoint=null --set "parallel=$par" "$@")
  run 2 "$name" "${args[@]}"
  "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world 2 --json "${args[@]}" \
    >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
  RUNS+=("$name:$label:0:2")
}
extra zero3pf_n2 zero3+prefetch '[{"plugin":"zero3","prefetch":true}]'
extra zero2acc2_n2 zero2 '[{"plugin":"zero2"}]' --set train.grad_accum_steps=2
extra zero3acc2_n2 zero3 '[{"plugin":"zero3"}]' --set train.grad_accum_steps=2

/usr/bin/python3 - "$WORK" "$LOOM_SRC/configs/tiny.json" "${RUNS[@]}" <<'EOF'
import json, math, sys

work, cfg_path, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
cfg = json.load(open(cfg_path))["model"]
C, V, T, L = cfg["n_embd"], cfg["vocab_size"], cfg["context_length"], cfg["n_layer"]
# the GPT-2 parameter count, independently of loom: wte, wpe; per block ln1, qkv, proj, ln2,
# fc, fc-proj (weights and biases); ln_f
unit0, block, head = V * C + T * C, 12 * C * C + 13 * C, 2 * C
psi = unit0 + L * block + head
# ZeRO-3 holds the largest gathered unit (the head's with the tied wte it reads); with
# "prefetch": true the next one is in flight as well: the largest pair of neighbouring units
g = [unit0] + [block] * L + [head + V * C]
gathered = {False: max(g), True: max(g[i] + g[i + 1] for i in range(len(g) - 1))}
STAGE = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}
CATS = ("params", "grads", "optim", "host")


def formula(stage, off, n, prefetch):
    shard = math.ceil(psi / n)
    part = shard if stage >= 1 else psi
    return {
        "params": 4 * (shard + gathered[prefetch]) if stage >= 3 else 4 * psi,
        "grads": 4 * shard if stage >= 2 else 4 * psi,
        "optim": 0 if off else 8 * part,
        "host": 16 * part if off else 0,
    }


def rel(a, b):
    return abs(a - b) / max(b, 1)


ok = True
print(f"Psi = {psi} (tiny: n_layer {L}, n_embd {C}, vocab {V}, context {T}); bytes per rank, "
      "rank 0, peak over 3 steps")
hdr = (f"{'run':<14}{'N':>2} {'params':>8}{'grads':>8}{'optim':>8}{'host':>8} "
       f"{'states':>9}{'formula':>9}{'estimate':>9}{'rel':>7}  {'act ok':>6} "
       f"{'comm/step':>10}{'est':>10}{'rel':>7}")
print(hdr)
print("-" * len(hdr))
for r in runs:
    name, strat, off, n = r.split(":")
    off, n = off == "1", int(n)
    prefetch = strat.endswith("+prefetch")
    strat = strat.replace("+prefetch", "")
    recs = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
    steps = [x for x in recs if "loss" in x]
    meas = steps[-1]["mem_peak_bytes"]
    mx = steps[-1].get("mem_peak_bytes_max")  # the largest peak over all ranks
    comm = steps[1]["comm_bytes"]  # step 2: a steady-state step
    est = json.load(open(f"{work}/{name}/estimate.json"))
    f = formula(STAGE[strat], off, n, prefetch)
    m_states = sum(meas[k] for k in CATS)
    f_states = sum(f.values())
    e_states = est["model_states"]
    r_states = max(rel(m_states, f_states), rel(m_states, e_states))
    act_ok = meas["activations"] == est["bytes"]["activations"]
    r_comm = rel(comm, est["comm_bytes_per_step"])
    bad = []
    if r_states > 0.05:
        bad.append(f"params+grads+optim+host {m_states} vs formula {f_states} / estimate "
                   f"{e_states}")
    if not act_ok:
        bad.append(f"activations {meas['activations']} vs estimate "
                   f"{est['bytes']['activations']}")
    if r_comm > 0.05:
        bad.append(f"comm {comm} vs estimate {est['comm_bytes_per_step']}")
    if est["stage"] != STAGE[strat] or est["roles"]["offload"] != off:
        bad.append(f"estimate read the roles as stage {est['stage']}, offload "
                   f"{est['roles']['offload']}")
    print(f"{name:<14}{n:>2} {meas['params']:>8}{meas['grads']:>8}{meas['optim']:>8}"
          f"{meas['host']:>8} {m_states:>9}{f_states:>9}{e_states:>9}{r_states:>7.2%}  "
          f"{'yes' if act_ok else 'NO':>6} {comm:>10}{est['comm_bytes_per_step']:>10}"
          f"{r_comm:>7.2%}")
    for k in CATS:  # categories off by more than 5% are worth a look even when the sum fits
        if rel(meas[k], f[k]) > 0.05 and max(meas[k], f[k]) > 0:
            print(f"    note: {k} measured {meas[k]} vs formula {f[k]}")
    mcomm = (mx or meas)["comm"]  # the largest rank's, which the estimate bounds
    if rel(mcomm, est["bytes"]["comm"]) > 0.05 and mcomm + est["bytes"]["comm"]:
        # how far below the bound depends on when non-blocking reductions complete
        print(f"    note: comm buffers measured {mcomm} (largest rank) vs estimate "
              f"{est['bytes']['comm']} (an upper bound)")
    # the estimate is an upper bound for EVERY rank: each category and the total against the
    # largest peak over all ranks (mem_peak_bytes_max; uneven partitions, the rank that
    # receives the largest block of a bucket, differ from rank 0)
    if mx is None:
        bad.append("metrics have no mem_peak_bytes_max")
    else:
        for k in ("params", "grads", "optim", "host", "activations", "comm", "other", "total"):
            e_k = est["bytes"][k]
            if mx.get(k, 0) > e_k:
                bad.append(f"{k}: the largest rank's peak {mx[k]} exceeds the estimate {e_k}")
    for b in bad:
        print(f"    FAIL {name}: {b}")
        ok = False
print("memory_zero: " + ("all runs within 5% of the formula and the estimate" if ok else
                         "MISMATCH"))
sys.exit(0 if ok else 1)
EOF
