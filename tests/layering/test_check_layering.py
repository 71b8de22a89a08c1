"""scripts/check-layering.py passes a tree that follows the layers and fails each planted violation."""
import os
import subprocess
import sys

import pytest

SCRIPT = os.environ.get("KVTIER_CHECK_LAYERING") or os.path.join(
    os.path.dirname(__file__), "..", "..", "scripts", "check-layering.py")

# A small tree that follows every rule: each file names its includes.
GOOD_TREE = {
    "include/kvtier/tier.h": ['kvtier/status.h'],
    "include/kvtier/status.h": [],
    "src/core/url.h": ['kvtier/status.h'],
    "src/io/chunk_dir.h": ['core/url.h'],
    "src/tiers/object/object_tier.h": ['io/chunk_dir.h'],
    "src/tiers/redis/redis_client.cc": ['tiers/object/object_tier.h', 'tiers/redis/redis_client.h'],
    "src/tiers/redis/redis_client.h": [],
    "src/tiers/fs/fs_tier.h": ['io/chunk_dir.h', 'core/url.h'],
    "src/store/store.cc": ['tiers/fs/fs_tier.h', 'tiers/redis/redis_client.h'],
    "src/gpu/plan.cu": ['core/url.h'],
    "src/capi/capi.cc": ['store/store.h', 'gpu/plan.h'],
    "src/store/store.h": [],
    "src/gpu/plan.h": [],
    "src/eval/engine/engine.h": ['store/store.h'],
    "src/eval/ttft/run.cc": ['eval/engine/engine.h', 'tiers/fs/fs_tier.h'],
    "src/tools/cmd_bench.cc": ['eval/ttft/run.h', 'store/store.h'],
    "src/eval/ttft/run.h": [],
}


def write_tree(root, tree):
    for rel, targets in tree.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("#pragma once\n#include <vector>\n")
            for t in targets:
                f.write('#include "%s"\n' % t)


def run(root):
    return subprocess.run([sys.executable, SCRIPT, str(root)], capture_output=True, text=True)


def test_a_tree_that_follows_the_layers_passes(tmp_path):
    write_tree(tmp_path, GOOD_TREE)
    r = run(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "follow the layers" in r.stdout


@pytest.mark.parametrize("where,include,rule", [
    ("src/store/store.cc", "eval/engine/engine.h", "a library folder includes src/eval/"),
    ("src/core/url.h", "tools/cmd_bench.cc", "a library folder includes src/tools/"),
    ("src/capi/capi.cc", "eval/ttft/run.h", "a library folder includes src/eval/"),
    ("src/tiers/fs/fs_tier.h", "tiers/redis/redis_client.h", "a tier includes another tier"),
    ("src/tiers/object/object_tier.h", "tiers/fs/fs_tier.h", "a tier includes another tier"),
    ("src/io/chunk_dir.h", "tiers/fs/fs_tier.h", "includes a higher layer"),
    ("src/core/url.h", "store/store.h", "includes a higher layer"),
    ("include/kvtier/tier.h", "core/url.h", "the public API includes only include/kvtier/"),
])
def test_each_planted_violation_fails_and_is_named(tmp_path, where, include, rule):
    tree = dict(GOOD_TREE)
    tree[where] = tree[where] + [include]
    write_tree(tmp_path, tree)
    r = run(tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "%s:" % where in r.stdout and include in r.stdout and rule in r.stdout, r.stdout
    assert "1 violation(s)" in r.stdout


def test_an_unknown_top_level_folder_is_refused(tmp_path):
    tree = dict(GOOD_TREE)
    tree["src/newthing/x.cc"] = ["core/url.h"]
    write_tree(tmp_path, tree)
    r = run(tmp_path)
    assert r.returncode == 1 and "src/newthing/ is not a known layer" in r.stdout, r.stdout


def test_a_folder_that_is_not_a_kvtier_tree_is_refused(tmp_path):
    r = run(tmp_path)
    assert r.returncode == 2 and "not a kvtier source tree" in r.stderr


def test_includes_of_missing_or_test_headers_are_not_layers(tmp_path):
    # "support/temp_dir.h" does not exist under src/: it is a test header, not a layer of the library.
    tree = dict(GOOD_TREE)
    tree["src/core/url.h"] = ["support/temp_dir.h", "kvtier/status.h"]
    write_tree(tmp_path, tree)
    assert run(tmp_path).returncode == 0
