#!/usr/bin/env bash
# Starts and stops a single-host Ceph 16.2 cluster (Debian's packages) on 127.0.0.1 for kvtier's tests.
#   scripts/ceph-cluster.sh start DIR [--no-fs] [--no-rgw]
#   scripts/ceph-cluster.sh stop DIR
#   scripts/ceph-cluster.sh osd-stop|osd-start|rgw-stop|rgw-start DIR     (fault tests)
# `start` brings up one mon, one mgr and one OSD (bluestore on a sparse file DIR/osd/ceph-0/block.file),
# a pool "kvtier" of size 1; unless --no-fs an MDS with CephFS mounted by ceph-fuse at DIR/mnt-a and
# DIR/mnt-b (two clients, as two hosts would); unless --no-rgw radosgw (S3) with a user whose keys are in
# DIR/s3.credentials (AWS shared-credentials format, profile "default") and a bucket "kvtier" (so the
# printed s3:// URL works as printed). Auth is off (cephx none): the
# cluster is for tests on 127.0.0.1 only. Ports are free ones picked at start, so clusters of parallel
# test binaries do not meet. stdout gets, one a line:
#   fs://DIR/mnt-a   fs://DIR/mnt-b   rados://kvtier?conf=DIR/ceph.conf   s3://kvtier?endpoint=http://...
#   started in N.NN s
# Progress goes to stderr. Every daemon runs with `-c DIR/ceph.conf` and writes its pid file under
# DIR/run; `stop` (and the fault commands) kill only a pid from those files whose command line names that
# conf, then unmount DIR's own ceph-fuse mounts. Memory: about 0.8 GiB with everything up.
set -euo pipefail

usage() { echo "usage: $0 start DIR [--no-fs] [--no-rgw] | stop DIR | osd-stop|osd-start|rgw-stop|rgw-start DIR" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
CMD=$1
mkdir -p "$2" 2>/dev/null || true
DIR=$(cd "$2" 2>/dev/null && pwd -P) || { [[ $CMD == stop ]] && exit 0; echo "cannot use $2" >&2; exit 2; }
CONF=$DIR/ceph.conf
RUN=$DIR/run
export CEPH_CONF=$CONF

log() { echo "ceph-cluster: $*" >&2; }

daemon_pid() {  # pid of daemon $1 (e.g. osd.0) if it runs with our conf
  local pf=$RUN/$1.pid pid
  [[ -f $pf ]] || return 1
  pid=$(cat "$pf" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$CONF" || return 1
  echo "$pid"
}

# A process that still runs: a zombie leader whose other threads are still shutting down counts as alive.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]] ||
    (( $(awk '/^Threads:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0) > 1 ))
}

stop_daemon() {  # SIGTERM, then SIGKILL after 10 s
  local pid
  pid=$(daemon_pid "$1") || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 200); do alive "$pid" || break; sleep 0.05; done
  alive "$pid" && kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 100); do alive "$pid" || break; sleep 0.05; done
  rm -f "$RUN/$1.pid"
}

unmount_ours() {
  local m
  for m in "$DIR/mnt-a" "$DIR/mnt-b"; do
    if awk -v m="$m" '$2 == m && $3 == "fuse.ceph-fuse" {f=1} END {exit !f}' /proc/mounts; then
      fusermount3 -u "$m" 2>/dev/null || fusermount -u "$m" 2>/dev/null || umount "$m" 2>/dev/null ||
        umount -l "$m" 2>/dev/null || true
    fi
  done
}

stop_all() {  # clients first (they unmount), then every daemon at once: SIGTERM, wait, SIGKILL after 10 s
  unmount_ours
  local n pid pids=()
  for n in client.fuse-a client.fuse-b; do stop_daemon "$n"; done
  for n in client.rgw.a mds.a osd.0 mgr.x mon.a; do
    pid=$(daemon_pid "$n") || continue
    kill "$pid" 2>/dev/null || true
    pids+=("$pid")
    rm -f "$RUN/$n.pid"
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 200); do alive "$pid" || break; sleep 0.05; done
    alive "$pid" && kill -9 "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do alive "$pid" || break; sleep 0.05; done
  done
  return 0
}

wait_for() {  # wait_for SECONDS CMD...: polls CMD every 0.2 s
  local tries=$(( $1 * 5 )); shift
  for _ in $(seq "$tries"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}

ceph_() { timeout 20 ceph -c "$CONF" --connect-timeout 5 "$@"; }
osd_up() { ceph_ osd stat -f json | grep -q '"num_up_osds":1'; }
pgs_clean() { ceph_ pg stat | grep -qE '^[0-9]+ pgs: [0-9]+ active\+clean;'; }
rgw_answers() { curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$(cat "$DIR/rgw.port")/"; }

start_osd() {
  ceph-osd -c "$CONF" -i 0 >&2
  wait_for 60 osd_up || { log "osd.0 did not come up (see $DIR/log/osd.0.log)"; return 1; }
}
start_rgw() {
  radosgw -c "$CONF" -n client.rgw.a >&2
  wait_for 60 rgw_answers || { log "radosgw did not answer (see $DIR/log/rgw.log)"; return 1; }
}

case $CMD in
  stop) [[ -f $CONF ]] || exit 0; stop_all; exit 0 ;;
  osd-stop) stop_daemon osd.0; exit 0 ;;
  osd-start) start_osd; wait_for 60 pgs_clean; exit 0 ;;
  rgw-stop) stop_daemon client.rgw.a; exit 0 ;;
  rgw-start) start_rgw; exit 0 ;;
  start) ;;
  *) usage ;;
