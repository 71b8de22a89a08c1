"""Namespaces, chunk keys and the library itself."""
import hashlib

import numpy as np
import pytest

import kvtier
from conftest import LAYOUT, tokens


def test_version_and_abi():
    assert kvtier.__version__ and kvtier.__version__[0].isdigit()
    import ctypes
    from kvtier import _lib
    assert _lib.lib().kvtier_abi_version() == kvtier.ABI_VERSION
    assert _lib.lib().kvtier_status_name(int(kvtier.Status.NO_SPACE)) == b"NoSpace"


def test_layout_chunk_bytes():
    assert kvtier.Layout(32, 8, 128).chunk_bytes == 32 << 20
    assert LAYOUT.chunk_bytes == 2048
    with pytest.raises(kvtier.KvtierError) as e:
        kvtier.Layout(1, 1, 1, dtype="int4").chunk_bytes
    assert e.value.status == kvtier.Status.INVALID_ARGUMENT


def test_namespace_fields(ns):
    assert len(ns.id) == 64 and int(ns.id, 16) >= 0
    assert ns.chunk_bytes == LAYOUT.chunk_bytes
    assert ns.tokens_per_chunk == LAYOUT.tokens_per_chunk
    with kvtier.Namespace("test/model", LAYOUT, tenant="other") as other:
        assert other.id != ns.id


def test_chunk_keys_forms_agree(ns):
    toks = tokens(3) + [1, 2, 3]  # a partial chunk at the end has no key
    keys = ns.chunk_keys(toks)
    assert len(keys) == 3 and all(len(k) == 32 for k in keys)
    assert len(set(keys)) == 3
    assert ns.chunk_keys(np.array(toks, dtype=np.uint32)) == keys
    chained, prev = [], None
    for i in range(3):
        prev = ns.next_chunk_key(prev, toks[i * 16:(i + 1) * 16])
        chained.append(prev)
    assert chained == keys
    assert ns.chunk_keys([]) == []


def test_chunk_keys_bad_input(ns):
    with pytest.raises(kvtier.KvtierError) as e:
        ns.chunk_keys(np.zeros(32, dtype=np.float64))
    assert e.value.status == kvtier.Status.INVALID_ARGUMENT
    with pytest.raises(kvtier.KvtierError):
        ns.chunk_keys([-1] * 16)
    with pytest.raises(kvtier.KvtierError) as e:
        ns.next_chunk_key(None, list(range(15)))
    assert e.value.status == kvtier.Status.INVALID_ARGUMENT


def test_key_of():
    assert kvtier.key_of("block-7") == hashlib.sha256(b"block-7").digest()
    assert kvtier.key_of(b"\x00\x01") == hashlib.sha256(b"\x00\x01").digest()


def test_namespace_invalid():
    with pytest.raises(kvtier.KvtierError) as e:
        kvtier.Namespace("", LAYOUT)
    assert e.value.status == kvtier.Status.INVALID_ARGUMENT
    assert str(e.value).startswith("InvalidArgument: ")


def test_closed_namespace(ns):
    ns.close()
    ns.close()
    with pytest.raises(kvtier.KvtierError) as e:
        ns.chunk_keys(tokens(1))
    assert e.value.status == kvtier.Status.INVALID_ARGUMENT


def test_library_not_found_names_the_paths(tmp_path):
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path
    from kvtier import _lib
    probe = subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL('{_lib.system_library()}')"],
                           capture_output=True)  # in a process that has not loaded the library already
    if probe.returncode == 0:
        pytest.skip(f"{_lib.system_library()} is installed on this system: the package finds it")
    pkg = tmp_path / "a" / "b" / "kvtier"
    pkg.mkdir(parents=True)
    for f in (Path(kvtier.__file__).parent).glob("*.py"):
        shutil.copy(f, pkg)  # the package without a library beside it or a build tree above it
    env = dict(os.environ, KVTIER_LIBRARY=str(tmp_path / "missing.so"), PYTHONDONTWRITEBYTECODE="1")
    code = ("import kvtier\ntry:\n    kvtier.Store(['mem://'])\nexcept kvtier.KvtierError as e:\n"
            "    print(int(e.status), e.message)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=pkg.parent, env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith(f"{int(kvtier.Status.NOT_FOUND)} libkvtier.so not found")
    assert "missing.so (absent)" in out and str(pkg / "libkvtier.so") in out
    assert "libkvtier.so.1 in the loader's search path" in out
