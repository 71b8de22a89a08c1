"""The connector packages (kvtier/connectors/vllm/, sglang/, lmcache/): one module per concept, no
import cycle among them (imports under TYPE_CHECKING count too), the types they share in leaf modules
that import none of the others, and no module past 600 lines. What each package's configured module
path still gives is checked beside it (test_vllm_package.py, test_sglang_package.py,
test_lmcache_package.py)."""

from __future__ import annotations

import pathlib

import pytest

from package_imports import find_cycle, import_graph, module_sizes

CONNECTORS = pathlib.Path(__file__).resolve().parents[2] / "kvtier" / "connectors"

# package: (leaf modules, modules that must be seen, {module: modules it must be seen importing})
PACKAGES = {
    "vllm": (("spec", "engine_api"),
             {"spec", "scheduler", "worker", "core", "connector", "host_paged", "gpu_paged"},
             {"core": {"scheduler", "worker"}}),
    "sglang": (("engine_api", "options", "pools", "guard"),
               {"engine_api", "options", "pools", "identity", "storage", "hybrid", "backend"},
               {"backend": {"storage", "hybrid"}}),
    "lmcache": (("options", "ops"),
                {"options", "ops", "identity", "submission", "connector"},
                {"connector": {"identity", "submission"}}),
}
LEAVES = [(package, leaf) for package, (leaves, _, _) in PACKAGES.items() for leaf in leaves]


def _graph(package):
    return import_graph(CONNECTORS / package, "kvtier.connectors." + package)


def test_the_cycle_finder_finds_a_cycle_and_passes_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_the_package_modules_import_each_other_without_a_cycle(package):
    _, modules, edges = PACKAGES[package]
    graph = _graph(package)
    assert modules <= set(graph)
    for module, imported in edges.items():
        assert graph[module] >= imported  # the parser sees the package's own imports
    assert find_cycle(graph) == []


@pytest.mark.parametrize("package,leaf", LEAVES)
def test_shared_types_live_in_leaf_modules(package, leaf):
    assert _graph(package)[leaf] == set()


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_the_package_modules_stay_small(package):
    sizes = module_sizes(CONNECTORS / package)
    assert max(sizes.values()) <= 600, sizes