esac

WANT_FS=1; WANT_RGW=1
for a in "${@:3}"; do
  case $a in --no-fs) WANT_FS=0 ;; --no-rgw) WANT_RGW=0 ;; *) usage ;; esac
done
for b in ceph-mon ceph-mgr ceph-osd monmaptool uuidgen; do
  command -v "$b" >/dev/null || { echo "$b is not installed (scripts/install-deps.sh installs Ceph)" >&2; exit 3; }
done
if (( WANT_FS )) && ! { command -v ceph-mds && command -v ceph-fuse && [[ -c /dev/fuse ]]; } >/dev/null; then
  echo "ceph-mds, ceph-fuse or /dev/fuse missing (scripts/install-deps.sh)" >&2; exit 3
fi
(( WANT_RGW == 0 )) || command -v radosgw >/dev/null || { echo "radosgw is not installed" >&2; exit 3; }
[[ -f $CONF ]] && stop_all
rm -rf "$DIR"/{log,run,mon,mgr,osd,mds,rgw,crash,monmap,ceph.conf,s3.credentials,rgw.port}
mkdir -p "$DIR"/{log,run,mon/ceph-a,mgr/ceph-x,osd/ceph-0,mds/ceph-a,rgw/ceph-rgw.a,crash}

T0=$(date +%s.%N)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
MON_PORT=$(free_port)
RGW_PORT=$(free_port)
echo "$RGW_PORT" >"$DIR/rgw.port"
FSID=$(uuidgen)
cat >"$CONF" <<EOF
[global]
fsid = $FSID
mon host = v2:127.0.0.1:$MON_PORT
mon initial members = a
public addr = 127.0.0.1
public network = 127.0.0.0/8
ms bind ipv6 = false
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = false
ms mon client mode = crc
run dir = $RUN
admin socket = $RUN/\$name.asok
pid file = $RUN/\$name.pid
log file = $DIR/log/\$name.log
log to stderr = false
err to stderr = true
crash dir = $DIR/crash
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon max pg per osd = 1000
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
[mon]
mon data = $DIR/mon/ceph-\$id
mon cluster log file = $DIR/log/cluster.log
[mgr]
mgr data = $DIR/mgr/ceph-\$id
mgr disabled modules = dashboard prometheus restful
[osd]
osd data = $DIR/osd/ceph-\$id
osd objectstore = bluestore
osd memory target = 939524096
osd op num shards = 2
osd op num threads per shard = 1
bluestore block path = $DIR/osd/ceph-\$id/block.file
bluestore block create = true
bluestore block size = ${KVTIER_CEPH_OSD_BYTES:-10737418240}
bluestore block db create = false
bluestore block wal create = false
bluestore fsck on mount = false
osd class load list = *
osd class default list = *
[mds]
mds data = $DIR/mds/ceph-\$id
mds cache memory limit = 268435456
[client]
admin socket = $RUN/\$name.\$pid.asok
[client.rgw.a]
admin socket = $RUN/\$name.asok
rgw data = $DIR/rgw/ceph-rgw.a
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw dns name = 127.0.0.1
rgw thread pool size = 64
EOF

