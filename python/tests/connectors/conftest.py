"""Shared fixtures of the connector driver tests.

The engines themselves (vLLM, SGLang, LMCache) cannot be installed here; each driver test calls
its connector in the order and with the arguments the engine's code uses, against a real kvtier
Store. Chunks are corrupted on disk under a file:// tier that is the store's only tier, so a
load has to read (and verify) the damaged file.
"""

from __future__ import annotations

import pathlib
import sys

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


def pytest_collection_modifyitems(config, items):
    problem = _library_problem()
    if problem is None:
        return
    skip = pytest.mark.skip(reason=f"libkvtier.so is not built (`make python`): {problem}")
    for item in items:
        if "connectors" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture
def file_tier(tmp_path):
    """(URL, directory) of a file:// tier in a fresh directory."""
    d = tmp_path / "tier"
    d.mkdir()
    return f"file://{d}?capacity=64MiB", d


@pytest.fixture
def tiny_file_tier(tmp_path):
    """A file:// tier too small for any chunk the tests write."""
    d = tmp_path / "tiny"
    d.mkdir()
    return f"file://{d}?capacity=4KiB", d
