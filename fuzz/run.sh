#!/usr/bin/env bash
# Runs every built fuzz target for a bounded time over its committed seeds (fuzz/corpus/<target>) and
# a scratch corpus (fuzz/corpus-work/<target>, not committed), then prints one line per target with
# its executions. Exits non-zero if any target finds a crash; the input is left in fuzz/corpus-work.
#   fuzz/run.sh <build dir> <seconds per target>
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
seconds=${2:-60}
summary=$build/fuzz-summary.txt
: >"$summary"
status=0
for bin in "$build"/fuzz/*_fuzz; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin" _fuzz)
  seeds=fuzz/corpus/$name
  work=fuzz/corpus-work/$name
  mkdir -p "$seeds" "$work"
  log=$build/fuzz-$name.log
  if "$bin" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$work/" "$work" "$seeds" >"$log" 2>&1; then
    result=ok
  else
    result="FAILED (see $log; input in $work/)"
    status=1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  corpus=$(ls "$work" | wc -l)
  printf '%-14s %ss  executions %-10s corpus %-6s %s\n' "$name" "$seconds" "$execs" "$corpus" "$result" \
    | tee -a "$summary"
done
exit $status
