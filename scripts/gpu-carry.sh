#!/usr/bin/env bash
# Builds the GPU path here (KVTIER_CUDA=ON) and gathers what scripts/gpu-e2e.sh needs on a GPU machine
# into build-gpu-carry/ (git-ignored through /build*/), to be named in the device tool's `carry`:
#   bin/         gpu_device_test, gpu_pinned_test, gpu_api_test, gpu_plan_test, kvtier_gpu_bench
#                (debug info stripped)
#   libkvtier.so the C API with the GPU path, for python/kvtier (KVTIER_LIBRARY)
#   lib/         the transitive closure of the shared libraries they load (scripts/carry-closure.sh
#                gather: librados -> libceph-common by its RUNPATH, libfmt, boost, libibverbs, ...),
#                except glibc's and the C++ runtime's: the GPU machine has its own, newer ones (ours would
#                shadow PyTorch's). gpu-e2e.sh puts on LD_LIBRARY_PATH only those the machine lacks
#                (carry-closure.sh link, repeated until nothing new is missing).
# The CUDA runtime is linked statically: the binaries need only the driver's libcuda.so.1 there.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CARRY=${CARRY:-build-gpu-carry}
if [ -f /root/.ccache-env ]; then . /root/.ccache-env; fi
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVTIER_WERROR=ON -DKVTIER_CUDA=ON >/dev/null
if ! grep -q '^KVTIER_CUDA:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  echo "gpu-carry: KVTIER_CUDA is OFF in $BUILD (see cmake's KVTIER_CUDA message): nothing to carry" >&2
  exit 1
fi
BINS=(tests/gpu/gpu_device_test tests/gpu/gpu_pinned_test tests/gpu/gpu_api_test tests/gpu/gpu_plan_test
      bench/kvtier_gpu_bench)
nice -n 19 cmake --build "$BUILD" -j"${JOBS:-2}" --target $(for t in "${BINS[@]}"; do basename "$t"; done) kvtier_shared
rm -rf "$CARRY"
mkdir -p "$CARRY/bin" "$CARRY/lib"
for t in "${BINS[@]}"; do
  strip --strip-debug -o "$CARRY/bin/$(basename "$t")" "$BUILD/$t"
done
strip --strip-debug -o "$CARRY/libkvtier.so" "$(readlink -f "$BUILD/src/capi/libkvtier.so")"
bash scripts/carry-closure.sh gather "$CARRY/lib" "$CARRY"/bin/* "$CARRY/libkvtier.so"
bytes=$(du -sb "$CARRY" | cut -f1)
echo "gpu-carry: $CARRY holds $((bytes >> 20)) MiB: $(ls "$CARRY/bin" | tr '\n' ' ')+ libkvtier.so; lib/ ($(ls "$CARRY/lib" | wc -l)): $(ls "$CARRY/lib" | tr '\n' ' ')"
if [ "$bytes" -gt $((60 << 20)) ]; then
  echo "gpu-carry: more than 60 MiB: the device tool carries 64 MiB at most" >&2
  exit 1
fi
