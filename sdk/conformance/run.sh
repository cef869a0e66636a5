#!/bin/bash
# The loom conformance battery: the checks of loom's own tests/integration (equivalence, resume,
# rank failure), written once for any plugin. Started by `loom conformance PLUGIN`, which has
# already run the ABI checks that need the plugin's table and passes what it learned:
#   LOOM_CONF_LOOM, _PLUGIN (path), _NAME, _KIND, _CAPS (names), _HOOKS (filled parallel
#   slots), _WITH (more plugins), _NP (largest world), _KEEP (work dir to keep), _ONLY
#   (groups), _PROBE (conformance_probe.so), _DIR (this folder), _PASSED/_FAILED/_FAILURES.
# Every check prints one line "PASS|FAIL|SKIP  NAME  detail"; the summary counts them; the exit
# status is 1 when any check failed. A tiny GPT (2 blocks, 32 channels, 4 heads, context 32:
# 34,688 parameters) trains 6 steps of 12 sequences x 32 tokens per job, so a plugin's whole
# battery takes a minute or two on 2 cores.
set -u
LOOM=$LOOM_CONF_LOOM
BIN=$(dirname "$LOOM")
PLUGIN=$LOOM_CONF_PLUGIN
KIND=$LOOM_CONF_KIND
CAPS=" $LOOM_CONF_CAPS "
HOOKS=$LOOM_CONF_HOOKS
NP=${LOOM_CONF_NP:-4}
RTOL=${LOOM_CONF_RTOL:-1e-5} # loom's own equivalence tolerance (tests/integration, 20 steps)
STEPS=6
GLOBAL=12 # sequences per step: divisible by dp = 1, 2, 3, 4 and by accumulation 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo

passed=${LOOM_CONF_PASSED:-0} failed=${LOOM_CONF_FAILED:-0} skipped=0
failures=${LOOM_CONF_FAILURES:-} skips=""
if [ -n "${LOOM_CONF_KEEP:-}" ]; then
  mkdir -p "$LOOM_CONF_KEEP" && WORK=$(cd "$LOOM_CONF_KEEP" && pwd) || exit 1
else
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/loom-conformance.XXXXXX") || exit 1
  trap 'rm -rf "$WORK"' EXIT
fi

pass() { printf 'PASS  %-28s %s\n' "$1" "$2"; passed=$((passed + 1)); }
fail() { printf 'FAIL  %-28s %s\n' "$1" "$2"; failed=$((failed + 1)); failures="$failures $1"; }
skip() { printf 'SKIP  %-28s %s\n' "$1" "$2"; skipped=$((skipped + 1)); skips="$skips $1"; }
has_cap() { case "$CAPS" in *" $1 "*) return 0 ;; esac; return 1; }
want() { # want GROUP: is GROUP selected (--only)?
  [ -z "${LOOM_CONF_ONLY:-}" ] && return 0
  case ",$LOOM_CONF_ONLY," in *",$1,"*) return 0 ;; esac
  return 1
}
summary() {
  echo "summary: $passed passed, $failed failed${failures:+ (${failures# })}, $skipped skipped${skips:+ (${skips# })}"
  [ "$failed" -eq 0 ]
  exit $?
}
command -v mpirun >/dev/null || { fail setup "mpirun not found (OpenMPI): the battery runs multi-rank jobs"; summary; }
command -v python3 >/dev/null || { fail setup "python3 not found: the run comparison needs it"; summary; }
[ "$NP" -ge 2 ] || { skip multi-rank "--np $NP: every multi-rank check needs at least 2 ranks"; }

# ---------------------------------------------------------------- data and config
mkdir -p "$WORK/txt"
# ~64 KB of varied text, generated: the battery needs no corpus of its own.
awk 'BEGIN { srand(7); split("the a loom rank plugin step grad norm sync shard stage tensor pipe data", w);
  for (l = 0; l < 2400; l++) { s = ""; for (k = 0; k < 4 + l % 7; k++) s = s w[1 + int(rand() * 15)] " ";
  printf "%d: %s.\n", l, s } }' >"$WORK/txt/a.txt"
"$BIN/loom-prepare" --out "$WORK/data" "$WORK/txt/a.txt" >"$WORK/prepare.log" 2>&1 ||
  { fail setup "loom-prepare failed: $(tail -1 "$WORK/prepare.log")"; summary; }
json_path() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
V=256 T=32 L=2 C=32
cat >"$WORK/base.json" <<EOF
{"model": {"vocab_size": $V, "context_length": $T, "n_layer": $L, "n_head": 4, "n_embd": $C},
 "data": {"train": $(json_path "$WORK/data/train_*.bin"), "vocab": $(json_path "$WORK/data/vocab.json")},
 "train": {"micro_batch_size": $GLOBAL, "seq_len": 32, "grad_accum_steps": 1, "steps": $STEPS,
           "eval_interval": 0, "seed": 1337},
 "optimizer": {"name": "adamw", "lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8,
               "weight_decay": 0.1, "grad_clip": 1.0},
 "lr_schedule": {"warmup_steps": 2, "decay": "cosine", "min_lr": 1e-4},
 "device": {"type": "cpu", "threads": 1},
 "comm": {"plugin": "mpi"},
 "precision": {"plugin": "fp32"},
 "logging": {"interval": 1},
 "sample": {"prompt": "\n", "tokens": 0}}
EOF
# GPT-2's count: wte + wpe + per block (qkv, proj, fc, fc-proj weights and biases, 2 LayerNorms)
# + the final LayerNorm
PARAMS=$((V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C)) # 34,688

