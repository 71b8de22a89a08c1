#!/usr/bin/env bash
# On a GPU machine: the GPU path's device tests, its throughput bench and the PyTorch end-to-end run,
# merged into $OUT/gpu-results.json (the device tool brings $OUT back; build-gpu-results/ without it)
# with every log, and into docs/gpu-results.json when every required figure is there.
#
#   bash scripts/gpu-carry.sh                      # here: build, gather build-gpu-carry/
#   device tool: command "bash scripts/gpu-e2e.sh", carry ["build-gpu-carry"], timeout_s 480
#
# Needs python3 with PyTorch (CUDA) there; no package registry. Budget: <= 8 minutes in all (each step
# has its own timeout). Background jobs are waited for by PID.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=$ROOT/${CARRY:-build-gpu-carry}
RESULTS=${OUT:-$ROOT/build-gpu-results}
mkdir -p "$RESULTS"
start=$SECONDS
log() { echo "gpu-e2e [$((SECONDS - start)) s] $*" | tee -a "$RESULTS/gpu-e2e.log"; }

if [ ! -x "$CARRY/bin/gpu_device_test" ]; then
  log "no $CARRY/bin/gpu_device_test: run scripts/gpu-carry.sh on the build machine and carry $CARRY"
  exit 1
fi
# Only the carried libraries this machine lacks go on LD_LIBRARY_PATH (its own libstdc++, OpenSSL, ...
# stay first for PyTorch).
mkdir -p "$CARRY/missing"
for elf in "$CARRY"/bin/* "$CARRY/libkvtier.so"; do
  ldd "$elf" | awk '/not found/ {print $1}'
done | sort -u | while read -r lib; do
  if [ -f "$CARRY/lib/$lib" ]; then ln -sf "../lib/$lib" "$CARRY/missing/$lib"; else echo "gpu-e2e: $lib missing and not carried"; fi
done
export LD_LIBRARY_PATH="$CARRY/missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log "carried libraries used: $(ls "$CARRY/missing" | tr '\n' ' ')"

gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
log "GPU: ${gpu:-none found by nvidia-smi}"
SCRATCH=$(mktemp -d /tmp/kvtier-gpu-e2e.XXXXXX)

# 1. Device tests (round trips for block_tokens 16..256, layer-wise, misses), then the CPU-side ones.
timeout 150 "$CARRY/bin/gpu_device_test" --gtest_output="json:$RESULTS/gpu_device_test.json" \
  >"$RESULTS/gpu_device_test.log" 2>&1 &
pid=$!
wait "$pid"
log "gpu_device_test exit $? ($(grep -cE '^\[ +OK \]' "$RESULTS/gpu_device_test.log") ok, $(grep -cE '^\[  SKIPPED \]' "$RESULTS/gpu_device_test.log") skipped lines, $(grep -cE '^\[  FAILED  \]' "$RESULTS/gpu_device_test.log") failed lines)"
for t in gpu_api_test gpu_plan_test; do
  timeout 60 "$CARRY/bin/$t" >"$RESULTS/$t.log" 2>&1 &
  pid=$!
  wait "$pid"
  log "$t exit $?"
done

# 2. Throughput next to its references (pinned H2D, file:// into host memory), llama-3.1-8b chunks.
timeout 150 "$CARRY/bin/kvtier_gpu_bench" --out "$RESULTS/bench.json" --dir "$SCRATCH/bench" --gib 2 \
  --reps 3 >"$RESULTS/bench.log" 2>&1 &
pid=$!
wait "$pid"
log "kvtier_gpu_bench exit $?: $(tr '\n' ';' <"$RESULTS/bench.log")"
rm -rf "$SCRATCH/bench"

# 3. PyTorch end to end: recompute vs kvtier hits (mem://, file://), answers compared.
left=$((450 - (SECONDS - start)))
(cd python && KVTIER_LIBRARY="$CARRY/libkvtier.so" PYTHONDONTWRITEBYTECODE=1 \
  timeout "$left" python3 -m gpu_e2e.run --out "$RESULTS/e2e.json" --dir "$SCRATCH/e2e" \
  --deadline $((left - 150))) >"$RESULTS/e2e.log" 2>&1 &
pid=$!
wait "$pid"
log "gpu_e2e exit $?: $(grep '^gpu_e2e' "$RESULTS/e2e.log" | tr '\n' ';')"
rm -rf "$SCRATCH"

# 4. docs/gpu-results.json and the table for docs/gpu.md.
python3 scripts/gpu_results.py --bench "$RESULTS/bench.json" --e2e "$RESULTS/e2e.json" \
  --tests "$RESULTS/gpu_device_test.json" --gpu "${gpu:-unknown GPU}" \
  --out "$RESULTS/gpu-results.json" --docs docs/gpu-results.json --table "$RESULTS/gpu-table.md" 2>&1 |
  tee -a "$RESULTS/gpu-e2e.log"
rc=${PIPESTATUS[0]}
log "done, results in $RESULTS (exit $rc)"
exit "$rc"
