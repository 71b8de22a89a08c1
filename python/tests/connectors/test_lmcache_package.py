"""The LMCache connector package (kvtier/connectors/lmcache/): one module per concept, no import cycle
among them, the shared types in leaf modules, and ``kvtier.connectors.lmcache`` -- the module path
LMCache's ``native_plugin`` JSON names -- still gives the connector class and the names the module
exported before it was split."""

from __future__ import annotations

import importlib
import pathlib
import select

import pytest

from connector_helpers import requires_library
from package_imports import find_cycle, import_graph, module_sizes

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "kvtier" / "connectors" / "lmcache"
NAME = "kvtier.connectors.lmcache"
LEAVES = ("options", "ops")  # what every other module may import: they import none of them


def test_the_package_modules_import_each_other_without_a_cycle():
    graph = import_graph(PACKAGE, NAME)
    assert {"options", "ops", "identity", "submission", "connector"} <= set(graph)
    assert graph["connector"] >= {"identity", "submission"}  # the parser sees the package's own imports
    assert find_cycle(graph) == []


@pytest.mark.parametrize("leaf", LEAVES)
def test_shared_types_live_in_leaf_modules(leaf):
    assert import_graph(PACKAGE, NAME)[leaf] == set()


def test_the_package_modules_stay_small():
    sizes = module_sizes(PACKAGE)
    assert max(sizes.values()) <= 600, sizes


def test_the_configured_module_path_keeps_its_class():
    module = importlib.import_module(NAME)  # native_plugin's module_path
    cls = getattr(module, "KvtierNativeConnector")  # its class_name
    assert cls is importlib.import_module(NAME + ".connector").KvtierNativeConnector
    for method in ("event_fd", "submit_batch_get", "submit_batch_set", "submit_batch_exists",
                   "submit_batch_delete", "drain_completions", "get_usage", "close"):
        assert callable(getattr(cls, method)), method
    options = importlib.import_module(NAME + ".options")
    assert module.OWN_OPTIONS is options.OWN_OPTIONS and "tiers" in module.OWN_OPTIONS
    assert module.Completion is importlib.import_module(NAME + ".ops").Completion


def _completion(conn, fid):
    """The completion of future ``fid`` (waits on the connector's eventfd, as LMCache's bridge does)."""
    for _ in range(100):
        for completion in conn.drain_completions():
            if completion[0] == fid:
                return completion
        select.select([conn.event_fd()], [], [], 0.1)
    raise AssertionError(f"future {fid} never completed")


@requires_library
def test_the_connector_round_trips_through_the_package():
    conn = importlib.import_module(NAME).KvtierNativeConnector(tiers="mem://?capacity=16MiB")
    try:
        data = bytearray(b"x" * 4096)
        assert _completion(conn, conn.submit_batch_set(["obj-a"], [memoryview(data)]))[1:] == (True, "", [True])
        assert _completion(conn, conn.submit_batch_exists(["obj-a", "obj-b"]))[1:] == (True, "", [True, False])
        out = bytearray(4096)
        assert _completion(conn, conn.submit_batch_get(["obj-a"], [memoryview(out)]))[1:] == (True, "", [True])
        assert out == data
    finally:
        conn.close()
