#!/usr/bin/env bash
# The one device script: on a GPU machine, the GPU path's device tests (and a compute-sanitizer memcheck
# pass over the kernel tests), its throughput bench, the connector run and the PyTorch end-to-end run,
# merged into $OUT/gpu-results.json and, when every required figure is there, docs/gpu-results.json and
# $OUT/gpu-table.md (the device tool brings $OUT back; build-gpu-results/ without it).
#
#   here:        bash scripts/gpu-carry.sh
#   device tool: command "bash scripts/gpu-e2e.sh", carry ["build-gpu-carry"], timeout_s 300
#   a rerun:     command "bash scripts/gpu-e2e.sh --quick", carry ["build-gpu-carry"], timeout_s 180
#   dry run:     bash scripts/gpu-e2e.sh --dry-run (any machine, no carry: every step a stub; shows which
#                files land in $OUT; tests/gpu/gpu_e2e_dry_run_test.sh)
#
# At most 6 files land in $OUT (the device tool returns 8 at most): gpu-e2e.log (this script's log),
# logs.tar.gz (every step's log and JSON and machine.txt, re-packed after each step, so a run cut short
# keeps every step that finished), gpu-results.json, and when complete gpu-table.md and
# docs-gpu-results.json. Nothing else is written there.
#
# Budget: KVTIER_GPU_BUDGET seconds in all (270; 150 with --quick), under the tool's timeout_s. Each step
# gets min(its own limit, what is left minus 15 s for the merge), and a step with less than 20 s left is
# skipped (logged), so no step ever runs under `timeout 0` (no limit) or a negative limit. Every step runs
# in the background and is waited for by its PID; its log and JSON are under $OUT before the next starts,
# and gpu_bench and the e2e rewrite their JSON after every workload and level, so a run cut short keeps
# what it measured. Needs python3 with PyTorch (CUDA) there; no package registry.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
QUICK=0
DRY=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    --dry-run) DRY=1 ;;
    *) echo "gpu-e2e: unknown argument $arg (--quick, --dry-run)" >&2; exit 2 ;;
  esac
done
CARRY=$ROOT/${CARRY:-build-gpu-carry}
RESULTS=${OUT:-$ROOT/build-gpu-results}
BUDGET=${KVTIER_GPU_BUDGET:-$([ "$QUICK" = 1 ] && echo 150 || echo 270)}
mkdir -p "$RESULTS"
# Every step's log and JSON go to LOGS (not $OUT), packed into $RESULTS/logs.tar.gz after each step.
LOGS=$(mktemp -d /tmp/kvtier-gpu-logs.XXXXXX)
start=$SECONDS
log() { echo "gpu-e2e [$((SECONDS - start)) s] $*" | tee -a "$RESULTS/gpu-e2e.log"; }
pack() {  # packed outside $OUT first: no partial archive lands there beside the last complete one
  tar -czf "$LOGS.tar.gz" -C "$LOGS" . 2>>"$RESULTS/gpu-e2e.log" && mv -f "$LOGS.tar.gz" "$RESULTS/logs.tar.gz"
}

# limit MAX: the seconds a step may run: min(MAX, budget left - 15), or 0 (skip) when under 20.
limit() {
  local left=$((BUDGET - (SECONDS - start) - 15)) t=$1
  [ "$left" -lt "$t" ] && t=$left
  [ "$t" -lt 20 ] && t=0
  echo "$t"
}

# step NAME MAX LOG CMD...: runs CMD under timeout in the background, waits for its PID, logs the exit.
step() {
  local name=$1 max=$2 out=$3
  shift 3
  local t
  t=$(limit "$max")
  if [ "$t" -eq 0 ]; then
    log "$name: SKIPPED, $((BUDGET - (SECONDS - start))) s of the $BUDGET s budget left"
    return 0
  fi
  timeout --kill-after=5 "$t" bash -c 'if [ "$0" = 1 ]; then shift; echo "dry run: $*"; else shift; exec "$@"; fi' \
    "$DRY" - "$@" >"$LOGS/$out" 2>&1 &
  local pid=$!
  wait "$pid"
  local rc=$?
  log "$name: exit $rc$([ "$rc" -eq 124 ] && echo " (timed out after $t s)")"
  pack
  return 0
}

log "mode $([ "$QUICK" = 1 ] && echo quick || echo full)$([ "$DRY" = 1 ] && echo ", dry run"), budget $BUDGET s, results in $RESULTS"
if [ "$DRY" = 1 ]; then
  :  # no carry needed: nothing is run
