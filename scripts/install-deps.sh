#!/usr/bin/env bash
# Installs every Debian package kvtier needs to build, test and benchmark.
# Idempotent: prints nothing and exits 0 when everything is already present.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libssl-dev libxxhash-dev liburing-dev
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev
  prometheus-cpp-dev
  clang libclang-rt-14-dev
  fio gnuplot-nox
  python3-numpy python3-pytest python3-setuptools python3-pip python3-venv
  python3-torch
  redis-server redis-tools libhiredis-dev
  ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse radosgw librados-dev uuid-runtime bc fuse3 curl libcurl4-openssl-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
