"""The import graph of a connector package (kvtier/connectors/<engine>/), read with ``ast``: the tests
of the vLLM, SGLang and LMCache packages check it has no cycle and that their shared types sit in leaf
modules."""

from __future__ import annotations

import ast
import pathlib


def _imported_modules(path: pathlib.Path, modules: set[str], name: str) -> set[str]:
    """The package modules ``path`` imports: ``from .x import ...``, ``from . import x``, ``import
    <name>.x`` and ``from <name>.x import ...`` (``name`` the package's dotted name), wherever they stand."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                target = node.module
            elif node.level == 0 and node.module and node.module.startswith(name + "."):
                target = node.module[len(name) + 1:]
            elif node.level == 0 and node.module == name:
                target = None
            else:
                continue
            if target is None:  # from . import a, b: submodules (or names of __init__)
                found |= {a.name for a in node.names if a.name in modules} or {"__init__"}
            else:
                found.add(target.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {a.name[len(name) + 1:].split(".")[0] for a in node.names if a.name.startswith(name + ".")}
    return found & modules


def import_graph(package: pathlib.Path, name: str) -> dict[str, set[str]]:
    """Each module of the package in ``package`` (dotted name ``name``) -> the package modules it imports."""
    modules = {p.stem for p in package.glob("*.py")}
    return {m: _imported_modules(package / f"{m}.py", modules, name) - {m} for m in sorted(modules)}


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


def module_sizes(package: pathlib.Path) -> dict[str, int]:
    """Lines per module of the package in ``package``."""
    return {p.name: len(p.read_text().splitlines()) for p in package.glob("*.py")}
