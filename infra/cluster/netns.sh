#!/usr/bin/env bash
# Several hosts on one machine, for the multi-host test: network namespaces with their
# own addresses on a bridge (veth pairs), and a private directory per host.
#   infra/cluster/netns.sh up              create the bridge and the hosts (idempotent)
#   infra/cluster/netns.sh down            remove them (kill what still runs in them first)
#   infra/cluster/netns.sh exec HOST CMD.. run CMD on HOST (its network, its private dirs)
#   infra/cluster/netns.sh addr HOST       print HOST's address
#   infra/cluster/netns.sh pids HOST       every process running on HOST
#   infra/cluster/netns.sh status
#   infra/cluster/netns.sh cut HOST [PEER[:PORT,..]]  a partition: HOST's link down, or only
#                                          its traffic with PEER (on those ports) dropped
#   infra/cluster/netns.sh heal HOST       undo every cut of HOST
#   infra/cluster/netns.sh dockerd HOST start|stop|sock   a Docker daemon of HOST's own
#
# A command run on a host sees its own loopback and address, the others' addresses over
# the bridge, and the root namespace at the gateway address. Its file system is the
# machine's, except: /tmp, $RATCHET_HOME/artifacts and the S3 download cache
# $RATCHET_HOME/cache/s3 are the host's own (tmp/, artifacts/ and s3-cache/ in its directory), and of $RATCHET_NETNS_DIR it sees only its own directory.
# So a file written on one host by a path that should have gone through the artifact
# store is not there on another.
# dockerd: the machine's stays in the root namespace; `dockerd HOST start` gives a host a
# daemon of its own (its own data root, containers and socket), so a rollout host sees
# only its own sandboxes, as on separate machines.
source "$(dirname "$0")/../lib.sh"

HOSTS=(control rollout-a rollout-b inference trainer)
PREFIX="${RATCHET_NETNS_PREFIX:-ratchet-}"
BRIDGE="${RATCHET_NETNS_BRIDGE:-rtbr0}"
SUBNET="${RATCHET_NETNS_SUBNET:-10.77.0}"
GATEWAY="$SUBNET.1"
HOSTS_DIR="${RATCHET_NETNS_DIR:-$RATCHET_HOME/hosts}"
# Another set of hosts beside these (a second test): other RATCHET_NETNS_PREFIX, _BRIDGE,
# _SUBNET, _VETH and _DIR.

host_index() {
  local i
  for i in "${!HOSTS[@]}"; do [ "${HOSTS[$i]}" = "$1" ] && { echo "$i"; return 0; }; done
  die "unknown host \"$1\". Fix: use one of: ${HOSTS[*]}"
}
addr() { echo "$SUBNET.$((10 + $(host_index "$1")))"; }
ns() { host_index "$1" >/dev/null; echo "$PREFIX$1"; }
# Interface names are at most 15 characters: the veth's root end is named by index.
VETH_PREFIX="${RATCHET_NETNS_VETH:-rtv}"
veth() { echo "$VETH_PREFIX$(host_index "$1")"; }

up() {
  [ "$(id -u)" = 0 ] || die "network namespaces need root. Fix: sudo bash infra/cluster/netns.sh up"
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add "$GATEWAY/24" dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up
  # dockerd sets the FORWARD policy to DROP; with br_netfilter loaded that would drop
  # traffic between two hosts on this bridge too.
  if command -v iptables >/dev/null && ! iptables -C FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null; then
    iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null || true
  fi
  for h in "${HOSTS[@]}"; do
    local n v; n=$(ns "$h"); v=$(veth "$h")
    mkdir -p "$HOSTS_DIR/$h"
    if ! ip netns list | grep -qw "$n"; then ip netns add "$n"; fi
    if ! ip link show "$v" >/dev/null 2>&1; then
      ip link add "$v" type veth peer name eth0 netns "$n"
      ip link set "$v" master "$BRIDGE" up
      ip -n "$n" addr add "$(addr "$h")/24" dev eth0
      ip -n "$n" link set eth0 up
      ip -n "$n" link set lo up
      ip -n "$n" route add default via "$GATEWAY"
    fi
  done
  log "hosts up on $BRIDGE ($GATEWAY/24): $(for h in "${HOSTS[@]}"; do printf '%s=%s ' "$h" "$(addr "$h")"; done)"
}

