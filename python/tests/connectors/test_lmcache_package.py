"""The LMCache connector package (kvtier/connectors/lmcache/; its structure: test_connector_packages.py):
``kvtier.connectors.lmcache`` -- the module path
LMCache's ``native_plugin`` JSON names -- still gives the connector class and the names the module
exported before it was split."""

from __future__ import annotations

import importlib
import select

from connector_helpers import requires_library

NAME = "kvtier.connectors.lmcache"


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
