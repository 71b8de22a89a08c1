#!/usr/bin/env python3
"""Checks the layering of kvtier's source tree from its #include lines (src/README.md states the rules).

Usage: check-layering.py [ROOT]   (ROOT: the repository, default: this script's parent folder)

Rules, over every C/C++/CUDA file under ROOT/src and ROOT/include:
  1. The public API (include/kvtier/) includes only the public API.
  2. No library folder includes the evaluation apparatus (src/eval/) or the CLI (src/tools/).
  3. A tier (src/tiers/NAME/) includes no other tier, except the object-store base
     (src/tiers/object/) that the object-store tiers are built on.
  4. A folder never includes a folder of a higher layer:
     core < io < tiers < store, testing < gpu, metrics, capi, progress, events < eval < tools.
Prints one line per violation (file:line: what it includes, and the rule) and exits 1 when there is any,
2 when ROOT is not a kvtier tree, 0 otherwise.
"""
import os
import re
import sys

SOURCE_SUFFIXES = (".h", ".hpp", ".cc", ".cpp", ".c", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

# The layer of each top-level folder of src/ (a higher number sits above); src/tiers/* and src/eval/*
# take their parent's layer.
LAYERS = {
    "core": 0,
    "io": 1,
    "tiers": 2,
    "store": 3,
    "testing": 3,
    "gpu": 4,
    "metrics": 4,
    "capi": 4,
    "progress": 4,
    "events": 4,
    "eval": 5,
    "tools": 6,
}
APPARATUS = ("eval", "tools")  # folders no library may include
TIER_BASE = "object"  # the one tier other tiers may include


def unit_of(rel):
    """The unit a path under src/ belongs to: 'core', 'tiers/fs', 'eval/engine', ... or None."""
    parts = rel.split("/")
    if not parts or parts[0] not in LAYERS:
        return None
    if parts[0] in ("tiers", "eval") and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    return parts[0]


def top(unit):
    return unit.split("/")[0]


def violation(src_unit, dst_unit):
    """Why src_unit may not include dst_unit, or None when it may."""
    if src_unit == dst_unit:
        return None
    s, d = top(src_unit), top(dst_unit)
    if d in APPARATUS and s not in APPARATUS:
        return "a library folder includes src/%s/" % d
    if s == "tiers" and d == "tiers" and dst_unit != "tiers/" + TIER_BASE:
        return "a tier includes another tier (only src/tiers/%s/ is shared)" % TIER_BASE
    if LAYERS[d] > LAYERS[s]:
        return "src/%s/ (layer %d) includes a higher layer, src/%s/ (layer %d)" % (
            s, LAYERS[s], d, LAYERS[d])
    return None


def included_unit(src_root, target):
    """The src/ unit an include names, or None for the public API, system and test headers."""
    if not os.path.exists(os.path.join(src_root, target)):
        return None
    return unit_of(target)


def source_files(folder):
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.join(dirpath, name)


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield lineno, m.group(1)


def check(root):
    src_root = os.path.join(root, "src")
    inc_root = os.path.join(root, "include")
    problems = []
    for path in source_files(inc_root):
        for lineno, target in includes(path):
            if not target.startswith("kvtier/") and included_unit(src_root, target):
                problems.append("%s:%d: includes \"%s\": the public API includes only include/kvtier/"
                                % (os.path.relpath(path, root), lineno, target))
    for path in source_files(src_root):
        rel = os.path.relpath(path, src_root)
        src_unit = unit_of(rel)
        if src_unit is None:
            if "/" in rel:
                problems.append("%s: src/%s/ is not a known layer (add it to LAYERS in %s and to src/README.md)"
                                % (os.path.relpath(path, root), rel.split("/")[0], os.path.basename(__file__)))
            continue
        for lineno, target in includes(path):
            dst_unit = included_unit(src_root, target)
            why = dst_unit and violation(src_unit, dst_unit)
            if why:
                problems.append("%s:%d: includes \"%s\": %s" % (os.path.relpath(path, root), lineno, target, why))
    return problems


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, "src", "core")):
        print("check-layering: %s is not a kvtier source tree (no src/core/)" % root, file=sys.stderr)
        return 2
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print("check-layering: %d violation(s); the rules are in src/README.md" % len(problems))
        return 1
    print("check-layering: %s: the includes follow the layers" % root)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