# The plugin's own config entry and the entries of the runs it goes into.
PJ=$(json_path "$PLUGIN")
# --options '{"k": v}': the plugin's own options, added to its entry in every job
OPTS=""
if [ -n "${LOOM_CONF_OPTIONS:-}" ]; then
  OPTS=$(python3 -c '
import json, sys
o = json.loads(sys.argv[1])
if not isinstance(o, dict) or "plugin" in o: sys.exit(1)
print("".join("," + json.dumps(k) + ":" + json.dumps(v) for k, v in o.items()))' "$LOOM_CONF_OPTIONS") ||
    { fail setup "--options: expected a JSON object of the plugin's options (without \"plugin\"), got '$LOOM_CONF_OPTIONS'"; summary; }
fi
WITH_ENTRIES=""
for w in ${LOOM_CONF_WITH:-}; do WITH_ENTRIES="$WITH_ENTRIES,{\"plugin\":$(json_path "$w")}"; done
probe_rec() { echo "{\"plugin\":$(json_path "$LOOM_CONF_PROBE"),\"record\":$(json_path "$WORK/$1/rec")}"; }
ckpt() { echo "{\"plugin\":\"checkpoint\",\"dir\":$(json_path "$WORK/$1/ckpt"),\"every\":${2:-0},\"keep\":0}"; }

# job NRANKS NAME [--set ...]: train base.json into $WORK/NAME; returns loom's status (124:
# killed after JOB_TIMEOUT seconds, default 300).
job() {
  local n=$1 name=$2
  shift 2
  rm -rf "${WORK:?}/$name"
  mkdir -p "$WORK/$name/rec"
  timeout "${JOB_TIMEOUT:-300}" mpirun -np "$n" --bind-to none "$LOOM" train "$WORK/base.json" \
    --set "logging.metrics=$WORK/$name/metrics.jsonl" --set "checkpoint=$(ckpt "$name")" "$@" \
    >"$WORK/$name/out.log" 2>&1
}
last_error() { grep -m1 -E "error:|Error|FAIL" "$WORK/$1/out.log" | cut -c1-300; }

# cmp_runs A B [--rtol R|--bitwise] [--steps A:B]: loom's compare_runs.py (loss, grad norm per
# step; final parameters from the built-in checkpoint). Output in $WORK/A/cmp_B.txt.
cmp_runs() {
  local a=$1 b=$2
  shift 2
  python3 "$LOOM_CONF_DIR/compare_runs.py" "$@" "$WORK/$a/metrics.jsonl" "$WORK/$a/ckpt" \
    "$WORK/$b/metrics.jsonl" "$WORK/$b/ckpt" >"$WORK/$a/cmp_$b.txt" 2>&1
}
# fact MSG / hint MSG: the first line of replicas' message (what it measured) / the rest (why)
fact() { printf '%s' "${1%%$'\n'*}"; }
hint() { case $1 in *$'\n'*) printf '%s' "${1#*$'\n'}" ;; esac; }
said() { fact "$1"; [ -z "$(hint "$1")" ] || printf ': %s' "$(hint "$1")"; } # both, one line
# set by parallel.replicas_agree: 1 when the data-parallel replicas drifted apart, 0 when they
# agreed, empty when that check did not run (the resume check's hint depends on it)
REPLICAS_DRIFT=
cmp_summary() { grep -E "^(FAIL|per-step|final)" "$WORK/$1/cmp_$2.txt" | head -3 | tr '\n' ' ' | cut -c1-400; }

# replicas NAME: the probe's per-rank records: ranks with the same (tp, pp) coordinates (the
# data-parallel replicas) must hold bitwise identical parameters after every step, and every
# rank must see the same gradient norm. Prints the first disagreement; status 1 on one.
replicas() {
  python3 - "$WORK/$1/rec" <<'EOF'
import glob, json, os, sys
recs = {}
for f in glob.glob(sys.argv[1] + "/rank*.jsonl"):
    for line in open(f):
        r = json.loads(line)
        recs.setdefault(r["step"], []).append(r)
if not recs:
    print("no per-rank records (the probe did not run)"); sys.exit(1)
for step in sorted(recs):
    rs = sorted(recs[step], key=lambda r: r["rank"])
    norms = {r["rank"]: r["grad_norm"] for r in rs}
    groups = {}
    for r in rs:
        groups.setdefault((r["tp"], r["pp"]), []).append(r)
    for (tp, pp), g in groups.items():
        h = {r["dp"]: r["params_fnv"] for r in g}
        if len(set(h.values())) > 1 and "0000000000000000" not in h.values():
            by = {r["dp"]: r for r in g}
            a, b = sorted(h)[0], [d for d in sorted(h) if h[d] != h[sorted(h)[0]]][0]
            pa, pb = by[a].get("grads_fnv_parts"), by[b].get("grads_fnv_parts")
            n = by[a].get("numel", 0)
            where = f"step {step}: dp ranks {a} and {b} (tp {tp}, pp {pp}) hold different parameters"
            # two lines: what was measured, then the hint that follows from it (callers that
            # know more, such as the accumulation check, keep the first only). The hint comes
            # from which slices of the synchronised gradient differ (probe.c, buffer_hash).
            zero = "0000000000000000"
            diff = [k for k in range(len(pa or [])) if pa[k] != pb[k]]
            if not pa or zero in pa or zero in pb:
                print(where)
                print("the replicas must stay identical: synchronise the gradients over "
                      "api->comm(host, LOOM_AXIS_DP) and step them the same way")
            elif not diff:
                print(f"{where}, though their synchronised gradients agree")
                print("the replicas drift apart after the sync: the optimizer step or state "
                      "differs across data-parallel ranks (replicate it, or step from the "
                      "same values)")
            elif len(diff) == len(pa):
                print(f"{where}: their gradients differ in every slice after the sync")
                print("the gradients were not synchronised across the data-parallel ranks at all "
                      "— reduce over api->comm(host, LOOM_AXIS_DP), not another axis or "
                      "communicator")
            else:
                P = len(pa)
                lo = lambda k: n * k // P
                spans = []
                for k in diff:
                    if spans and spans[-1][1] == lo(k):
                        spans[-1][1] = lo(k + 1)
                    else:
                        spans.append([lo(k), lo(k + 1)])
                same = n - sum(e - s for s, e in spans)
                print(f"{where}: their gradients differ after the sync in elements " +
                      ", ".join(f"[{s}, {e})" for s, e in spans) + f" of {n} ({same} agree)")
                print(f"the sync reduced only part of the gradient buffer — reduce all {n} "
                      "elements (check the count passed to the collective, and that every "
                      "bucket or slice is reduced)")
            sys.exit(1)
    if len(set(norms.values())) > 1 and not os.environ.get("PARAMS_ONLY"):
        # (None: a skipped step. PARAMS_ONLY: after an injected infinity the probe's norm is
        # each rank's own, read before the ranks agree on the overflow)
        a = rs[0]["rank"]
        b = next(r["rank"] for r in rs if norms[r["rank"]] != norms[a])
        print(f"step {step}: the gradient norm differs across ranks: {norms[a]!r} on rank "
              f"{a}, {norms[b]!r} on rank {b}"); sys.exit(1)
sharded = any(r["params_fnv"] == "0000000000000000" for rs in recs.values() for r in rs)
print(f"{len(recs)} steps, {len(recs[min(recs)])} ranks: " +
      ("one gradient norm (no flat parameter buffer: the parameters are sharded, compared "
       "through the final checkpoint instead)" if sharded else
       "replicas bitwise identical, one gradient norm"))
EOF
}

