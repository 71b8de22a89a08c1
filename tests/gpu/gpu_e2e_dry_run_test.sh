#!/usr/bin/env bash
# scripts/gpu-e2e.sh --dry-run on this machine (no GPU, no carry): every step is a stub, and what lands in
# $OUT is what a device run leaves there: at most 6 files (the device tool returns 8 at most), flat, with
# every step's log in logs.tar.gz and gpu-results.json written; docs/gpu-results.json is not touched.
# Usage: gpu_e2e_dry_run_test.sh SOURCE_DIR
set -uo pipefail
src=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
docs_before=$(cat "$src/docs/gpu-results.json" 2>/dev/null | sha256sum)
if ! OUT=$out bash "$src/scripts/gpu-e2e.sh" --dry-run >"$out.log" 2>&1; then
  cat "$out.log"; rm -f "$out.log"; echo "FAIL: the dry run exited non-zero"; exit 1
fi
rm -f "$out.log"
fail=0
files=$(find "$out" -mindepth 1 | wc -l)
find "$out" -mindepth 1 -type d | grep -q . && { echo "FAIL: folders in \$OUT"; fail=1; }
echo "files in \$OUT: $files: $(ls "$out" | tr '\n' ' ')"
[ "$files" -le 6 ] || { echo "FAIL: $files files in \$OUT, more than 6"; fail=1; }
for f in gpu-e2e.log logs.tar.gz gpu-results.json; do
  [ -s "$out/$f" ] || { echo "FAIL: no $f in \$OUT"; fail=1; }
done
logs=$(tar tzf "$out/logs.tar.gz" 2>/dev/null)
for step in gpu_device_test memcheck gpu_pinned_test gpu_api_test gpu_plan_test layouts bench connector e2e; do
  echo "$logs" | grep -qx "./$step.log" || { echo "FAIL: no $step.log in logs.tar.gz"; fail=1; }
done
# the connector run comes before the e2e
conn=$(grep -n 'gpu_e2e_connector: exit' "$out/gpu-e2e.log" | head -1 | cut -d: -f1)
e2e=$(grep -n 'gpu_e2e: exit' "$out/gpu-e2e.log" | head -1 | cut -d: -f1)
[ -n "$conn" ] && [ -n "$e2e" ] && [ "$conn" -lt "$e2e" ] || { echo "FAIL: the connector run is not before the e2e"; fail=1; }
[ "$(cat "$src/docs/gpu-results.json" 2>/dev/null | sha256sum)" = "$docs_before" ] ||
  { echo "FAIL: the dry run changed docs/gpu-results.json"; fail=1; }
[ "$fail" = 0 ] && echo "PASS"
exit "$fail"
