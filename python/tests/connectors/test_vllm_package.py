"""The vLLM connector package (kvtier/connectors/vllm/): one module per concept, no import cycle among
them (imports under TYPE_CHECKING count too), the shared types in leaf modules, and the module paths
users configure still give what they gave before the package was split."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "kvtier" / "connectors" / "vllm"
NAME = "kvtier.connectors.vllm"
LEAVES = ("spec", "engine_api")  # the types every other module may import: they import none of them


def _imported_modules(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports: ``from .x import ...``, ``from . import x``, ``import
    kvtier.connectors.vllm.x`` and ``from kvtier.connectors.vllm.x import ...``, wherever they stand."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                target = node.module
            elif node.level == 0 and node.module and node.module.startswith(NAME + "."):
                target = node.module[len(NAME) + 1:]
            elif node.level == 0 and node.module == NAME:
                target = None
            else:
                continue
            if target is None:  # from . import a, b: submodules (or names of __init__)
                found |= {a.name for a in node.names if a.name in modules} or {"__init__"}
            else:
                found.add(target.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {a.name[len(NAME) + 1:].split(".")[0] for a in node.names if a.name.startswith(NAME + ".")}
    return found & modules


def import_graph(package: pathlib.Path) -> dict[str, set[str]]:
    modules = {p.stem for p in package.glob("*.py")}
    return {m: _imported_modules(package / f"{m}.py", modules) - {m} for m in sorted(modules)}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` as [a, b, ..., a], or [] when there is none (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return []


def test_the_cycle_finder_finds_a_cycle_and_passes_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_package_modules_import_each_other_without_a_cycle():
    graph = import_graph(PACKAGE)
    assert {"spec", "scheduler", "worker", "core", "connector", "host_paged", "gpu_paged"} <= set(graph)
    assert graph["core"] >= {"scheduler", "worker"}  # the parser sees the package's own imports
    assert find_cycle(graph) == []


@pytest.mark.parametrize("leaf", LEAVES)
def test_shared_types_live_in_leaf_modules(leaf):
    assert import_graph(PACKAGE)[leaf] == set()


def test_the_package_modules_stay_small():
    sizes = {p.name: len(p.read_text().splitlines()) for p in PACKAGE.glob("*.py")}
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