# step1 A B KEY: A's value of KEY at step 1 divided by B's.
step1_ratio() {
  python3 - "$WORK/$1/metrics.jsonl" "$WORK/$2/metrics.jsonl" "$3" <<'EOF'
import json, sys
def v(p):
    for l in open(p):
        r = json.loads(l)
        if r.get("step") == 1 and sys.argv[3] in r: return r[sys.argv[3]]
a, b = v(sys.argv[1]), v(sys.argv[2])
print(a / b if a is not None and b else "nan")
EOF
}

REF_DONE=0
reference() { # the single-rank run without any parallel plugin: what every run must match
  [ "$REF_DONE" = 1 ] && return 0
  job 1 ref --set 'parallel=[]' || { fail setup "the 1-rank reference run failed: $(last_error ref)"; summary; }
  REF_DONE=1
}

# equiv NAME CHECK WHAT: compare run NAME with the reference; one line for CHECK.
equiv() {
  local name=$1 check=$2 what=$3
  if cmp_runs "$name" ref --rtol "$RTOL"; then
    pass "$check" "$what: $(cmp_summary "$name" ref)"
  else
    fail "$check" "$what differs from the 1-rank run beyond rtol $RTOL: $(cmp_summary "$name" ref)"
  fi
}

# ---------------------------------------------------------------- abi (options, create/destroy)
# Under a sanitizer build, create/destroy run with LeakSanitizer on whatever the caller's
# ASAN_OPTIONS say (the last setting wins); in a normal build the variable is ignored.
LEAKS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}detect_leaks=1"
EXTRA_CHECK=()
check_config() { ASAN_OPTIONS=$LEAKS "$LOOM" check "$WORK/base.json" --set "checkpoint=null" "$@" >"$WORK/check.log" 2>&1; }
if want abi; then
  case $KIND in
    parallel)
      if has_cap AXIS_TP; then ENTRY="{\"plugin\":$PJ$OPTS,\"size\":2}"; W=2
      elif has_cap AXIS_PP; then ENTRY="{\"plugin\":$PJ$OPTS,\"size\":2}"; W=2
        EXTRA_CHECK=(--set train.grad_accum_steps=2 --set train.micro_batch_size=6) # 1F1B: micro-batches >= stages
      else ENTRY="{\"plugin\":$PJ$OPTS}"; W=2; fi
      if has_cap GRAD_SYNC || ! has_cap AXIS_DP; then BASE_PAR="[$ENTRY$WITH_ENTRIES]"
      else BASE_PAR="[{\"plugin\":\"ddp\"},$ENTRY$WITH_ENTRIES]"; fi
      OPT_PATH="parallel[$([ "${BASE_PAR#\[\{\"plugin\":\"ddp\"\}}" != "$BASE_PAR" ] && echo 1 || echo 0)]"
      ARGS=(--set "parallel=$BASE_PAR" --world "$W" "${EXTRA_CHECK[@]}") ;;
    precision) OPT_PATH=precision; W=2; ARGS=(--set "precision={\"plugin\":$PJ$OPTS}" --set 'parallel=[{"plugin":"ddp"}]' --world 2) ;;
    comm) OPT_PATH=comm; W=2; ARGS=(--set "comm={\"plugin\":$PJ$OPTS}" --set 'parallel=[{"plugin":"ddp"}]' --world 2) ;;
    checkpoint) OPT_PATH=checkpoint; W=2; ARGS=(--set "parallel=[{\"plugin\":\"ddp\"}]" --world 2) ;;
    *) OPT_PATH="" ;;
  esac
  if [ -n "$OPT_PATH" ]; then
    if [ "$KIND" = comm ]; then
      # loom check runs on a stand-in mesh without the comm plugin: a 1-rank, 1-step job
      # creates it (and destroys it at the end) for real
      ok_args=(--set "comm={\"plugin\":$PJ$OPTS}" --set 'parallel=[]' --set train.steps=1 --set lr_schedule.warmup_steps=0)
      bad_args=(--set "comm={\"plugin\":$PJ$OPTS,\"conformance_unknown_key\":1}" --set 'parallel=[]' --set train.steps=1 --set lr_schedule.warmup_steps=0)
      W=1
      # (not under LeakSanitizer: OpenMPI's own allocations outlive MPI_Finalize)
      timeout 120 mpirun -np 1 "$LOOM" train "$WORK/base.json" --set checkpoint=null "${ok_args[@]}" >"$WORK/check.log" 2>&1
    elif [ "$KIND" = checkpoint ]; then
      ok_args=("${ARGS[@]}" --set "checkpoint={\"plugin\":$PJ$OPTS,\"dir\":$(json_path "$WORK/chk"),\"every\":0}")
      bad_args=("${ARGS[@]}" --set "checkpoint={\"plugin\":$PJ$OPTS,\"dir\":$(json_path "$WORK/chk"),\"every\":0,\"conformance_unknown_key\":1}")
      ASAN_OPTIONS=$LEAKS "$LOOM" check "$WORK/base.json" "${ok_args[@]}" >"$WORK/check.log" 2>&1
    else
      bad_args=("${ARGS[@]}" --set "$OPT_PATH.conformance_unknown_key=1")
      check_config "${ARGS[@]}"
    fi
    if [ $? -eq 0 ]; then
      pass abi.create_destroy "created with its defaults and destroyed on a $W-rank mesh ($([ "$KIND" = comm ] && echo "a 1-step job" || echo "loom check"))"
    else
      fail abi.create_destroy "loom check with the plugin's defaults failed: $(tail -1 "$WORK/check.log" | cut -c1-300)"
    fi
    if [ "$KIND" = comm ]; then
      timeout 120 mpirun -np 1 "$LOOM" train "$WORK/base.json" --set checkpoint=null "${bad_args[@]}" >"$WORK/check_bad.log" 2>&1
    else
      "$LOOM" check "$WORK/base.json" --set checkpoint=null "${bad_args[@]}" >"$WORK/check_bad.log" 2>&1
    fi
    rc=$?
    if [ $rc -ne 0 ] && grep -q "conformance_unknown_key" "$WORK/check_bad.log"; then
      pass abi.unknown_option "refused, naming the key: $(grep -m1 conformance_unknown_key "$WORK/check_bad.log" | cut -c1-200)"
    elif [ $rc -ne 0 ]; then
      fail abi.unknown_option "refused, but the message does not name the unknown key: $(tail -1 "$WORK/check_bad.log" | cut -c1-200)"
    else
      fail abi.unknown_option "an unknown option '$OPT_PATH.conformance_unknown_key' was accepted: check the keys in create (api->opt_check_keys)"
    fi
  fi
