#!/usr/bin/env python3
"""Merges the outputs of scripts/gpu-e2e.sh into docs/gpu-results.json and prints the docs/gpu.md table.

    gpu_results.py --bench bench.json --e2e e2e.json --tests gpu_device_test.json --gpu "NAME, MEM, DRIVER"
                   --out RESULTS/gpu-results.json --docs docs/gpu-results.json --table table.md

round_trips_identical is true only when every GpuRoundTrip test ran (none skipped) and passed. --out is
always written, with what there is; --docs and --table only when every required figure is there
(exit 1 otherwise), so that a run without a GPU never leaves a results file in docs/.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
from gpu_e2e import logic  # noqa: E402


def _load(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        return {"error": f"{path}: {e}"}


def round_trips(tests: dict) -> bool:
    """True when the GpuRoundTrip suite ran every test and none failed or was skipped."""
    cases = [t for s in tests.get("testsuites", []) if "GpuRoundTrip" in s.get("name", "")
             for t in s.get("testsuite", [])]
    return bool(cases) and all(t.get("result") == "COMPLETED" and not t.get("failures") for t in cases)


def main() -> int:
    p = argparse.ArgumentParser()
    for flag in ("--bench", "--e2e", "--tests", "--out", "--docs", "--table"):
        p.add_argument(flag, required=True)
    p.add_argument("--gpu", default="unknown GPU")
    a = p.parse_args()
    bench, e2e, tests = _load(a.bench), _load(a.e2e), _load(a.tests)
    machine = f"{a.gpu.strip()}; {os.cpu_count()} cores; {platform.node()}"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    r = logic.merge(bench, e2e, round_trips(tests), machine, date)
    for name, src in (("bench", bench), ("e2e", e2e)):
        if "skipped" in src or "error" in src:
            r[f"{name}_note"] = src.get("skipped", src.get("error"))
    Path(a.out).write_text(json.dumps(r, indent=2) + "\n")
    problems = logic.check_results(r)
    if problems:
        print("gpu_results: incomplete: " + "; ".join(problems))
        return 1
    Path(a.docs).write_text(json.dumps(r, indent=2) + "\n")
    table = logic.markdown_table(r)
    Path(a.table).write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
