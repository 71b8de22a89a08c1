#!/usr/bin/env bash
# Starts and stops a local Redis Cluster (Debian's redis-server) on free 127.0.0.1 ports.
#   scripts/redis-cluster.sh start DIR [MASTERS=3] [REPLICAS_PER_MASTER=0]
#   scripts/redis-cluster.sh stop DIR
# `start` prints the redis:// URL as the last line of stdout. MASTERS=1 REPLICAS=0 starts one plain
# instance (no cluster mode). Every node lives in DIR/<port>/ (redis.conf, redis.pid, redis.log);
# `stop` stops exactly the processes whose pid files are in DIR and whose working directory is their
# node folder, and waits for them. Environment: KVTIER_REDIS_MAXMEMORY (e.g. 64mb),
# KVTIER_REDIS_POLICY (e.g. noeviction, allkeys-lru), KVTIER_REDIS_PASSWORD (requirepass/masterauth),
# KVTIER_REDIS_NODE_TIMEOUT_MS (default 1000).
set -euo pipefail

usage() { echo "usage: $0 start DIR [masters] [replicas] | stop DIR" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
CMD=$1
DIR=$2

node_pid() {  # prints the pid of the redis-server running in node folder $1, if any
  local d=$1 pf=$1/redis.pid pid
  [[ -f $pf ]] || return 1
  pid=$(cat "$pf" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" == "$(cd "$d" && pwd -P)" ]] || return 1
  grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

alive() {  # a process that exists and is not a zombie waiting to be reaped
  kill -0 "$1" 2>/dev/null || return 1
  [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]]
}

stop_all() {
  local pids=() d pid
  for d in "$DIR"/*/; do
    [[ -f $d/redis.conf ]] || continue
    pid=$(node_pid "${d%/}") && { kill "$pid" 2>/dev/null || true; pids+=("$pid"); }
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do alive "$pid" || break; sleep 0.05; done
    alive "$pid" && kill -9 "$pid" 2>/dev/null || true
    for _ in $(seq 100); do alive "$pid" || break; sleep 0.05; done
  done
  return 0
}

if [[ $CMD == stop ]]; then
  [[ -d $DIR ]] || exit 0
  stop_all
  exit 0
fi
[[ $CMD == start ]] || usage

MASTERS=${3:-3}
REPL=${4:-0}
command -v redis-server >/dev/null || { echo "redis-server is not installed (scripts/install-deps.sh)" >&2; exit 3; }
SINGLE=0
(( MASTERS == 1 && REPL == 0 )) && SINGLE=1
N=$(( MASTERS * (1 + REPL) ))
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd -P)
t0=$(date +%s.%N)

port_free() { ! ss -Htan 2>/dev/null | awk '{print $4}' | grep -qE ":$1\$"; }

write_conf() {  # node folder, port
  local d=$1 p=$2
  {
    echo "bind 127.0.0.1"
    echo "port $p"
    echo "protected-mode yes"
    echo "dir $d"
    echo "daemonize yes"
    echo "pidfile $d/redis.pid"
    echo "logfile $d/redis.log"
    echo "appendonly no"
    echo 'save ""'
    if (( SINGLE == 0 )); then
      echo "cluster-enabled yes"
      echo "cluster-config-file $d/nodes.conf"
      echo "cluster-node-timeout ${KVTIER_REDIS_NODE_TIMEOUT_MS:-1000}"
    fi
    [[ -n ${KVTIER_REDIS_MAXMEMORY:-} ]] && echo "maxmemory $KVTIER_REDIS_MAXMEMORY"
    [[ -n ${KVTIER_REDIS_POLICY:-} ]] && echo "maxmemory-policy $KVTIER_REDIS_POLICY"
    if [[ -n ${KVTIER_REDIS_PASSWORD:-} ]]; then
      echo "requirepass $KVTIER_REDIS_PASSWORD"
      echo "masterauth $KVTIER_REDIS_PASSWORD"
    fi
  } >"$d/redis.conf"
}

cli() { redis-cli -h 127.0.0.1 ${KVTIER_REDIS_PASSWORD:+--no-auth-warning -a "$KVTIER_REDIS_PASSWORD"} "$@"; }

# Starts one node on a free port (ports p and p+10000, the cluster bus, both unused); prints the port.
start_node() {
  local try p d
  for try in $(seq 50); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 20000 ))
    port_free "$p" && port_free $((p + 10000)) || continue
    d=$DIR/$p
    mkdir "$d" 2>/dev/null || continue
    write_conf "$d" "$p"
    redis-server "$d/redis.conf" >/dev/null 2>&1 || { rm -rf "$d"; continue; }
    for _ in $(seq 100); do
      cli -p "$p" ping 2>/dev/null | grep -q PONG && break
      sleep 0.05
    done
    if cli -p "$p" ping 2>/dev/null | grep -q PONG && node_pid "$d" >/dev/null; then
      echo "$p"; return 0
    fi
    pid=$(node_pid "$d") && kill "$pid" 2>/dev/null
    mv "$d" "$DIR/failed.$p.$try"
  done
  echo "could not start a redis-server" >&2
  return 1
}

ports=()
for _ in $(seq "$N"); do p=$(start_node) || { stop_all; exit 1; }; ports+=("$p"); done
addrs=()
for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done

if (( SINGLE == 0 )); then
  if ! cli --cluster create "${addrs[@]}" --cluster-replicas "$REPL" --cluster-yes </dev/null \
      >"$DIR/create.log" 2>&1; then
    echo "cluster create failed (see $DIR/create.log)" >&2; stop_all; exit 1
  fi
  for p in "${ports[@]}"; do
    for _ in $(seq 400); do
      cli -p "$p" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break; sleep 0.05
    done
    cli -p "$p" cluster info | grep -q 'cluster_state:ok' || { echo "node $p not ok" >&2; stop_all; exit 1; }
  done
  if (( REPL > 0 )); then  # every replica's link to its master is up
    for p in "${ports[@]}"; do
      cli -p "$p" role | head -1 | grep -q slave || continue
      for _ in $(seq 400); do
        cli -p "$p" info replication | grep -q 'master_link_status:up' && break; sleep 0.05
      done
    done
  fi
fi
t1=$(date +%s.%N)
printf 'redis: %d master(s) x %d replica(s) up in %.2f s in %s\n' "$MASTERS" "$REPL" \
  "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$DIR"
( IFS=,; echo "redis://${addrs[*]}" )
