#!/bin/bash
# ctest: labels=integration,multinode,matrix timeout=300
# A hostfile naming a node that does not answer is refused promptly, naming the node, and
# leaves no process behind in any node (ip netns pids: each live node holds only its holder):
#   - a node that does not exist (loom<ID>-n3 on a bed of 2 nodes);
#   - a node whose processes were all SIGKILLed (nodes.sh kill: what a dead machine looks like);
#   - a node whose link is cut before its processes are killed (nodes.sh kill --cut).
# Bounded: each refusal within 20 s (measured: under 2 s; ssh to a dead host would wait for its
# ConnectTimeout, the agent fails at once). Skips (77) where namespaces cannot be made.
. "$(dirname "$0")/../lib/lib.sh"
. "$TESTLIB/bed.sh"
bed_up 3
make_data

# only_holders K...: each listed node's processes are its holder alone; the others have none
only_holders() {
  local k ns pids holder
  for k in 1 2 3; do
    ns=loom${BED_ID}n$k
    pids=$(ip netns pids "$ns" | sort | tr '\n' ' ')
    holder=$(cat "/run/loom-nodes/$BED_ID/n$k.pid" 2>/dev/null)
    if [[ " $* " == *" $k "* ]]; then
      [ "$pids" = "$holder " ] || { ps -o pid,args -p "${pids// /,}0" >&2; die "node $k: processes left behind: $pids (holder $holder)"; }
    else
      [ -z "$pids" ] || { ps -o pid,args -p "${pids// /,}0" >&2; die "dead node $k: processes left: $pids"; }
    fi
  done
}

# refused_on HOSTFILE NEEDLE: a 4-rank run with that hostfile fails within 20 s naming NEEDLE
refused_on() {
  local hf=$1 needle=$2 t0 t1
  t0=$(date +%s.%N)
  LOOM_NODES_HOSTFILE=$hf expect_refused 4 "$needle" --set train.steps=3
  t1=$(date +%s.%N)
  /usr/bin/python3 -c "import sys; t = $t1 - $t0; print(f'refused in {t:.2f} s'); sys.exit(t > 20)" ||
    die "the refusal took more than 20 s"
}

n1=$("$NODES" host "$BED_ID" 1)
n2=$("$NODES" host "$BED_ID" 2)
n4=$("$NODES" host "$BED_ID" 4)
printf '%s slots=2\n%s slots=2\n' "$n1" "$n4" >"$WORK/missing.hosts"
refused_on "$WORK/missing.hosts" "node '$n4' does not exist"
only_holders 1 2 3

printf '%s slots=2\n%s slots=2\n' "$n1" "$n2" >"$WORK/two.hosts"
run 4 before_kill --set train.steps=2 # the bed works before the kill
"$NODES" kill "$BED_ID" 2
refused_on "$WORK/two.hosts" "node '$n2' does not answer"
only_holders 1 3

n3=$("$NODES" host "$BED_ID" 3)
printf '%s slots=2\n%s slots=2\n' "$n1" "$n3" >"$WORK/cut.hosts"
"$NODES" kill "$BED_ID" 3 --cut
refused_on "$WORK/cut.hosts" "node '$n3' does not answer"
only_holders 1
echo "ok: unanswering nodes refused promptly by name, nothing left behind"
