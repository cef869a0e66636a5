#!/bin/bash
# A multi-node test bed on one machine (root): N "nodes", each its own network, UTS and mount
# namespace (its own hostname, /dev/shm and /etc/hosts), joined by veth pairs to a bridge that
# lives in a namespace of the bed's own. Nothing is added to the root namespace: no link, no
# route, no address; the bed's addresses (169.254.ID.K/24, link-local) exist only inside it.
# Open MPI started in node 1 with `--hostfile $(nodes.sh hostfile ID)` and
# `--mca plm_rsh_agent "nodes.sh rsh"` launches its daemons on the other nodes through this
# script instead of ssh, and sees each node as a separate machine: no shared memory between
# nodes, every byte between them crosses a veth (whose counters `bytes` reads).
#
#   nodes.sh new-id              reserve a free bed id (1-254) and print it: concurrent beds
#                                (ctest -j, other helpers) never share names or addresses
#   nodes.sh up ID N             build bed ID with N nodes (2-4); reserves ID if not reserved
#   nodes.sh down ID             tear it down: every process of its nodes, namespaces, links
#   nodes.sh hostfile ID         print the path of its hostfile (each node: slots=2)
#   nodes.sh host ID K           print node K's hostname
#   nodes.sh rsh HOST CMD...     the rsh agent: run CMD (one shell string, as ssh would) in HOST
#   nodes.sh exec ID K CMD...    run CMD in node K (mpirun itself runs in node 1)
#   nodes.sh mpirun ID ARGS...   mpirun in node 1 over the whole bed (hostfile, agent, the bed
#                                interface only), two ranks per node by slot; another hostfile:
#                                LOOM_NODES_HOSTFILE=FILE
#   nodes.sh bytes ID            one line per node: K tx_bytes rx_bytes of its bed link
#   nodes.sh limit ID RATE [DELAY]  tbf rate limit on every node's link, both directions
#                                (e.g. 1gbit); DELAY (e.g. 1ms) needs the kernel's sch_netem;
#                                RATE off: the links unlimited again
#   nodes.sh kill ID K [--cut]   SIGKILL every process of node K (the node's holder too: it
#                                no longer answers); --cut first takes its link down (a power
#                                cut: peers get no FIN/RST)
#   nodes.sh gc                  tear down beds whose owner process died (LOOM_BED_OWNER, else
#                                the shell that ran `up`, or that ran `$(nodes.sh new-id)`)
#   nodes.sh check               exit 0 if beds can be built here, else 77 with the reason
#
# Names: bed ID's node K is netns loom<ID>n<K>, hostname loom<ID>-n<K>, address 169.254.ID.K;
# its link is `bed0` inside the node and `n<K>` on the bridge `br0` in netns loom<ID>br. State
# (holder pids, hosts file, hostfile, owner) lives in $LOOM_NODES_RUN/ID (/run/loom-nodes).
# Exit codes: 0 done, 1 failed (a message on stderr names what), 2 usage, 77 not possible here.
set -u
RUN_DIR=${LOOM_NODES_RUN:-/run/loom-nodes}
SELF=$(readlink -f "$0")
IFACE=bed0