fi

# ---------------------------------------------------------------- parallel
# mb NRANKS_ON_AXIS ACCUM: the micro-batch size keeping the global batch at $GLOBAL
mb() { echo $((GLOBAL / $1 / $2)); }

if [ "$KIND" = parallel ] && want parallel && [ "$NP" -ge 2 ]; then
  reference
  if has_cap AXIS_TP || has_cap AXIS_PP; then
    # a model-parallel plugin: its own axis at 2, then composed with ddp (dp 2) on 4 ranks
    E="{\"plugin\":$PJ$OPTS,\"size\":2}"
    if has_cap AXIS_PP; then ACC=2; else ACC=1; fi
    job 2 axis2 --set train.micro_batch_size=$(mb 1 $ACC) --set train.grad_accum_steps=$ACC \
      --set "parallel=[$E$WITH_ENTRIES,$(probe_rec axis2)]" &&
      equiv axis2 parallel.equivalence.size2 "size 2 on its axis ($ACC micro-batches)" ||
      fail parallel.equivalence.size2 "the run failed: $(last_error axis2)"
    if [ "$NP" -ge 4 ]; then
      if job 4 comp --set train.micro_batch_size=$(mb 2 $ACC) --set train.grad_accum_steps=$ACC \
           --set "parallel=[$E,{\"plugin\":\"ddp\"}$WITH_ENTRIES,$(probe_rec comp)]"; then
        equiv comp parallel.composition.ddp "size 2 x ddp over dp 2 (4 ranks)"
        if msg=$(replicas comp); then pass parallel.replicas_agree "$msg"; REPLICAS_DRIFT=0
        else fail parallel.replicas_agree "$(said "$msg")"; REPLICAS_DRIFT=1; fi
      else
        fail parallel.composition.ddp "size 2 x ddp over dp 2 failed: $(last_error comp)"
      fi
    else
      skip parallel.composition.ddp "--np $NP: composing with dp 2 needs 4 ranks"
    fi
  else
    # a data-parallel plugin. Without GRAD_SYNC it runs next to ddp, the built-in sync owner.
    if has_cap GRAD_SYNC; then PAR_HEAD="{\"plugin\":$PJ$OPTS}$WITH_ENTRIES"
    else PAR_HEAD="{\"plugin\":\"ddp\"},{\"plugin\":$PJ$OPTS}$WITH_ENTRIES"; fi
    par() { echo "[$PAR_HEAD,$(probe_rec "$1")]"; }
    DP2_AGREE=0
    # 1. dp 2: replicas must agree bitwise (the sync reaches the data-parallel ranks)
    if job 2 dp2 --set train.micro_batch_size=$(mb 2 1) --set "parallel=$(par dp2)"; then
      if msg=$(replicas dp2); then
        DP2_AGREE=1
        REPLICAS_DRIFT=0
        pass parallel.replicas_agree "dp 2: $msg"
      else
        REPLICAS_DRIFT=1
        fail parallel.replicas_agree "dp 2: $(said "$msg")"
      fi
      # 2. the average: step 1's gradient norm against the 1-rank run
      r=$(step1_ratio dp2 ref grad_norm)
      verdict=$(python3 -c "import sys; r=float('$r'); print('ok' if abs(r-1)<=$RTOL else 'sum' if abs(r-2)<1e-3 else 'half' if abs(r-0.5)<1e-3 else 'other')")
      case $verdict in
        ok) pass parallel.grad_average "dp 2: step 1 gradient norm / 1-rank norm = $r" ;;
        sum) fail parallel.grad_average "dp 2: step 1 gradient norm is $r x the 1-rank run's: the gradients are summed over the data-parallel ranks but not divided by dp (scale by 1/api->size(host, LOOM_AXIS_DP))" ;;
        half) fail parallel.grad_average "dp 2: step 1 gradient norm is $r x the 1-rank run's: the gradients are divided by dp twice" ;;
        *) fail parallel.grad_average "dp 2: step 1 gradient norm / 1-rank norm = $r (expected 1 within $RTOL)$([ "$DP2_AGREE" = 1 ] || echo "; the replicas disagree: see parallel.replicas_agree")" ;;
      esac
      equiv dp2 parallel.equivalence.dp2 "dp 2"
    else
      fail parallel.replicas_agree "the dp 2 run failed: $(last_error dp2)"
    fi
    # 3. gradient accumulation: the last micro-step is the sync step
    if job 2 dp2acc --set train.micro_batch_size=$(mb 2 2) --set train.grad_accum_steps=2 \
         --set "parallel=$(par dp2acc)"; then
      if ! msg=$(replicas dp2acc); then
        if [ "$DP2_AGREE" = 1 ]; then
          fail parallel.accumulation "dp 2 x 2 micro-steps: $(fact "$msg"), though they agree without accumulation: the last micro-step's gradients are not synchronised (micro == n_micro - 1 is the sync micro-step; the others are no_sync)"
        else
          fail parallel.accumulation "dp 2 x 2 micro-steps: $(fact "$msg"), as without accumulation (parallel.replicas_agree)"
        fi
      elif cmp_runs dp2acc ref --rtol "$RTOL"; then
        pass parallel.accumulation "dp 2 x 2 micro-steps: $(cmp_summary dp2acc ref)"
      else
        fail parallel.accumulation "dp 2 x 2 micro-steps differs from the 1-rank run: $(cmp_summary dp2acc ref) — the accumulated gradient must be synchronised once, on the last micro-step, and weighted 1/dp"
      fi
    else
      fail parallel.accumulation "the run failed: $(last_error dp2acc)"
    fi
    # 4. a world size that divides neither the batch layout evenly nor the parameter count
    for n in 3 4; do
      [ "$n" -le "$NP" ] || { skip parallel.equivalence.dp$n "--np $NP"; continue; }
      note=""
      [ $((PARAMS % n)) -ne 0 ] && note=" ($PARAMS parameters: not divisible by $n)"
      if job "$n" dp$n --set train.micro_batch_size=$(mb "$n" 1) --set "parallel=$(par dp$n)"; then
        equiv dp$n parallel.equivalence.dp$n "dp $n$note"
      else
        fail parallel.equivalence.dp$n "dp $n$note: the run failed: $(last_error dp$n)"
      fi
    done
    # 5. composition with tensor parallel (tp 2 x dp 2)
    if [ "$NP" -ge 4 ]; then
      if job 4 comp_tp --set train.micro_batch_size=$(mb 2 1) \
           --set "parallel=[{\"plugin\":\"tensor_parallel\",\"size\":2},$PAR_HEAD,$(probe_rec comp_tp)]"; then
        equiv comp_tp parallel.composition.tp "tp 2 x dp 2"
      else
        fail parallel.composition.tp "tp 2 x dp 2: the run failed: $(last_error comp_tp)"
      fi
    else
      skip parallel.composition.tp "--np $NP: tp 2 x dp 2 needs 4 ranks"
    fi
  fi
