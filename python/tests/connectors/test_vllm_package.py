"""The vLLM connector package (kvtier/connectors/vllm/): one module per concept, no import cycle among
them (imports under TYPE_CHECKING count too), the shared types in leaf modules, and the module paths
users configure still give what they gave before the package was split."""

from __future__ import annotations

import importlib
import pathlib

import pytest

from package_imports import find_cycle, import_graph, module_sizes

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "kvtier" / "connectors" / "vllm"
NAME = "kvtier.connectors.vllm"
LEAVES = ("spec", "engine_api")  # the types every other module may import: they import none of them


def test_the_cycle_finder_finds_a_cycle_and_passes_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_package_modules_import_each_other_without_a_cycle():
    graph = import_graph(PACKAGE, NAME)
    assert {"spec", "scheduler", "worker", "core", "connector", "host_paged", "gpu_paged"} <= set(graph)
    assert graph["core"] >= {"scheduler", "worker"}  # the parser sees the package's own imports
    assert find_cycle(graph) == []


@pytest.mark.parametrize("leaf", LEAVES)
def test_shared_types_live_in_leaf_modules(leaf):
    assert import_graph(PACKAGE, NAME)[leaf] == set()


def test_the_package_modules_stay_small():
    sizes = module_sizes(PACKAGE)
    assert max(sizes.values()) <= 600, sizes


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
