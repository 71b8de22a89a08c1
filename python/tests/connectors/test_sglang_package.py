"""The SGLang connector package (kvtier/connectors/sglang/; its structure: test_connector_packages.py):
``kvtier.connectors.sglang`` -- the module path
SGLang's ``--hicache-storage-backend dynamic`` config names -- still gives the backend class and the
names the module exported before it was split."""

from __future__ import annotations

import importlib

NAME = "kvtier.connectors.sglang"


def test_the_configured_module_path_keeps_its_class():
    from sglang_standin import storage_config
    config = storage_config("mem://")
    extra = config.extra_config
    module = importlib.import_module(extra["module_path"])  # what SGLang's dynamic backend imports
    assert module.__name__ == NAME
    cls = getattr(module, extra["class_name"])
    backend = importlib.import_module(NAME + ".backend")
    assert cls is backend.KvtierHiCacheStorage
    assert issubclass(cls, importlib.import_module(NAME + ".engine_api").Base)
    for method in ("register_mem_pool_host", "register_mem_host_pool_v2", "batch_get_v1", "batch_set_v1",
                   "get", "set", "batch_get", "batch_set", "exists", "batch_exists", "batch_exists_v2",
                   "batch_get_v2", "batch_set_v2", "clear", "get_stats", "close"):
        assert callable(getattr(cls, method)), method
    options = importlib.import_module(NAME + ".options")
    assert (module.LAYOUTS, module.HOST_POOLS, module.IO_PATHS, module.HASH_SCHEME) == \
        (options.LAYOUTS, options.HOST_POOLS, options.IO_PATHS, options.HASH_SCHEME)
    assert module.LAYOUTS == ("layer_first", "page_first", "page_first_direct", "page_head")