down() {
  for h in "${HOSTS[@]}"; do
    local n; n=$(ns "$h")
    kill_cgroup "$h"
    if ip netns list | grep -qw "$n"; then
      local pids; pids=$(ip netns pids "$n" 2>/dev/null || true)
      # shellcheck disable=SC2086
      [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
      ip netns del "$n"
    fi
    unmount_under "$HOSTS_DIR/$h/docker"
    ip link del "$(veth "$h")" 2>/dev/null || true
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null || true
    ip link del "$BRIDGE"
  fi
  log "hosts down"
}

# The top-level /tmp directories that hold any of the given paths ("/tmp/x" for /tmp/x/y/z).
tmp_tops() {
  local p
  for p in "$@"; do
    p=$(realpath -m "$p")
    case "$p" in /tmp/?*) p=${p#/tmp/}; echo "/tmp/${p%%/*}" ;; esac
  done | sort -u | tr '\n' ' '
}

# exec HOST CMD... : in the host's network namespace and a mount namespace of its own.
run_on() {
  local h="$1"; shift
  [ $# -gt 0 ] || die "usage: infra/cluster/netns.sh exec HOST CMD..."
  local n; n=$(ns "$h")
  ip netns list | grep -qw "$n" || die "host $h is not up. Fix: bash infra/cluster/netns.sh up"
  local own="$HOSTS_DIR/$h"
  mkdir -p "$own" "$RATCHET_HOME/artifacts" "$RATCHET_HOME/cache/s3"
  mkdir -p "$own/tmp" "$own/artifacts" "$own/s3-cache"; chmod 1777 "$own/tmp"
  # The mounts live only in this command's mount namespace and go with its last process.
  # Every command on one host binds the same directories, so they share /tmp as on one machine.
  # The caller's TMPDIR is dropped: it names a directory in this machine's /tmp (npm test gives its
  # suites one), which the host's private /tmp does not have.
  exec ip netns exec "$n" unshare --mount --propagation private -- bash -c '
    set -e
    own=$1 hosts=$2 artifacts=$3 s3cache=$4 carry=$5; shift 5
    keep=$(mktemp -d /run/ratchet-host.XXXXXX)
    mount --bind "$own" "$keep"
    mount -t tmpfs -o size=64k,mode=755 hosts "$hosts"
    mkdir -p "$own"
    mount --move "$keep" "$own"
    rmdir "$keep"
    # The checkout and RATCHET_HOME stay at their paths when they live under /tmp (a CI
    # clone): their trees, mounts included, are carried across the private /tmp.
    carried=""
    for d in $carry; do
      k=$(mktemp -d /run/ratchet-carry.XXXXXX); mount --rbind "$d" "$k"; carried="$carried $d=$k"
    done
    mount --bind "$own/tmp" /tmp
    for dk in $carried; do
      d=${dk%%=*} k=${dk#*=}; mkdir -p "$d"; mount --move "$k" "$d"; rmdir "$k"
    done
    mount --bind "$own/artifacts" "$artifacts"
    mount --bind "$own/s3-cache" "$s3cache"
    exec "$@"
  ' ratchet-host "$own" "$HOSTS_DIR" "$RATCHET_HOME/artifacts" "$RATCHET_HOME/cache/s3" \
    "$(tmp_tops "$RATCHET_ROOT" "$RATCHET_HOME" "$HOSTS_DIR")" \
    env -u TMPDIR RATCHET_HOST_NAME="$h" RATCHET_HOST_DIR="$own" "$@"
}

status() {
  for h in "${HOSTS[@]}"; do
    local n; n=$(ns "$h")
    if ip netns list | grep -qw "$n"; then
      printf '%-10s %-12s up   %s processes\n' "$h" "$(addr "$h")" "$(ip netns pids "$n" 2>/dev/null | wc -l)"
    else
      printf '%-10s %-12s down\n' "$h" "$(addr "$h")"
    fi
  done
}

# cut HOST [PEER[:PORTS]]: with no PEER the host's cable is pulled (its veth's root end
# goes down: no packet in or out, connections hang rather than being refused). With a
# PEER, iptables DROP inside HOST's namespace, both directions, optionally only on the
# given TCP ports of PEER (a host cut off from one service of a host, e.g. the Temporal
# server but not the S3 store on the control host). `heal` restores both kinds.
CUT_CHAIN=RATCHET-CUT
cut_host() {
  local h="$1" peer="${2:-}"
  local n; n=$(ns "$h")
  if [ -z "$peer" ]; then
    ip link set "$(veth "$h")" down
    log "cut: $h's link is down"
    return 0
  fi
  local p="${peer%%:*}" ports=""
  [ "$p" != "$peer" ] && ports="${peer#*:}"
  local a; a=$(addr "$p")
  ip netns exec "$n" iptables -N "$CUT_CHAIN" 2>/dev/null || true
  ip netns exec "$n" iptables -C OUTPUT -j "$CUT_CHAIN" 2>/dev/null || ip netns exec "$n" iptables -I OUTPUT -j "$CUT_CHAIN"
  ip netns exec "$n" iptables -C INPUT -j "$CUT_CHAIN" 2>/dev/null || ip netns exec "$n" iptables -I INPUT -j "$CUT_CHAIN"
  if [ -n "$ports" ]; then
    ip netns exec "$n" iptables -A "$CUT_CHAIN" -d "$a" -p tcp -m multiport --dports "$ports" -j DROP
    ip netns exec "$n" iptables -A "$CUT_CHAIN" -s "$a" -p tcp -m multiport --sports "$ports" -j DROP
  else
    ip netns exec "$n" iptables -A "$CUT_CHAIN" -d "$a" -j DROP
    ip netns exec "$n" iptables -A "$CUT_CHAIN" -s "$a" -j DROP
  fi
  log "cut: $h <-> $p${ports:+ (tcp $ports)}"
}

heal_host() {
  local h="$1"
  local n; n=$(ns "$h")
  ip link set "$(veth "$h")" up
  ip netns exec "$n" iptables -F "$CUT_CHAIN" 2>/dev/null || true
  log "healed: $h"
}

# A Docker daemon of the host's own: started on the host (its network namespace, its
# private dirs), state under the host's directory, no bridge and no iptables rules
# (sandboxes run with no network). Containers go into the cgroup ratchet-<host>, so
# the test can kill them with the host (a container has a network namespace of its
# own: `pids HOST` does not list it). The sandbox image comes from the machine's daemon
# through a `docker save` cached under $RATCHET_HOME/cache/.
docker_sock() { echo "$HOSTS_DIR/$1/docker/docker.sock"; }
host_dockerd() {
  local h="$1" verb="$2"
  local d="$HOSTS_DIR/$h/docker" sock; sock=$(docker_sock "$h")
  case "$verb" in
    sock) echo "$sock" ;;
    start)
      mkdir -p "$d/data" "$d/exec"
      if ! DOCKER_HOST="unix://$sock" docker info >/dev/null 2>&1; then
        # Only the host's network namespace (nsenter, not `exec`): `ip netns exec` remounts /sys,
        # which hides the cgroup mounts dockerd needs. setsid so it outlives this script.
        setsid nsenter --net="/var/run/netns/$(ns "$h")" dockerd --data-root "$d/data" --exec-root "$d/exec" --pidfile "$d/dockerd.pid" \
          -H "unix://$sock" --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
          --cgroup-parent "ratchet-$h" --userland-proxy=false >"$d/dockerd.log" 2>&1 </dev/null &
        for _ in $(seq 1 60); do DOCKER_HOST="unix://$sock" docker info >/dev/null 2>&1 && break; sleep 1; done
        DOCKER_HOST="unix://$sock" docker info >/dev/null 2>&1 || die "$h's dockerd did not start in 60 s. See $d/dockerd.log"
      fi
      local tag; tag=$(cat "$RATCHET_HOME/sandbox-image" 2>/dev/null) || die "no sandbox image recorded. Fix: bash infra/docker.sh"
      if ! DOCKER_HOST="unix://$sock" docker image inspect "$tag" >/dev/null 2>&1; then
        local id; id=$(docker image inspect -f '{{.Id}}' "$tag" | sed 's/^sha256://' | cut -c1-16)
        local tar="$RATCHET_HOME/cache/sandbox-image-$id.tar"
        if [ ! -s "$tar" ]; then
          mkdir -p "$RATCHET_HOME/cache"
          docker save -o "$tar.tmp" "$tag" "${tag%%:*}:latest" && mv "$tar.tmp" "$tar"
        fi
        DOCKER_HOST="unix://$sock" docker load -q -i "$tar" >/dev/null
      fi
      log "$h's dockerd up at $sock with $tag"
      ;;
    stop)
      local pid; pid=$(cat "$d/dockerd.pid" 2>/dev/null || true)
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid"; for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        kill -9 "$pid" 2>/dev/null || true
      fi
      kill_cgroup "$h"
      unmount_under "$d"
      ;;
    *) die "usage: infra/cluster/netns.sh dockerd HOST start|stop|sock" ;;
  esac
}

