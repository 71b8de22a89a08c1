#!/usr/bin/env bash
# The Python package installs like one, offline: `make wheel` builds a wheel with libkvtier.so inside,
# tagged for this platform; `pip install ./python` into a fresh venv (pip's in-place build, through the
# package's build backend: CMake, a lean Release build of kvtier_shared; ccache, keyed under
# CCACHE_BASEDIR=the repository, compiles only what no earlier build compiled) installs the package with
# its own copy. Then, with no KVTIER_LIBRARY, `import kvtier` must load that copy, and a mem:// save and
# load must give the bytes back. Both builds use one new build directory: the second only checks it.
# Usage: pip_install_check.sh SOURCE_DIR PYTHON CMAKE
set -euo pipefail
src=$1 python=$2 cmake=$3
work=$(mktemp -d)
# The build directory sits where the backend's default one does (build-wheel/<name>, git-ignored), so that
# ccache, with the paths under the repository made relative, reuses what `make wheel`, `pip install
# ./python` or an earlier run of this test compiled.
mkdir -p "$src/build-wheel"
export KVTIER_CMAKE_BUILD_DIR=$(mktemp -d "$src/build-wheel/check.XXXXXX")
trap 'rm -rf "$work" "$KVTIER_CMAKE_BUILD_DIR"' EXIT
unset KVTIER_LIBRARY

start=$(date +%s)
make --no-print-directory -C "$src" wheel WHEEL_DIR="$work/dist" CMAKE="$cmake" >"$work/make.log" 2>&1 \
  || { cat "$work/make.log"; exit 1; }
echo "make wheel: $(( $(date +%s) - start )) s (CMake configure and kvtier_shared build included)"
[[ -f "$KVTIER_CMAKE_BUILD_DIR/CMakeCache.txt" ]] || { echo "FAIL: make wheel did not run CMake in $KVTIER_CMAKE_BUILD_DIR"; exit 1; }
"$python" - "$work/dist" <<'PY'
import glob
import sys
import zipfile

(wheel,) = glob.glob(sys.argv[1] + "/kvtier-*.whl")
name = wheel.rsplit("/", 1)[1]
assert "-py3-none-linux_" in name, f"{name}: a wheel holding a .so needs a platform tag"
archive = zipfile.ZipFile(wheel)
names = archive.namelist()
for needed in ("kvtier/libkvtier.so", "kvtier/connectors/vllm_v1.py", "kvtier/connectors/vllm/connector.py",
               "kvtier/connectors/sglang/backend.py", "kvtier/connectors/lmcache/connector.py"):
    assert needed in names, f"{name} lacks {needed}"
(record,) = [n for n in names if n.endswith(".dist-info/RECORD")]
listed = {line.split(",", 1)[0] for line in archive.read(record).decode().splitlines()}
assert listed == set(names), f"RECORD of {name} differs from its files: {sorted(listed ^ set(names))}"
print(f"{name}: {len(names)} files, libkvtier.so inside")
PY

"$python" -m venv "$work/venv"
start=$(date +%s)
CMAKE="$cmake" "$work/venv/bin/pip" install --no-index --no-build-isolation --no-cache-dir "$src/python" \
  >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }
echo "pip install ./python: $(( $(date +%s) - start )) s (make wheel's build directory, checked again)"

cd "$work"  # not the source tree: `import kvtier` must find the installed package
"$work/venv/bin/python" - <<'PY'
import glob
import os
import sys

import kvtier
from kvtier import _lib

site = os.path.dirname(os.path.dirname(kvtier.__file__))
assert site.startswith(sys.prefix), f"kvtier imported from {kvtier.__file__}, not the venv {sys.prefix}"
loaded = os.path.realpath(_lib.lib()._name)
inside = os.path.realpath(os.path.join(os.path.dirname(kvtier.__file__), "libkvtier.so"))
assert loaded == inside, f"libkvtier.so loaded from {loaded}, not the copy in the package {inside}"
(wheel_file,) = glob.glob(os.path.join(site, "kvtier-*.dist-info", "WHEEL"))
tags = [line.split(": ", 1)[1] for line in open(wheel_file).read().splitlines() if line.startswith("Tag: ")]
assert tags and all(not t.endswith("-any") for t in tags), f"wheel tags {tags}: a .so needs a platform tag"

layout = kvtier.Layout(layers=2, kv_heads=2, head_dim=8, dtype="fp16", tokens_per_chunk=4)
with kvtier.Store(["mem://?capacity=1MiB"]) as store, store.namespace("pip-check/tiny", layout) as ns:
    keys = ns.chunk_keys(list(range(8)))  # two full chunks
    chunks = [bytes((7 * i + j) % 251 for j in range(ns.chunk_bytes)) for i in range(len(keys))]
    store.save(ns, keys, chunks)
    back = [bytearray(ns.chunk_bytes) for _ in keys]
    assert store.load(ns, keys, back) == len(keys), "mem:// load found fewer chunks than were saved"
    assert [bytes(b) for b in back] == chunks, "mem:// load gave other bytes than were saved"
print(f"import kvtier from {site}; library {loaded}; tags {tags}; mem:// round trip of {len(keys)} chunks")
PY
