"""Helpers of the connector driver tests (imported by the tests and their conftest)."""

from __future__ import annotations

import os
import pathlib
import time

import pytest

CHUNK_SUFFIX = ".kvc"      # chunk files of a file:// tier
HEADER_BYTES = 4096        # the chunk header before the payload


def chunk_file(tier_dir: pathlib.Path, kv_key: bytes) -> pathlib.Path:
    """The file holding the chunk of ``kv_key`` (a 32-byte kvtier key) under a file:// tier."""
    name = kv_key.hex() + CHUNK_SUFFIX
    found = [p for p in tier_dir.rglob("*" + CHUNK_SUFFIX) if p.name == name]
    assert len(found) == 1, f"chunk {name} not found once under {tier_dir}: " \
        f"{sorted(p.name for p in tier_dir.rglob('*' + CHUNK_SUFFIX))}"
    return found[0]


def corrupt_chunk(tier_dir: pathlib.Path, kv_key: bytes) -> None:
    """Flips one payload byte of the chunk's file, as a failing disk would."""
    path = chunk_file(tier_dir, kv_key)
    size = path.stat().st_size
    assert size > HEADER_BYTES
    with open(path, "r+b") as f:
        f.seek(HEADER_BYTES + 1)  # the payload follows the header (the file may be padded after it)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x5A]))


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