# A host dockerd killed with -9 leaves its overlay and netns mounts: lazily unmounted, deepest first.
unmount_under() {
  local m d
  # /proc/mounts names the resolved path ($RATCHET_HOME may be a symlink, as in a worktree).
  d=$(realpath -m "$1")
  awk -v d="$d/" -v e="$d" '$2 == e || index($2, d) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

# Every process in the host's containers' cgroup (a host that lost power loses its sandboxes too).
kill_cgroup() {
  local f
  for f in /sys/fs/cgroup/*/"ratchet-$1"/*/cgroup.procs /sys/fs/cgroup/"ratchet-$1"/*/cgroup.procs; do
    [ -f "$f" ] || continue
    # shellcheck disable=SC2046
    kill -9 $(cat "$f") 2>/dev/null || true
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  exec) shift; run_on "$@" ;;
  addr) addr "${2:?host}" ;;
  pids) ip netns pids "$(ns "${2:?host}")" ;;
  status) status ;;
  hosts) echo "${HOSTS[*]}" ;;
  cut) cut_host "${2:?host}" "${3:-}" ;;
  heal) heal_host "${2:?host}" ;;
  dockerd) host_dockerd "${2:?host}" "${3:?start|stop|sock}" ;;
  kill-sandboxes) kill_cgroup "${2:?host}" ;;
  *) die "usage: infra/cluster/netns.sh up|down|exec HOST CMD..|addr HOST|pids HOST|status|hosts|cut HOST [PEER[:PORTS]]|heal HOST|dockerd HOST start|stop|sock" ;;
esac