log "mon on 127.0.0.1:$MON_PORT"
monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$MON_PORT]" "$DIR/monmap" >/dev/null
ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring /dev/null
ceph-mon -c "$CONF" -i a >&2
wait_for 60 ceph_ -s || { log "the mon did not answer (see $DIR/log/mon.a.log)"; exit 1; }
ceph-mgr -c "$CONF" -i x >&2
OSD_UUID=$(uuidgen)
ceph_ osd new "$OSD_UUID" >/dev/null
ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$OSD_UUID" >"$DIR/log/osd-mkfs.out" 2>&1 ||
  { log "osd mkfs failed (see $DIR/log/osd-mkfs.out)"; exit 1; }
start_osd
ceph_ osd pool create kvtier 8 8 >/dev/null 2>&1
ceph_ osd pool application enable kvtier rados >/dev/null 2>&1
log "mon, mgr, osd up: $(echo "$(date +%s.%N) - $T0" | bc) s"

if (( WANT_FS )); then
  ceph_ osd pool create cephfs_data 8 8 >/dev/null 2>&1
  ceph_ osd pool create cephfs_metadata 8 8 >/dev/null 2>&1
  ceph_ fs new cephfs cephfs_metadata cephfs_data >/dev/null 2>&1
  ceph-mds -c "$CONF" -i a >&2
  mds_active() { ceph_ mds stat | grep -q 'up:active'; }
  wait_for 90 mds_active || { log "the MDS did not become active (see $DIR/log/mds.a.log)"; exit 1; }
  for m in a b; do
    mkdir -p "$DIR/mnt-$m"
    ceph-fuse -c "$CONF" --id "fuse-$m" "$DIR/mnt-$m" >"$DIR/log/ceph-fuse-$m.out" 2>&1 ||
      { log "ceph-fuse $m failed (see $DIR/log/ceph-fuse-$m.out)"; exit 1; }
    wait_for 20 mountpoint -q "$DIR/mnt-$m" || { log "mnt-$m is not mounted"; exit 1; }
  done
  log "cephfs mounted twice: $(echo "$(date +%s.%N) - $T0" | bc) s"
fi

if (( WANT_RGW )); then
  start_rgw
  AK=KVTIERTESTACCESS0001
  SK=$(head -c 30 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 40)
  radosgw-admin -c "$CONF" user create --uid=kvtier --display-name=kvtier \
    --access-key="$AK" --secret="$SK" >/dev/null 2>&1 || { log "radosgw-admin user create failed"; exit 1; }
  umask 077
  (umask 077 && printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$AK" "$SK" >"$DIR/s3.credentials")
  chmod 600 "$DIR/s3.credentials"  # kvtier refuses a secret that group or others can read
  # The bucket the printed s3:// URL names, so that URL works as printed (without create_bucket=1).
  # An S3 PUT of the bucket signed with the user's keys (curl's SigV4, as kvtier's s3:// client signs:
  # radosgw requires x-amz-content-sha256); 409 (it exists: a restart of the same DIR) is fine.
  code=$(curl -sS -o "$DIR/log/create-bucket.out" -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$AK:$SK" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X PUT "http://127.0.0.1:$RGW_PORT/kvtier") ||
    code=000
  [[ $code == 200 || $code == 409 ]] ||
    { log "creating bucket kvtier failed: HTTP $code (see $DIR/log/create-bucket.out)"; exit 1; }
  log "radosgw on 127.0.0.1:$RGW_PORT: $(echo "$(date +%s.%N) - $T0" | bc) s"
fi
wait_for 60 pgs_clean || log "warning: not every PG is active+clean yet"

if (( WANT_FS )); then echo "fs://$DIR/mnt-a"; echo "fs://$DIR/mnt-b"; fi
echo "rados://kvtier?conf=$CONF"
(( WANT_RGW == 0 )) || echo "s3://kvtier?endpoint=http://127.0.0.1:$RGW_PORT&credentials_file=$DIR/s3.credentials"
printf 'started in %.2f s\n' "$(echo "$(date +%s.%N) - $T0" | bc)"