die() { echo "nodes.sh: $*" >&2; exit 1; }
usage() { sed -n '/^#   nodes.sh new-id/,/^#$/p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 2; }
node_ns() { echo "loom$1n$2"; }
bridge_ns() { echo "loom$1br"; }
node_host() { echo "loom$1-n$2"; }
node_addr() { echo "169.254.$1.$2"; }
subnet() { echo "169.254.$1.0/24"; }

check_id() {
  [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 254 ] ||
    die "bed id '$1': expected an integer 1-254 (it is the third octet of 169.254.ID.K)"
}
nodes_of() { cat "$RUN_DIR/$1/n" 2>/dev/null || echo 0; }

# Can beds be built here? Root, ip, nsenter, unshare, and a namespace that can be made.
can_build() {
  [ "$(id -u)" = 0 ] || { echo "not root (network namespaces need CAP_SYS_ADMIN)"; return 1; }
  local t
  for t in ip nsenter unshare tc; do
    command -v $t >/dev/null || { echo "no '$t' command"; return 1; }
  done
  local probe=loomprobe$$
  ip netns add $probe 2>/dev/null || { echo "cannot create a network namespace (ip netns add)"; return 1; }
  if ! ip -n $probe link add br0 type bridge 2>/dev/null ||
     ! ip -n $probe link add vprobe type veth peer name vpeer 2>/dev/null; then
    ip netns del $probe
    echo "no bridge or veth support in this kernel"
    return 1
  fi
  if ! ip netns exec $probe unshare --uts --mount true 2>/dev/null; then
    ip netns del $probe
    echo "cannot create UTS + mount namespaces (unshare)"
    return 1
  fi
  ip netns del $probe
}

# new-id: the lowest free id, reserved atomically (mkdir), after collecting dead beds. The
# owner: LOOM_BED_OWNER (a script's $$), else the caller's parent (`ID=$(nodes.sh new-id)` runs
# in a subshell that ends at once; its parent is the shell that uses the bed, or one above it).
new_id() {
  mkdir -p "$RUN_DIR"
  gc >/dev/null 2>&1
  local i owner=${LOOM_BED_OWNER:-$(ps -o ppid= -p "$PPID" | tr -d ' ')}
  for i in $(seq 1 254); do
    if mkdir "$RUN_DIR/$i" 2>/dev/null; then
      echo "$owner" >"$RUN_DIR/$i/owner"
      echo "$i"
      return 0
    fi
  done
  die "no free bed id (254 beds reserved in $RUN_DIR)"
}

# A node's holder: the process whose namespaces are the node's (nsenter -t). Alive and still
# in the node's network namespace (its inode, recorded by `up`: /run/netns inside another
# node's mount namespace lacks the nodes made after it), or the node does not answer.
holder_pid() { # ID K -> pid, or nothing
  local pid
  pid=$(cat "$RUN_DIR/$1/n$2.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -e "/proc/$pid/ns/net" ] || return 1
  [ "$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null)" = \
    "$(cat "$RUN_DIR/$1/n$2.netns" 2>/dev/null)" ] || return 1
  echo "$pid"
}

up() {
  local id=$1 n=$2
  check_id "$id"
  [[ "$n" =~ ^[2-4]$ ]] || die "up $id $n: expected 2-4 nodes"
  local why
  why=$(can_build) || { echo "nodes.sh: skipped: $why" >&2; exit 77; }
  mkdir -p "$RUN_DIR"
  if mkdir "$RUN_DIR/$id" 2>/dev/null; then
    echo "${LOOM_BED_OWNER:-$PPID}" >"$RUN_DIR/$id/owner"
  elif [ -e "$RUN_DIR/$id/n" ]; then
    die "bed $id is already up ($RUN_DIR/$id): 'nodes.sh down $id' first, or 'nodes.sh new-id'"
  fi
  local d=$RUN_DIR/$id br k ns
  br=$(bridge_ns "$id")
  echo "$n" >"$d/n"
  # from here a failure tears down what was built
  [ -n "${LOOM_NODES_DEBUG:-}" ] || trap 'down "$id" >/dev/null 2>&1' EXIT
  {
    echo "127.0.0.1 localhost"
    for k in $(seq 1 "$n"); do echo "$(node_addr "$id" "$k") $(node_host "$id" "$k")"; done
  } >"$d/hosts"
  for k in $(seq 1 "$n"); do echo "$(node_host "$id" "$k") slots=2"; done >"$d/hostfile"
  ip netns add "$br" || die "ip netns add $br failed"
  ip -n "$br" link add br0 type bridge forward_delay 0 || die "bridge in $br failed"
  ip -n "$br" link set br0 up
  for k in $(seq 1 "$n"); do
    ns=$(node_ns "$id" "$k")
    ip netns add "$ns" || die "ip netns add $ns failed"
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
      net.ipv6.conf.default.disable_ipv6=1 >/dev/null 2>&1 # no IPv6 chatter on the counters
    ip -n "$br" link add "n$k" type veth peer name "$IFACE" netns "$ns" ||
      die "veth n$k <-> $ns/$IFACE failed"
    ip -n "$br" link set "n$k" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$(node_addr "$id" "$k")/24" dev "$IFACE"
    ip -n "$ns" link set "$IFACE" up
    # the holder: its own hostname, /dev/shm and /etc/hosts for everything entered later
    setsid ip netns exec "$ns" unshare --uts --mount --propagation private sh -c "
      hostname $(node_host "$id" "$k") && mount -t tmpfs -o size=1g tmpfs /dev/shm &&
      mount --bind $d/hosts /etc/hosts && exec sleep infinity" </dev/null >/dev/null 2>&1 &
    echo $! >"$d/n$k.pid"
    stat -L -c %i "/run/netns/$ns" >"$d/n$k.netns"
  done
  # the holders are up when their hostname and /dev/shm are theirs
  local tries
  for k in $(seq 1 "$n"); do
    for tries in $(seq 1 100); do
      local pid
      pid=$(holder_pid "$id" "$k") &&
        [ "$(nsenter -t "$pid" -u hostname 2>/dev/null)" = "$(node_host "$id" "$k")" ] &&
        [ "$(readlink "/proc/$pid/exe")" = "$(readlink -f "$(command -v sleep)")" ] && break
      sleep 0.05
    done
    [ "$tries" -lt 100 ] || die "node $k of bed $id did not come up (its holder: hostname, /dev/shm mount)"
  done
  # node 1 reaches every other node over the bridge: a TCP connect to a closed port is refused
  # (an RST back) when the path works, and times out when it does not (no ping needed)
  for k in $(seq 2 "$n"); do
    ip netns exec "$(node_ns "$id" 1)" timeout 2 bash -c \
      "exec 3<>/dev/tcp/$(node_addr "$id" "$k")/9" 2>&1 | grep -q refused ||
      die "node 1 of bed $id cannot reach node $k ($(node_addr "$id" "$k"))"
  done
  trap - EXIT
  echo "bed $id: $n nodes $(node_host "$id" 1)..$(node_host "$id" "$n") on $(subnet "$id")"
}

# SIGKILL every process in network namespace $1 (a node's holder, orted, ranks), a few rounds:
# a fork racing one round is caught by the next
kill_ns() {
  local pids
  for _ in 1 2 3; do
    pids=$(ip netns pids "$1" 2>/dev/null)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null
    sleep 0.05
  done
}

down() {
  local id=$1 k ns
  check_id "$id"
  local n=4 # whatever was built: up to 4 nodes
  for k in $(seq 1 $n); do
    ns=$(node_ns "$id" "$k")
    [ -e "/run/netns/$ns" ] || continue
    kill_ns "$ns"
    ip netns del "$ns" 2>/dev/null
  done
  ip netns del "$(bridge_ns "$id")" 2>/dev/null
  rm -rf "${RUN_DIR:?}/$id"
  return 0
}

gc() {
  local d id owner
  for d in "$RUN_DIR"/*/; do
    [ -d "$d" ] || continue
    id=$(basename "$d")
    owner=$(cat "$d/owner" 2>/dev/null) || continue
    [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null && { echo "gc: bed $id (owner $owner gone)"; down "$id"; }
  done
  return 0
}

# rsh agent: HOST is loom<ID>-n<K>; CMD is what Open MPI would give ssh (one string or words).
rsh() {
  local host=$1
  shift
  [[ "$host" =~ ^loom([0-9]+)-n([0-9]+)$ ]] ||
    die "rsh: host '$host' is not a bed node (expected loom<ID>-n<K>, as 'nodes.sh hostfile' names them)"
  local id=${BASH_REMATCH[1]} k=${BASH_REMATCH[2]} pid
  [ -d "$RUN_DIR/$id" ] || die "rsh: node '$host': bed $id is not up"
  [ "$k" -ge 1 ] && [ "$k" -le "$(nodes_of "$id")" ] ||
    die "rsh: node '$host' does not exist (bed $id has $(nodes_of "$id") nodes)"
  pid=$(holder_pid "$id" "$k") || die "rsh: node '$host' does not answer (its processes were killed or it is down)"
  # a node whose link is cut (kill --cut) is unreachable, as a machine whose network is gone
  [ ! -e "$RUN_DIR/$id/n$k.cut" ] || die "rsh: node '$host' does not answer (its link is cut)"
  exec nsenter -t "$pid" -n -u -m --wd="$PWD" sh -c "$*"
}

node_exec() {
  local id=$1 k=$2 pid
  shift 2
  check_id "$id"
  pid=$(holder_pid "$id" "$k") || die "exec: node $k of bed $id does not answer (not up, or killed)"
  exec nsenter -t "$pid" -n -u -m --wd="$PWD" "$@"
}

bed_mpirun() {
  local id=$1
  shift
  check_id "$id"
  local n
  n=$(nodes_of "$id")
  [ "$n" -ge 2 ] || die "mpirun: bed $id is not up"
  # the bed's interface only, for the daemons' wire-up (oob) and the ranks' bytes (btl tcp);
  # shared memory (vader) stays for ranks of the same node: Open MPI knows they share a host
  node_exec "$id" 1 env OMPI_MCA_btl_tcp_if_include="$(subnet "$id")" \
    OMPI_MCA_oob_tcp_if_include="$(subnet "$id")" \
    mpirun --hostfile "${LOOM_NODES_HOSTFILE:-$RUN_DIR/$id/hostfile}" --mca plm_rsh_agent "$SELF rsh" \
    --mca btl_tcp_if_include "$(subnet "$id")" --mca oob_tcp_if_include "$(subnet "$id")" \
    --mca plm_rsh_no_tree_spawn 1 --map-by slot "$@"
}

bytes() {
  local id=$1 k ns
  check_id "$id"
  for k in $(seq 1 "$(nodes_of "$id")"); do
    ns=$(node_ns "$id" "$k")
    echo "$k $(ip netns exec "$ns" cat /sys/class/net/$IFACE/statistics/tx_bytes) $(ip netns exec "$ns" cat /sys/class/net/$IFACE/statistics/rx_bytes)"
  done
}

# tbf on both ends of every node's link: bed0's egress (what the node sends) and n<K>'s on the
# bridge (what it receives). burst: 1 ms at RATE (at least 64 KiB: one GSO super-packet).
limit() {
  local id=$1 rate=$2 delay=${3:-} k br
  check_id "$id"
  br=$(bridge_ns "$id")
  if [ "$rate" = off ]; then
    for k in $(seq 1 "$(nodes_of "$id")"); do
      tc -n "$(node_ns "$id" "$k")" qdisc del dev "$IFACE" root 2>/dev/null
      tc -n "$br" qdisc del dev "n$k" root 2>/dev/null
    done
    echo "bed $id: links unlimited"
    return 0
  fi
  local bits
  bits=$(tc_rate_bits "$rate") || die "limit: rate '$rate': expected e.g. 1gbit, 100mbit"
  local burst=$((bits / 8 / 1000))
  [ $burst -ge 65536 ] || burst=65536
  local netem=1
  if [ -n "$delay" ]; then
    ip -n "$br" link add nprobe type dummy 2>/dev/null
    tc -n "$br" qdisc add dev nprobe root netem delay "$delay" 2>/dev/null || netem=0
    ip -n "$br" link del nprobe 2>/dev/null
    [ $netem = 1 ] || echo "nodes.sh: limit: this kernel has no sch_netem ('tc qdisc ... netem' fails): delay $delay skipped, rate $rate only" >&2
  fi
  for k in $(seq 1 "$(nodes_of "$id")"); do
    local ns dev
    ns=$(node_ns "$id" "$k")
    for dev in "$ns:$IFACE" "$br:n$k"; do
      if [ -n "$delay" ] && [ $netem = 1 ]; then
        tc -n "${dev%%:*}" qdisc replace dev "${dev#*:}" root handle 1: netem delay "$delay" || die "netem on ${dev} failed"
        tc -n "${dev%%:*}" qdisc replace dev "${dev#*:}" parent 1:1 handle 10: tbf rate "$rate" burst $burst latency 100ms ||
          die "tbf on ${dev} failed"
      else
        tc -n "${dev%%:*}" qdisc replace dev "${dev#*:}" root tbf rate "$rate" burst $burst latency 100ms ||
          die "tbf on ${dev} failed"
      fi
    done
  done
  echo "bed $id: every link limited to $rate${delay:+$([ $netem = 1 ] && echo " + $delay delay")} each way"
}

tc_rate_bits() {
  local r=${1,,}
  [[ "$r" =~ ^([0-9]+)(gbit|mbit|kbit|bit)$ ]] || return 1
  local v=${BASH_REMATCH[1]}
  case ${BASH_REMATCH[2]} in
    gbit) echo $((v * 1000000000)) ;; mbit) echo $((v * 1000000)) ;;
    kbit) echo $((v * 1000)) ;; bit) echo "$v" ;;
  esac
}

node_kill() {
  local id=$1 k=$2 cut=${3:-} ns
  check_id "$id"
  ns=$(node_ns "$id" "$k")
  [ -e "/run/netns/$ns" ] || die "kill: node $k of bed $id does not exist"
  if [ "$cut" = --cut ]; then
    ip -n "$(bridge_ns "$id")" link set "n$k" down
    touch "$RUN_DIR/$id/n$k.cut"
  fi
  kill_ns "$ns"
  echo "bed $id: node $k killed${cut:+ (link cut)}"
}

[ $# -ge 1 ] || usage
cmd=$1
shift
case $cmd in
  new-id) new_id ;;
  up) [ $# = 2 ] || usage; up "$@" ;;
  down) [ $# = 1 ] || usage; down "$1" ;;
  hostfile) [ $# = 1 ] || usage; check_id "$1"; [ -e "$RUN_DIR/$1/hostfile" ] || die "bed $1 is not up"; echo "$RUN_DIR/$1/hostfile" ;;
  host) [ $# = 2 ] || usage; node_host "$1" "$2" ;;
  subnet) [ $# = 1 ] || usage; subnet "$1" ;;
  rsh) [ $# -ge 2 ] || usage; rsh "$@" ;;
  exec) [ $# -ge 3 ] || usage; node_exec "$@" ;;
  mpirun) [ $# -ge 1 ] || usage; bed_mpirun "$@" ;;
  bytes) [ $# = 1 ] || usage; bytes "$1" ;;
  limit) [ $# -ge 2 ] && [ $# -le 3 ] || usage; limit "$@" ;;
  kill) [ $# -ge 2 ] || usage; node_kill "$@" ;;
  gc) gc ;;
  check) why=$(can_build) || { echo "$why"; exit 77; } ;;
  *) usage ;;
esac
