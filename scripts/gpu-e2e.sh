#!/usr/bin/env bash
# The one device script: on a GPU machine, the GPU path's device tests, its throughput bench and the
# PyTorch end-to-end run, everything written under $OUT as it goes (the device tool brings $OUT back;
# build-gpu-results/ without it), merged into $OUT/gpu-results.json and, when every required figure is
# there, docs/gpu-results.json and $OUT/gpu-table.md.
#
#   here:        bash scripts/gpu-carry.sh
#   device tool: command "bash scripts/gpu-e2e.sh", carry ["build-gpu-carry"], timeout_s 300
#   a rerun:     command "bash scripts/gpu-e2e.sh --quick", carry ["build-gpu-carry"], timeout_s 180
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
[ "${1:-}" = "--quick" ] && QUICK=1
CARRY=$ROOT/${CARRY:-build-gpu-carry}
RESULTS=${OUT:-$ROOT/build-gpu-results}
BUDGET=${KVTIER_GPU_BUDGET:-$([ "$QUICK" = 1 ] && echo 150 || echo 270)}
mkdir -p "$RESULTS"
start=$SECONDS
log() { echo "gpu-e2e [$((SECONDS - start)) s] $*" | tee -a "$RESULTS/gpu-e2e.log"; }

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
  timeout --kill-after=5 "$t" "$@" >"$RESULTS/$out" 2>&1 &
  local pid=$!
  wait "$pid"
  local rc=$?
  log "$name: exit $rc$([ "$rc" -eq 124 ] && echo " (timed out after $t s)")"
  return 0
}

log "mode $([ "$QUICK" = 1 ] && echo quick || echo full), budget $BUDGET s, results in $RESULTS"
if [ ! -x "$CARRY/bin/gpu_device_test" ]; then
  log "no $CARRY/bin/gpu_device_test: run scripts/gpu-carry.sh on the build machine and carry $CARRY"
  exit 1
