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

try:
    import kvtier  # noqa: E402
    _IMPORT_ERROR = None
except Exception as e:  # the shared library is not built: nothing here can run
    kvtier = None
    _IMPORT_ERROR = e


def pytest_collection_modifyitems(config, items):
    # Only a missing shared library is a reason to skip; any other import failure is a defect and
    # fails every test below (see the autouse fixture).
    if _IMPORT_ERROR is None or "libkvtier" not in str(_IMPORT_ERROR):
        return
    reason = f"libkvtier.so is not built (run `make python`): {_IMPORT_ERROR}"
    for item in items:
        if "connectors" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _kvtier_importable():
    if _IMPORT_ERROR is not None:
        raise _IMPORT_ERROR


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
