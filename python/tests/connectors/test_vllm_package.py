"""The vLLM connector package (kvtier/connectors/vllm/): the module paths users configure still give what
they gave before the package was split (its structure: test_connector_packages.py)."""

from __future__ import annotations

import importlib

NAME = "kvtier.connectors.vllm"


def test_the_configured_module_paths_keep_their_classes():
    v1 = importlib.import_module("kvtier.connectors.vllm_v1")  # kv_connector_module_path
    connector = importlib.import_module(NAME + ".connector")
    assert v1.KvtierConnector is connector.KvtierConnector
    assert v1.KvtierHybridConnector is connector.KvtierHybridConnector
    assert issubclass(v1.KvtierHybridConnector, v1.KvtierConnector)
    assert v1.ModelSpec is importlib.import_module(NAME + ".spec").ModelSpec
    tier = importlib.import_module(NAME)  # a secondary tier's module_path
    assert tier.KvtierSecondaryTier is importlib.import_module(NAME + ".secondary_tier").KvtierSecondaryTier
    assert callable(tier.register)