elif [ ! -x "$CARRY/bin/gpu_device_test" ]; then
  log "no $CARRY/bin/gpu_device_test: run scripts/gpu-carry.sh on the build machine and carry $CARRY"
  exit 1
fi
# Only the carried libraries this machine lacks go on LD_LIBRARY_PATH (its own libstdc++, OpenSSL, ...
# stay first for PyTorch), found transitively: repeated over the binaries, libkvtier.so and the linked
# libraries until nothing new is missing.
rm -rf "$CARRY/missing"
if [ "$DRY" = 1 ]; then
  log "carried libraries: not looked at (dry run)"
elif linked=$(bash scripts/carry-closure.sh link "$CARRY/lib" "$CARRY/missing" "$CARRY"/bin/* "$CARRY/libkvtier.so" \
            2>>"$RESULTS/gpu-e2e.log"); then
  log "carried libraries used: ${linked:-none}"
else
  log "some library is missing here and was not carried (above); continuing, the steps will say which fail"
fi
export LD_LIBRARY_PATH="$CARRY/missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
log "GPU: ${gpu:-none found by nvidia-smi}"
{ nvidia-smi 2>&1; uname -a; nproc; free -g; python3 -c 'import sys, torch; print(sys.version, torch.__version__, torch.version.cuda)' 2>&1; } \
  >"$LOGS/machine.txt"
pack
SCRATCH=$(mktemp -d /tmp/kvtier-gpu-e2e.XXXXXX)

# 1. Device tests: round trips for block_tokens 16..256 and fp8, more batches than slots, partial last
#    batches, layer groups, file:// round trips, a load and a save after the engine's stream and after
#    the legacy default stream, no context on a device not given (a child process), graph capture
#    refused, caller-described pieces for an MLA latent cache and a head-major K/V cache (GpuPieces);
#    pinned memory; then the CPU-side ones.
step gpu_device_test 100 gpu_device_test.log \
  "$CARRY/bin/gpu_device_test" --gtest_output="json:$LOGS/gpu_device_test.json"
log "gpu_device_test: $(grep -cE '^\[       OK \]' "$LOGS/gpu_device_test.log") ok, $(grep -cE '^\[  SKIPPED \]' "$LOGS/gpu_device_test.log") skipped lines, $(grep -cE '^\[  FAILED  \]' "$LOGS/gpu_device_test.log") failed lines"
# 1a. compute-sanitizer memcheck over the kernel tests (the run kernel's scatter and gather for every
#     block size and dtype, pieces, fp8 rows that are not 16-byte multiples): an out-of-bounds or
#     misaligned access fails the step (exit 1) instead of passing on a lucky layout.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$sanitizer" ] || [ "$DRY" = 1 ]; then
  step memcheck 60 memcheck.log "${sanitizer:-compute-sanitizer}" --tool memcheck --error-exitcode 1 \
    "$CARRY/bin/gpu_device_test" \
    --gtest_filter='BlockSizes/*:Layouts/*:GpuDeviceTest.Fp8RowsNotSixteenByteMultiplesRoundTrip:GpuDeviceTest.MoreBatchesThanSlotsPartialLastBatchAndLayerGroups'
  log "memcheck: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$LOGS/memcheck.log" | tr '\n' ';')"
else
  log "memcheck: SKIPPED, no compute-sanitizer on this machine"
fi
step gpu_pinned_test 40 gpu_pinned_test.log "$CARRY/bin/gpu_pinned_test" --gtest_output="json:$LOGS/gpu_pinned_test.json"
for t in gpu_api_test gpu_plan_test; do step "$t" 30 "$t.log" "$CARRY/bin/$t"; done
# 1b. The connector's CUDA path for every layout it serves, small caches through the driver's engine
#     (python/tests/connectors/test_vllm_v1_gpu.py): FlashAttention by the block-table plan, FlashInfer,
#     MLA and head-major (cpu_attn) by pieces; reload equals the reference rows; and several KV cache
#     groups (full attention + sliding window, test_vllm_v1_hma.py) on FlashAttention's HND cache by
#     pieces (vllm/gpu_grouped). Needs pytest there.
if [ "$DRY" = 1 ] || python3 -c 'import pytest' 2>/dev/null; then
  step gpu_layouts_connector 45 layouts.log env -C python KVTIER_LIBRARY="$CARRY/libkvtier.so" \
    PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -q -p no:cacheprovider -rs \
    tests/connectors/test_vllm_v1_gpu.py tests/connectors/test_vllm_v1_hma.py -k reload_equals_recompute
  log "gpu_layouts_connector: $(tail -1 "$LOGS/layouts.log")"
else
  log "gpu_layouts_connector: SKIPPED, no pytest on this machine (GpuPieces in gpu_device_test covers MLA and head-major)"
fi

# 2. Throughput next to its references (pinned H2D, file:// into host memory), llama-3.1-8b chunks.
if [ "$QUICK" = 1 ]; then bench_args=(--gib 1 --reps 2); else bench_args=(--gib 2 --reps 3); fi
step kvtier_gpu_bench 90 bench.log \
  "$CARRY/bin/kvtier_gpu_bench" --out "$LOGS/bench.json" --dir "$SCRATCH/bench" "${bench_args[@]}"
log "kvtier_gpu_bench: $(tr '\n' ';' <"$LOGS/bench.log")"
rm -rf "$SCRATCH/bench"

# 3. The sessions through KvtierConnector (python/gpu_e2e/connector_run.py) before the plain e2e, so
#    that the only run of the vLLM path at real size is never the step the budget cuts: 8K and 32K
#    contexts (--quick: 8K), mem:// and file://, the paged KV in vLLM's FlashAttention layout, loads
#    through the connector's CUDA path (kvtier.gpu) with a layer wait before each layer; connector.json.
conn_args=()
[ "$QUICK" = 1 ] && conn_args=(--quick)
step gpu_e2e_connector 150 connector.log env -C python KVTIER_LIBRARY="$CARRY/libkvtier.so" \
  PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
  python3 -m gpu_e2e.connector_run --out "$LOGS/connector.json" --dir "$SCRATCH/connector" "${conn_args[@]}"
log "gpu_e2e_connector: $(grep '^gpu_e2e connector' "$LOGS/connector.log" | tr '\n' ';')"

# 4. PyTorch end to end: recompute vs kvtier hits (mem://, file://), answers compared. No new level
#    starts in the last 60 s of its limit (a level takes up to ~50 s).
e2e_limit=$(limit 400)
e2e_args=()
[ "$QUICK" = 1 ] && e2e_args=(--quick)
if [ "$e2e_limit" -gt 0 ]; then
  deadline=$((e2e_limit > 80 ? e2e_limit - 60 : 20))
  (cd python && KVTIER_LIBRARY="$CARRY/libkvtier.so" PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    timeout --kill-after=5 "$e2e_limit" bash -c 'if [ "$0" = 1 ]; then shift; echo "dry run: $*"; else shift; exec "$@"; fi' \
    "$DRY" - python3 -m gpu_e2e.run --out "$LOGS/e2e.json" --dir "$SCRATCH/e2e" \
    --deadline "$deadline" "${e2e_args[@]}") >"$LOGS/e2e.log" 2>&1 &
  pid=$!
  wait "$pid"
  rc=$?
  log "gpu_e2e: exit $rc$([ "$rc" -eq 124 ] && echo " (timed out after $e2e_limit s)"): $(grep '^gpu_e2e' "$LOGS/e2e.log" | tr '\n' ';')"
  pack
else
  log "gpu_e2e: SKIPPED, $((BUDGET - (SECONDS - start))) s of the $BUDGET s budget left"
fi
rm -rf "$SCRATCH"

# 5. $OUT/gpu-results.json (always), docs/gpu-results.json and the table for docs/gpu.md (when complete;
#    never in a dry run, which writes its docs file among the logs).
docs=docs/gpu-results.json
[ "$DRY" = 1 ] && docs=$LOGS/docs-gpu-results.json
python3 scripts/gpu_results.py --bench "$LOGS/bench.json" --e2e "$LOGS/e2e.json" \
  --tests "$LOGS/gpu_device_test.json" --gpu "${gpu:-unknown GPU}" \
  --out "$RESULTS/gpu-results.json" --docs "$docs" --table "$RESULTS/gpu-table.md" 2>&1 |
  tee -a "$RESULTS/gpu-e2e.log"
rc=${PIPESTATUS[0]}
[ "$DRY" = 0 ] && [ -f docs/gpu-results.json ] && cp docs/gpu-results.json "$RESULTS/docs-gpu-results.json"
pack
rm -rf "$LOGS" "$LOGS.tar.gz"
[ "$DRY" = 1 ] && [ -f "$RESULTS/gpu-results.json" ] && rc=0  # a dry run has no figures to be complete
log "done in $((SECONDS - start)) s, results in $RESULTS (exit $rc)"
exit "$rc"