fi

# estimate_check CHECK NRANKS PAR_JSON [--set ...]: train 2 steps without the probe, then
# `loom estimate` of the same config: no category of any rank's peak (mem_peak_bytes_max) may
# exceed the estimate, which is the plugin's own (loom_parallel_v1.estimate, ABI 1.6) or the
# host's accounting by its roles when it has none.
estimate_check() {
  local check=$1 n=$2 par=$3
  shift 3
  local args=(--set train.steps=2 --set lr_schedule.warmup_steps=1 --set "parallel=$par" "$@")
  if ! job "$n" est "${args[@]}"; then
    fail "$check" "the run failed: $(last_error est)"; return
  fi
  if ! "$LOOM" estimate "$WORK/base.json" --world "$n" --json --set checkpoint=null "${args[@]}" \
       >"$WORK/est/estimate.json" 2>"$WORK/est/estimate.err"; then
    fail "$check" "loom estimate failed: $(head -c 300 "$WORK/est/estimate.err")"; return
  fi
  local own="the host's accounting by its roles (no estimate slot)" msg
  [ "${LOOM_CONF_ESTIMATE:-0}" = 1 ] && own="its own estimate slot"
  if msg=$(python3 "$LOOM_CONF_DIR/estimate_peak.py" "$WORK/est/metrics.jsonl" "$WORK/est/estimate.json"); then
    pass "$check" "$msg, by $own"
  else
    fail "$check" "$msg, by $own: report what the plugin allocates (api->alloc) in its estimate slot"
  fi
}

if [ "$KIND" = parallel ] && want parallel && [ "$NP" -ge 2 ]; then
  if has_cap AXIS_TP || has_cap AXIS_PP; then
    if has_cap AXIS_PP; then A=2; else A=1; fi
    estimate_check parallel.estimate 2 "[{\"plugin\":$PJ$OPTS,\"size\":2}$WITH_ENTRIES]" \
      --set train.micro_batch_size=$(mb 1 $A) --set train.grad_accum_steps=$A
  elif has_cap GRAD_SYNC; then
    estimate_check parallel.estimate 2 "[{\"plugin\":$PJ$OPTS}$WITH_ENTRIES]" \
      --set train.micro_batch_size=$(mb 2 1)
  else
    estimate_check parallel.estimate 2 "[{\"plugin\":\"ddp\"},{\"plugin\":$PJ$OPTS}$WITH_ENTRIES]" \
      --set train.micro_batch_size=$(mb 2 1)
  fi
fi

