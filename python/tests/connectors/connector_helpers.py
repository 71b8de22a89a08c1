"""Helpers and fixtures of the connector driver tests.

The engines themselves (vLLM, SGLang, LMCache) cannot be installed here; each driver test calls
its connector in the order and with the arguments the engine's code uses, against a real kvtier
Store. Chunks are corrupted on disk under a file:// tier that is the store's only tier, so a
load has to read (and verify) the damaged file.

(Not a conftest.py: python/tests/conftest.py is imported by its tests as the module `conftest`.)
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

import pytest

_PYTHON_DIR = pathlib.Path(__file__).resolve().parents[2]
if str(_PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(_PYTHON_DIR))

import kvtier  # noqa: E402


def _library_problem() -> str | None:
    """Why libkvtier.so cannot be used here, or None. Only its absence is a reason to skip."""
    try:
        kvtier._lib.lib()
    except kvtier.KvtierError as e:
        if e.status == kvtier.Status.NOT_FOUND:
            return str(e)
        raise
    return None


_PROBLEM = _library_problem()
# Each test module sets `pytestmark = requires_library`.
requires_library = pytest.mark.skipif(_PROBLEM is not None,
                                      reason=f"libkvtier.so is not built (`make python`): {_PROBLEM}")

CHUNK_SUFFIX = ".kvc"      # chunk files of a file:// tier
HEADER_BYTES = 4096        # the chunk header before the payload


def chunk_file(tier_dir: pathlib.Path, kv_key: bytes) -> pathlib.Path:
    """The file holding the chunk of ``kv_key`` (a 32-byte kvtier key) under a file:// tier."""
    name = kv_key.hex() + CHUNK_SUFFIX
    found = [p for p in tier_dir.rglob("*" + CHUNK_SUFFIX) if p.name == name]
    assert len(found) == 1, f"chunk {name} not found once under {tier_dir}: " \
        f"{sorted(p.name for p in tier_dir.rglob('*' + CHUNK_SUFFIX))}"
    return found[0]


def flip_payload_byte(path: pathlib.Path, payload_offset: int) -> None:
    """Flips the payload byte at ``payload_offset`` of a chunk file, as a failing disk would."""
    assert path.stat().st_size > HEADER_BYTES + payload_offset
    with open(path, "r+b") as f:
        f.seek(HEADER_BYTES + payload_offset)  # the payload follows the header (the file may be padded)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x5A]))


def corrupt_chunk(tier_dir: pathlib.Path, kv_key: bytes, payload_offset: int = 1) -> None:
    """Flips one payload byte (at ``payload_offset``) of the chunk's file, as a failing disk would."""
    flip_payload_byte(chunk_file(tier_dir, kv_key), payload_offset)


def wait_for(predicate, what: str, limit_s: float = 60.0):
    """Polls ``predicate`` until it returns a truthy value; the limit only guards against a hang."""
    deadline = time.monotonic() + limit_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.001)


def make_file_tier(parent: pathlib.Path, capacity: str, name: str = "tier"):
    """(URL, directory) of a file:// tier of ``capacity`` in a fresh directory ``parent/name``."""
    d = parent / name
    d.mkdir()
    return f"file://{d}?capacity={capacity}", d


@pytest.fixture
def file_tier(tmp_path):
    return make_file_tier(tmp_path, "64MiB")


@pytest.fixture
def tiny_file_tier(tmp_path):
    """A file:// tier too small for any chunk the tests write."""
    return make_file_tier(tmp_path, "4KiB", "tiny")