fi
# Only the carried libraries this machine lacks go on LD_LIBRARY_PATH (its own libstdc++, OpenSSL, ...
# stay first for PyTorch), found transitively: repeated over the binaries, libkvtier.so and the linked
# libraries until nothing new is missing.
rm -rf "$CARRY/missing"
if linked=$(bash scripts/carry-closure.sh link "$CARRY/lib" "$CARRY/missing" "$CARRY"/bin/* "$CARRY/libkvtier.so" \
            2>>"$RESULTS/gpu-e2e.log"); then
  log "carried libraries used: ${linked:-none}"
else
  log "some library is missing here and was not carried (above); continuing, the steps will say which fail"
fi
export LD_LIBRARY_PATH="$CARRY/missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
log "GPU: ${gpu:-none found by nvidia-smi}"
{ nvidia-smi 2>&1; uname -a; nproc; free -g; python3 -c 'import sys, torch; print(sys.version, torch.__version__, torch.version.cuda)' 2>&1; } \
  >"$RESULTS/machine.txt"
SCRATCH=$(mktemp -d /tmp/kvtier-gpu-e2e.XXXXXX)

# 1. Device tests: round trips for block_tokens 16..256 and fp8, more batches than slots, partial last
#    batches, layer groups, file:// round trips, a load after the engine's stream, graph capture refused,
#    caller-described pieces for an MLA latent cache and a head-major K/V cache (GpuPieces);
#    pinned memory; then the CPU-side ones.
step gpu_device_test 100 gpu_device_test.log \
  "$CARRY/bin/gpu_device_test" --gtest_output="json:$RESULTS/gpu_device_test.json"
log "gpu_device_test: $(grep -cE '^\[       OK \]' "$RESULTS/gpu_device_test.log") ok, $(grep -cE '^\[  SKIPPED \]' "$RESULTS/gpu_device_test.log") skipped lines, $(grep -cE '^\[  FAILED  \]' "$RESULTS/gpu_device_test.log") failed lines"
step gpu_pinned_test 40 gpu_pinned_test.log "$CARRY/bin/gpu_pinned_test" --gtest_output="json:$RESULTS/gpu_pinned_test.json"
for t in gpu_api_test gpu_plan_test; do step "$t" 30 "$t.log" "$CARRY/bin/$t"; done
# 1b. The connector's CUDA path for every layout it serves, small caches through the driver's engine
#     (python/tests/connectors/test_vllm_v1_gpu.py): FlashAttention by the block-table plan, FlashInfer,
#     MLA and head-major (cpu_attn) by pieces; reload equals the reference rows; and several KV cache
#     groups (full attention + sliding window, test_vllm_v1_hma.py) on FlashAttention's HND cache by
#     pieces (_gpu_grouped). Needs pytest there.
if python3 -c 'import pytest' 2>/dev/null; then
  step gpu_layouts_connector 45 layouts.log env -C python KVTIER_LIBRARY="$CARRY/libkvtier.so" \
    PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -q -p no:cacheprovider -rs \
    tests/connectors/test_vllm_v1_gpu.py tests/connectors/test_vllm_v1_hma.py -k reload_equals_recompute
  log "gpu_layouts_connector: $(tail -1 "$RESULTS/layouts.log")"
else
  log "gpu_layouts_connector: SKIPPED, no pytest on this machine (GpuPieces in gpu_device_test covers MLA and head-major)"
fi

# 2. Throughput next to its references (pinned H2D, file:// into host memory), llama-3.1-8b chunks.
if [ "$QUICK" = 1 ]; then bench_args=(--gib 1 --reps 2); else bench_args=(--gib 2 --reps 3); fi
step kvtier_gpu_bench 90 bench.log \
  "$CARRY/bin/kvtier_gpu_bench" --out "$RESULTS/bench.json" --dir "$SCRATCH/bench" "${bench_args[@]}"
log "kvtier_gpu_bench: $(tr '\n' ';' <"$RESULTS/bench.log")"
rm -rf "$SCRATCH/bench"

# 3. PyTorch end to end: recompute vs kvtier hits (mem://, file://), answers compared. No new level
#    starts in the last 60 s of its limit (a level takes up to ~50 s).
e2e_limit=$(limit 400)
e2e_args=()
[ "$QUICK" = 1 ] && e2e_args=(--quick)
if [ "$e2e_limit" -gt 0 ]; then
  deadline=$((e2e_limit > 80 ? e2e_limit - 60 : 20))
  (cd python && KVTIER_LIBRARY="$CARRY/libkvtier.so" PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    timeout --kill-after=5 "$e2e_limit" python3 -m gpu_e2e.run --out "$RESULTS/e2e.json" --dir "$SCRATCH/e2e" \
    --deadline "$deadline" "${e2e_args[@]}") >"$RESULTS/e2e.log" 2>&1 &
  pid=$!
  wait "$pid"
  rc=$?
  log "gpu_e2e: exit $rc$([ "$rc" -eq 124 ] && echo " (timed out after $e2e_limit s)"): $(grep '^gpu_e2e' "$RESULTS/e2e.log" | tr '\n' ';')"
else
  log "gpu_e2e: SKIPPED, $((BUDGET - (SECONDS - start))) s of the $BUDGET s budget left"
fi
# 3b. The same sessions through KvtierConnector (python/gpu_e2e/connector_run.py): 8K and 32K contexts
#     (--quick: 8K), mem:// and file://, the paged KV in vLLM's FlashAttention layout, loads through the
#     connector's CUDA path (kvtier.gpu) with a layer wait before each layer; $OUT/connector.json.
conn_args=()
[ "$QUICK" = 1 ] && conn_args=(--quick)
step gpu_e2e_connector 150 connector.log env -C python KVTIER_LIBRARY="$CARRY/libkvtier.so" \
  PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
  python3 -m gpu_e2e.connector_run --out "$RESULTS/connector.json" --dir "$SCRATCH/connector" "${conn_args[@]}"
log "gpu_e2e_connector: $(grep '^gpu_e2e connector' "$RESULTS/connector.log" | tr '\n' ';')"
rm -rf "$SCRATCH"

# 4. $OUT/gpu-results.json (always), docs/gpu-results.json and the table for docs/gpu.md (when complete).
python3 scripts/gpu_results.py --bench "$RESULTS/bench.json" --e2e "$RESULTS/e2e.json" \
  --tests "$RESULTS/gpu_device_test.json" --gpu "${gpu:-unknown GPU}" \
  --out "$RESULTS/gpu-results.json" --docs docs/gpu-results.json --table "$RESULTS/gpu-table.md" 2>&1 |
  tee -a "$RESULTS/gpu-e2e.log"
rc=${PIPESTATUS[0]}
[ -f docs/gpu-results.json ] && cp docs/gpu-results.json "$RESULTS/docs-gpu-results.json"
log "done in $((SECONDS - start)) s, results in $RESULTS (exit $rc)"
exit "$rc"