# ---------------------------------------------------------------- resume
# resume_check CHECK NRANKS PAR_JSON [extra --set...]: 6 steps straight vs 3 + a new process
# resuming from a copy of the step-3 checkpoint + 3: bitwise identical steps 4-6.
resume_check() {
  local check=$1 n=$2 par=$3 acc=$4 ck=$5
  shift 5
  local c1="{\"plugin\":$ck,\"dir\":$(json_path "$WORK/straight/ckpt"),\"every\":3,\"keep\":0}"
  local c2="{\"plugin\":$ck,\"dir\":$(json_path "$WORK/resumed/ckpt"),\"every\":3,\"keep\":0}"
  job "$n" straight --set "parallel=$par" --set train.grad_accum_steps=$acc "$@" --set "checkpoint=$c1" ||
    { fail "$check" "the straight run failed: $(last_error straight)"; return; }
  mkdir -p "$WORK/resumed_ckpt"
  rm -rf "$WORK/resumed_ckpt"/*
  cp -r "$WORK/straight/ckpt/." "$WORK/resumed_ckpt/"
  # keep only the step-3 checkpoint (for the built-in plugin; another keeps its own layout)
  if [ -f "$WORK/resumed_ckpt/latest" ]; then
    rm -rf "$WORK/resumed_ckpt"/step-00000006
    printf 'step-00000003' >"$WORK/resumed_ckpt/latest"
  fi
  rm -rf "$WORK/resumed"
  mkdir -p "$WORK/resumed/rec"
  cp -r "$WORK/resumed_ckpt" "$WORK/resumed/ckpt"
  timeout 300 mpirun -np "$n" --bind-to none "$LOOM" train "$WORK/base.json" \
    --set "logging.metrics=$WORK/resumed/metrics.jsonl" --set "parallel=$par" \
    --set train.grad_accum_steps=$acc "$@" --set "checkpoint=$c2" >"$WORK/resumed/out.log" 2>&1 ||
    { fail "$check" "the resumed run failed: $(last_error resumed)"; return; }
  grep -q "resumed at step 3" "$WORK/resumed/out.log" ||
    { fail "$check" "the second run did not resume at step 3 ($(grep -m1 -i resum "$WORK/resumed/out.log"))"; return; }
  if [ "$ck" = '"checkpoint"' ] && cmp_runs resumed straight --bitwise --steps 4:6; then
    pass "$check" "$n ranks, steps 4-6 after a restart at 3: $(cmp_summary resumed straight)"
  elif [ "$ck" != '"checkpoint"' ] && python3 - "$WORK" <<'EOF'
import json, sys
def m(p): return {r["step"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if "loss" in r and 4 <= r["step"] <= 6}
a, b = m(sys.argv[1] + "/resumed/metrics.jsonl"), m(sys.argv[1] + "/straight/metrics.jsonl")
sys.exit(0 if a and a == b else 1)
EOF
  then
    pass "$check" "$n ranks, steps 4-6 after a restart at 3: loss and grad norm bitwise identical"
  else
    local why="save and restore every piece of state the plugin owns (state_items / optimizer shards / scaler state)"
    case $REPLICAS_DRIFT in
      1) why="the data-parallel replicas drift apart (parallel.replicas_agree failed): the checkpoint keeps one replica's parameters, so no restore continues the others — fix the gradient sync first" ;;
      '') why="$why; if the data-parallel replicas disagree (parallel.replicas_agree, not run here), fix that first" ;;
    esac
    fail "$check" "$n ranks: the resumed run is not a bitwise continuation: $(cmp_summary resumed straight) — $why"
  fi
}

if want resume && [ "$NP" -ge 2 ]; then
  case $KIND in
    parallel)
      if has_cap AXIS_TP || has_cap AXIS_PP; then
        has_cap AXIS_PP && A=2 || A=1
        resume_check resume.bitwise 2 "[{\"plugin\":$PJ$OPTS,\"size\":2}$WITH_ENTRIES]" $A '"checkpoint"' \
          --set train.micro_batch_size=$(mb 1 $A)
        skip resume.world_size "checkpoints of a tensor- or pipeline-parallel run resume on the same tp/pp size only (the host refuses another)"
      else
        if has_cap GRAD_SYNC; then P="[{\"plugin\":$PJ$OPTS}$WITH_ENTRIES]"; else P="[{\"plugin\":\"ddp\"},{\"plugin\":$PJ$OPTS}$WITH_ENTRIES]"; fi
        resume_check resume.bitwise 2 "$P" 1 '"checkpoint"' --set train.micro_batch_size=$(mb 2 1)
        # save on 2 ranks, resume on 1 (the checkpoint's chunks carry their offsets)
        c1="{\"plugin\":\"checkpoint\",\"dir\":$(json_path "$WORK/straight/ckpt"),\"every\":3,\"keep\":0}"
        rm -rf "$WORK/w1" && mkdir -p "$WORK/w1/ckpt"
        cp -r "$WORK/straight/ckpt/step-00000003" "$WORK/w1/ckpt/" 2>/dev/null && printf 'step-00000003' >"$WORK/w1/ckpt/latest"
        c3="{\"plugin\":\"checkpoint\",\"dir\":$(json_path "$WORK/w1/ckpt"),\"every\":3,\"keep\":0}"
        if timeout 300 mpirun -np 1 --bind-to none "$LOOM" train "$WORK/base.json" \
             --set "logging.metrics=$WORK/w1/metrics.jsonl" --set "parallel=$P" \
             --set "checkpoint=$c3" >"$WORK/w1/out.log" 2>&1 && grep -q "resumed at step 3" "$WORK/w1/out.log"; then
          if cmp_runs w1 straight --rtol "$RTOL" --steps 4:6; then
            pass resume.world_size "saved on 2 ranks, resumed on 1: $(cmp_summary w1 straight)"
          else
            fail resume.world_size "saved on 2 ranks, resumed on 1: $(cmp_summary w1 straight)"
          fi
        else
          fail resume.world_size "saved on 2 ranks, the resume on 1 failed: $(last_error w1)"
        fi
      fi ;;
    precision)
      resume_check resume.bitwise 2 '[{"plugin":"ddp"}]' 1 '"checkpoint"' \
        --set train.micro_batch_size=$(mb 2 1) --set "precision={\"plugin\":$PJ$OPTS}" ;;
    checkpoint)
      resume_check resume.bitwise 2 '[{"plugin":"ddp"}]' 1 "$PJ$OPTS" --set train.micro_batch_size=$(mb 2 1)
      resume_check resume.bitwise_1rank 1 '[]' 1 "$PJ$OPTS" ;;
  esac
fi

# checkpoint: save on 2, load on 1 (LOOM_CKPT_CAP_RESHARD)
if [ "$KIND" = checkpoint ] && want checkpoint && [ "$NP" -ge 2 ]; then
  if ! has_cap RESHARD; then
    skip checkpoint.reshard "the plugin does not declare LOOM_CKPT_CAP_RESHARD"
  else
    rm -rf "$WORK/rs"; mkdir -p "$WORK/rs"
    cs="{\"plugin\":$PJ$OPTS,\"dir\":$(json_path "$WORK/rs/ckpt"),\"every\":3,\"keep\":0}"
    job 2 rs2 --set 'parallel=[{"plugin":"zero1"}]' --set train.micro_batch_size=$(mb 2 1) \
      --set train.steps=3 --set "checkpoint=$cs"
    if timeout 300 mpirun -np 1 --bind-to none "$LOOM" train "$WORK/base.json" \
         --set 'parallel=[]' --set "checkpoint=$cs" --set "logging.metrics=$WORK/rs/metrics.jsonl" \
         >"$WORK/rs/out.log" 2>&1 && grep -q "resumed at step 3" "$WORK/rs/out.log"; then
      reference
      if python3 - "$WORK/rs/metrics.jsonl" "$WORK/ref/metrics.jsonl" "$RTOL" <<'EOF'
import json, sys
def m(p): return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r and r["step"] >= 4}
a, b, t = m(sys.argv[1]), m(sys.argv[2]), float(sys.argv[3])
sys.exit(0 if a and all(abs(a[s] - b[s]) <= t * abs(b[s]) for s in a) else 1)
EOF
      then pass checkpoint.reshard "saved by zero1 on 2 ranks (sharded optimizer state), resumed on 1: steps 4-6 match the 1-rank run within $RTOL"
      else fail checkpoint.reshard "saved on 2 ranks, resumed on 1: steps 4-6 differ from the 1-rank run: the chunks were not reassembled at their offsets"; fi
    else
      fail checkpoint.reshard "the resume on 1 rank of a 2-rank checkpoint failed: $(last_error rs)"
    fi
  fi
fi

# checkpoint: save under tensor parallel 2, load on 1 rank (LOOM_CKPT_CAP_GLOBAL_VIEW, ABI 1.4:
# each tp rank's chunks are slices of global tensors, and the load reassembles them)
if [ "$KIND" = checkpoint ] && want checkpoint && [ "$NP" -ge 2 ]; then
  if ! has_cap GLOBAL_VIEW; then
    skip checkpoint.global_view "the plugin does not declare LOOM_CKPT_CAP_GLOBAL_VIEW"
  else
    rm -rf "$WORK/gv"; mkdir -p "$WORK/gv"
    cs="{\"plugin\":$PJ$OPTS,\"dir\":$(json_path "$WORK/gv/ckpt"),\"every\":3,\"keep\":0}"
    job 2 gv2 --set 'parallel=[{"plugin":"tensor_parallel","size":2}]' \
      --set train.micro_batch_size=$(mb 1 1) --set train.steps=3 --set "checkpoint=$cs"
    if timeout 300 mpirun -np 1 --bind-to none "$LOOM" train "$WORK/base.json" \
         --set 'parallel=[]' --set "checkpoint=$cs" --set "logging.metrics=$WORK/gv/metrics.jsonl" \
         >"$WORK/gv/out.log" 2>&1 && grep -q "resumed at step 3" "$WORK/gv/out.log"; then
      reference
      if python3 - "$WORK/gv/metrics.jsonl" "$WORK/ref/metrics.jsonl" "$RTOL" <<'EOF'
import json, sys
def m(p): return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r and r["step"] >= 4}
a, b, t = m(sys.argv[1]), m(sys.argv[2]), float(sys.argv[3])
sys.exit(0 if a and all(abs(a[s] - b[s]) <= t * abs(b[s]) for s in a) else 1)
EOF
      then pass checkpoint.global_view "saved under tp 2 (tensor slices), resumed on 1 rank: steps 4-6 match the 1-rank run within $RTOL"
      else fail checkpoint.global_view "saved under tp 2, resumed on 1 rank: steps 4-6 differ from the 1-rank run: the slices were not reassembled into their tensors"; fi
    else
      fail checkpoint.global_view "the resume on 1 rank of a tp 2 checkpoint failed: $(last_error gv)"
    fi
  fi
fi

# ---------------------------------------------------------------- faults
# A rank failing inside each hook the plugin implements: the probe, listed before the plugin,
# fails on rank 1 at step 2 in that hook; rank 0 goes on into the plugin's hook (and its
# collective). The job must end non-zero within LIMIT seconds with the failing rank's message.
LIMIT=30
fault_job() { # fault_job NAME LIMIT_ARGS...: run in the background, assert a prompt failure
  local name=$1 hook=$2
  shift 2
  rm -rf "${WORK:?}/$name"; mkdir -p "$WORK/$name"
  local t0=$SECONDS
  timeout 120 mpirun -np 2 --bind-to none "$LOOM" train "$WORK/base.json" --set checkpoint=null \
    --set train.steps=50 "$@" >"$WORK/$name/out.log" 2>&1 &
  local pid=$! rc
  while kill -0 $pid 2>/dev/null && [ $((SECONDS - t0)) -lt $LIMIT ]; do sleep 0.2; done
  if kill -0 $pid 2>/dev/null; then
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    fail "faults.$hook" "rank 1 failed in $at at step 2, the job still ran ${LIMIT}s later (a rank waits forever in a collective: every wait must end when a peer fails)"
    return
  fi
  wait $pid; rc=$?
  local dt=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then fail "faults.$hook" "rank 1 failed in $hook, but the job exited 0"
  elif ! grep -q "$FAULT_MSG" "$WORK/$name/out.log"; then
    fail "faults.$hook" "the job ended ($rc, ${dt}s) without the failing rank's message '$FAULT_MSG'"
  else pass "faults.$hook" "ended in ${dt}s, exit $rc, rank 1 said: $(grep -m1 -o "$FAULT_MSG.*" "$WORK/$name/out.log" | cut -c1-120)"; fi
}
fault_probe() { echo "{\"plugin\":$(json_path "$LOOM_CONF_PROBE"),\"fail_hook\":\"$1\",\"fail_rank\":1,\"fail_step\":2}"; }

if want faults && [ "$NP" -ge 2 ]; then
  case $KIND in
    parallel)
      if has_cap AXIS_TP || has_cap AXIS_PP; then E="{\"plugin\":$PJ$OPTS,\"size\":2}"; has_cap AXIS_PP && A=2 || A=1; M=$(mb 1 $A)
      elif has_cap GRAD_SYNC; then E="{\"plugin\":$PJ$OPTS}"; A=1; M=$(mb 2 1)
      else E="{\"plugin\":\"ddp\"},{\"plugin\":$PJ$OPTS}"; A=1; M=$(mb 2 1); fi
      for hook in $HOOKS; do
        case $hook in
          state_items) skip faults.state_items "called only while saving a checkpoint (covered by the checkpoint plugin's own faults)"; continue ;;
          region) at=pre_forward ;; run_step) at=begin_micro ;; optimizer_step) at=grad_norm_sq ;;
          *) at=$hook ;;
        esac
        FAULT_MSG="conformance fault injected in $at"
        fault_job "fault_$hook" "$hook" --set train.micro_batch_size=$M --set train.grad_accum_steps=$A \
          --set "parallel=[$(fault_probe "$at"),$E$WITH_ENTRIES]"
      done ;;
    comm|precision|checkpoint)
      FAULT_MSG="fault injected by LOOM_FAULT"
      extra=()
      [ "$KIND" = comm ] && extra=(--set "comm={\"plugin\":$PJ$OPTS}")
      [ "$KIND" = precision ] && extra=(--set "precision={\"plugin\":$PJ$OPTS}")
      LOOM_FAULT=1:2:error fault_job fault_rank_error rank_error --set 'parallel=[{"plugin":"ddp"}]' \
        --set train.micro_batch_size=$(mb 2 1) "${extra[@]}" ;;
  esac
fi

# ---------------------------------------------------------------- comm
if [ "$KIND" = comm ] && want comm && [ "$NP" -ge 2 ]; then
  for n in 2 3; do
    [ "$n" -le "$NP" ] || continue
    if job "$n" comm$n --set "comm={\"plugin\":$PJ$OPTS}" --set train.steps=1 --set lr_schedule.warmup_steps=0 \
         --set train.micro_batch_size=$(mb "$n" 1) \
         --set "parallel=[{\"plugin\":\"ddp\"},{\"plugin\":$(json_path "$LOOM_CONF_PROBE"),\"comm_selftest\":true}]"; then
      k=$(grep -c "comm self-test: .* checks passed on the world" "$WORK/comm$n/out.log")
      kd=$(grep -c "comm self-test: .* checks passed on the data-parallel" "$WORK/comm$n/out.log")
      pass comm.collectives.np$n "$k/$n ranks on the world communicator, $kd/$n on the data-parallel one: $(grep -m1 "checks passed on the world" "$WORK/comm$n/out.log" | sed 's/.*comm self-test: //') (all_reduce sum/max/min, reduce_scatter(_v), all_gather(_v) in and out of place, broadcast, ring send/recv; 0..100003 elements, zero-count ranks, requests completed out of order)"
    else
      fail comm.collectives.np$n "$(grep -m1 "comm self-test" "$WORK/comm$n/out.log" | cut -c1-400)$(last_error comm$n)"
    fi
  done
  # point to point (comm_v1.h): 16 MB messages, so a send completes only once its receive is
  # matched. A plugin that blocks in a non-blocking send, or waits posted operations in posting
  # order, hangs: the job is killed after LOOM_CONF_P2P_TIMEOUT seconds (a healthy 3-rank job
  # ends in ~10 s on 2 cores) and the check names the case that was running.
  P2P_T=${LOOM_CONF_P2P_TIMEOUT:-120}
  for n in 2 3; do
    [ "$n" -le "$NP" ] || continue
    JOB_TIMEOUT=$P2P_T job "$n" p2p$n --set "comm={\"plugin\":$PJ$OPTS}" --set train.steps=1 \
      --set lr_schedule.warmup_steps=0 --set train.micro_batch_size=$(mb "$n" 1) \
      --set "parallel=[{\"plugin\":\"ddp\"},{\"plugin\":$(json_path "$LOOM_CONF_PROBE"),\"comm_p2p\":true}]"
    rc=$?
    log=$WORK/p2p$n/out.log
    case_=$(grep "comm p2p: case" "$log" | tail -1 | sed 's/.*comm p2p: case //')
    if [ $rc -eq 0 ] && grep -q "comm p2p: .* checks passed" "$log"; then
      pass comm.p2p.np$n "$(grep -c "comm p2p: .* checks passed" "$log")/$n ranks: ring recv, recv, send, send; two tags swapped; 1F1B send then blocking recv both ways (16 MB messages, waited in any order)"
    elif [ $rc -eq 124 ]; then
      fail comm.p2p.np$n "no end within ${P2P_T}s: deadlocked in case ${case_:-?}: a non-blocking send or receive must progress without waiting for the other operations posted with it, whatever their order or size (comm_v1.h: point to point)"
    else
      fail comm.p2p.np$n "$(grep -m1 "comm self-test" "$log" | cut -c1-400)$(last_error p2p$n)"
    fi
  done
  reference
  if job 2 comm_ddp --set "comm={\"plugin\":$PJ$OPTS}" --set 'parallel=[{"plugin":"ddp"}]' \
       --set train.micro_batch_size=$(mb 2 1); then
    equiv comm_ddp comm.equivalence "ddp on 2 ranks over this comm"
  else
    fail comm.equivalence "ddp on 2 ranks over this comm failed: $(last_error comm_ddp)"
  fi
fi

# ---------------------------------------------------------------- precision
# The reference is the plugin's own 1-rank run: what is checked is that the plugin is right on
# several ranks (its rounding points are its own business). Tolerance: --rtol (fp32: 1e-5; a
# 16-bit plugin passes its derived bound, bf16's is 1e-2 in loom's equivalence_bf16).
if [ "$KIND" = precision ] && want precision && [ "$NP" -ge 2 ]; then
  PREC="precision={\"plugin\":$PJ$OPTS}"
  if ! job 1 prec_ref --set "$PREC" --set 'parallel=[]'; then
    fail precision.equivalence "the 1-rank run with this precision failed: $(last_error prec_ref)"
  elif job 2 prec --set "$PREC" --set train.micro_batch_size=$(mb 2 1) \
       --set "parallel=[{\"plugin\":\"ddp\"},$(probe_rec prec)]"; then
    if cmp_runs prec prec_ref --rtol "$RTOL"; then
      pass precision.equivalence "ddp on 2 ranks vs 1 rank, both with this precision: $(cmp_summary prec prec_ref)"
    else
      fail precision.equivalence "ddp on 2 ranks vs 1 rank with this precision, beyond rtol $RTOL: $(cmp_summary prec prec_ref)"
    fi
    if msg=$(replicas prec); then pass precision.replicas_agree "$msg"; else fail precision.replicas_agree "$(said "$msg")"; fi
    scales=$(python3 -c "
import json
v=[r.get('loss_scale') for r in map(json.loads, open('$WORK/prec/metrics.jsonl')) if 'loss' in r]
print(' '.join(sorted({str(x) for x in v if x not in (None, 1, 1.0)})))")
    if [ -z "$scales" ]; then
      skip precision.loss_scale "the plugin does not scale the loss (loss_scale 1 at every step): the skip-agreement and scaler round-trip checks apply to loss-scaling plugins"
    else
      # an infinity in rank 1's gradient at step 3 (after the sync: only rank 1 sees it): every
      # rank must skip step 3 (rank 0's metrics say so) and the replicas stay identical
      LOOM_INJECT_INF=1:3 job 2 prec_inf --set "$PREC" --set train.micro_batch_size=$(mb 2 1) \
        --set "parallel=[{\"plugin\":\"ddp\"},$(probe_rec prec_inf)]"
      rc=$?
      if ! grep -q "LOOM_INJECT_INF" "$WORK/prec_inf/out.log"; then
        skip precision.skip_agreed "this loom cannot inject an infinity (LOOM_INJECT_INF)"
      elif [ $rc -ne 0 ]; then
        fail precision.skip_agreed "an infinity on rank 1 at step 3 ended the run: $(last_error prec_inf)"
      elif ! python3 -c "
import json,sys
r=[x for x in map(json.loads, open('$WORK/prec_inf/metrics.jsonl')) if x.get('step') == 3 and 'loss' in x]
sys.exit(0 if r and r[0].get('skipped') else 1)"; then
        fail precision.skip_agreed "an infinity on rank 1 at step 3 was not skipped on rank 0: the overflow flag must be agreed over all ranks (all_reduce MAX) before deciding"
      elif ! msg=$(PARAMS_ONLY=1 replicas prec_inf); then
        fail precision.skip_agreed "after an infinity on rank 1 at step 3: $(fact "$msg")"
      else
        pass precision.skip_agreed "an infinity on rank 1 at step 3: skipped on every rank, replicas identical; loss scales seen: $scales"
      fi
      # the scaler's state continues bitwise through a checkpoint
      resume_check precision.scaler_resume 2 '[{"plugin":"ddp"}]' 1 '"checkpoint"' \
        --set train.micro_batch_size=$(mb 2 1) --set "$PREC"
      if python3 -c "
import json,sys
def m(p): return [r.get('loss_scale') for r in map(json.loads, open(p)) if 'loss' in r and r['step'] >= 4]
sys.exit(0 if m('$WORK/resumed/metrics.jsonl') == m('$WORK/straight/metrics.jsonl') else 1)"; then
        pass precision.loss_scale "the loss scale of steps 4-6 after a restart at 3 equals the straight run's"
      else
        fail precision.loss_scale "the loss scale after a restart differs from the straight run's: the scaler state (state_json / load_state_json) does not round-trip"
      fi
    fi
  else
    fail precision.equivalence "the 2-rank run failed: $(last_error prec)"
  fi
fi

# ---------------------------------------------------------------- device
if [ "$KIND" = device ]; then
  skip device.suite "this loom runs its built-in CPU device; device plugins are not loaded by this host yet (the device suite lands with the CUDA backend)"
fi

summary
