#!/usr/bin/env bash
# Installs the Debian packages kvtier needs, per target:
#   install-deps.sh --demo   what the build (libraries, CLI, tests compiled) and `kvtier demo` need;
#                            `make build`, `make demo`, `make deb` and `make install` use it: no server
#                            is installed
#   install-deps.sh --python the above plus what the Python package and README's Python commands need
#                            (interpreter, numpy for examples/save_load.py, pip/setuptools/venv for an
#                            offline `pip install ./python`); `make python` uses it
#   install-deps.sh          everything: the above plus the tools and servers the tests and benchmarks
#                            start (Redis and Ceph servers, FUSE, clang for the fuzz and locking builds,
#                            fio, gnuplot, pytest, torch); `make test` (and so .ci/run) uses it
#   install-deps.sh --list [--demo|--python]   prints the package set, one a line, and installs nothing
# Idempotent: prints nothing and exits 0 when everything is already present.
set -euo pipefail

# The build: compilers, every library the CMake configuration requires (cmake/KvtierDeps.cmake; the
# client libraries of the redis://, rados:// and s3:// tiers are build dependencies), and the test
# frameworks the default build compiles. The demo (`kvtier demo`) needs nothing more. `file`: CPack's
# dpkg-shlibdeps step of `make deb` finds the package's ELF files with it.
BUILD_PACKAGES=(
  build-essential cmake ninja-build pkg-config git ccache file
  libssl-dev libxxhash-dev liburing-dev
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev
  prometheus-cpp-dev
  libhiredis-dev librados-dev libcurl4-openssl-dev
  libboost-dev libzmq3-dev cppzmq-dev libmsgpack-cxx-dev
)
# The Python package (standard library only) and the commands README gives for it.
PYTHON_PACKAGES=(python3 python3-numpy python3-setuptools python3-pip python3-venv)
# The tests and benchmarks: tools they run and the servers of the distributed tests (python3-yaml: the
# deploy/ manifests' test).
TEST_PACKAGES=(
  clang libclang-rt-14-dev
  fio gnuplot-nox
  python3-pytest python3-torch python3-yaml python3-zmq python3-msgpack
  redis-server redis-tools
  ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse radosgw uuid-runtime bc fuse3 curl
)

demo=0 python=0 list=0
for arg in "$@"; do
  case "$arg" in
    --demo) demo=1 ;;
    --python) python=1 ;;
    --list) list=1 ;;
    *) echo "usage: $0 [--demo | --python] [--list]" >&2; exit 2 ;;
  esac
done
if (( demo && python )); then echo "usage: $0 [--demo | --python] [--list]" >&2; exit 2; fi
PACKAGES=("${BUILD_PACKAGES[@]}")
(( demo )) || PACKAGES+=("${PYTHON_PACKAGES[@]}")
(( demo || python )) || PACKAGES+=("${TEST_PACKAGES[@]}")
if (( list )); then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

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
