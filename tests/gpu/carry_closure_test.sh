#!/usr/bin/env bash
# scripts/carry-closure.sh on a machine that lacks this one's libraries: a chroot holding only the C/C++
# runtime (ld-linux, glibc's libraries, libstdc++, libgcc_s) and a carry folder. `gather` copies the closure of
# the ELFs here; `link`, asking the loader inside the chroot, links what is missing there, repeating until
# nothing new (libkvtier.so -> librados -> libceph-common by RUNPATH, libfmt, boost, ...). Then, with only
# the carry folder on LD_LIBRARY_PATH, the loader finds every library of libkvtier.so and the carried test
# binary runs to the end. Before the link step the same binary must fail to start (the root really lacks
# the libraries, so the check can fail).
#   carry_closure_test.sh REPO BINARY LIBKVTIER     exit 77 (skipped) only when chroot is not permitted
set -euo pipefail
REPO=$1 BIN=$2 LIB=$3
CHROOT=$(command -v chroot || echo /usr/sbin/chroot)
ROOT=$(mktemp -d /tmp/kvtier-carry-test.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
mkdir -p "$ROOT/lib64" "$ROOT/lib/x86_64-linux-gnu" "$ROOT/tmp" "$ROOT/bin" "$ROOT/carry/bin"
cp /usr/bin/env "$ROOT/bin/"  # needs libc only: sets the loader's trace variable inside the root
cp /lib64/ld-linux-x86-64.so.2 "$ROOT/lib64/"
# glibc (what carry-closure.sh never carries) and the C++ runtime
for l in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libutil.so.1 libresolv.so.2 libstdc++.so.6 libgcc_s.so.1; do
  if [ -e "/lib/x86_64-linux-gnu/$l" ]; then cp -L "/lib/x86_64-linux-gnu/$l" "$ROOT/lib/x86_64-linux-gnu/"; fi
done
if ! chroot "$ROOT" /lib64/ld-linux-x86-64.so.2 --version >/dev/null 2>&1; then
  echo "carry_closure_test: SKIPPED: chroot is not permitted here (needs root or CAP_SYS_CHROOT)"
  exit 77
fi
cp "$BIN" "$ROOT/carry/bin/"
cp -L "$LIB" "$ROOT/carry/libkvtier.so"
bin="$ROOT/carry/bin/$(basename "$BIN")"
bash "$REPO/scripts/carry-closure.sh" gather "$ROOT/carry/lib" "$bin" "$ROOT/carry/libkvtier.so"
echo "carry_closure_test: carried $(ls "$ROOT/carry/lib" | wc -l) libraries: $(ls "$ROOT/carry/lib" | tr '\n' ' ')"
if env -i "$CHROOT" "$ROOT" "/carry/bin/$(basename "$BIN")" >"$ROOT/bare.log" 2>&1 ||
   ! grep -q "error while loading shared libraries" "$ROOT/bare.log"; then
  echo "carry_closure_test: FAILED: without the carry folder the binary did not fail to load: the root is not bare" >&2
  exit 1
fi
linked=$(KVTIER_CARRY_ROOT="$ROOT" bash "$REPO/scripts/carry-closure.sh" link "$ROOT/carry/lib" "$ROOT/carry/missing" \
  "$bin" "$ROOT/carry/libkvtier.so")
echo "carry_closure_test: linked $(wc -w <<<"$linked") libraries"
case " $linked " in *" libceph-common.so.2 "*) ;; *)
  echo "carry_closure_test: FAILED: libceph-common.so.2 (librados's RUNPATH) was not linked" >&2; exit 1 ;;
esac
trace=$(env -i "$CHROOT" "$ROOT" /bin/env LD_TRACE_LOADED_OBJECTS=1 LD_LIBRARY_PATH=/carry/missing \
  /lib64/ld-linux-x86-64.so.2 /carry/libkvtier.so 2>&1 || true)
if grep -q "not found" <<<"$trace"; then
  echo "carry_closure_test: FAILED: libkvtier.so still misses: $(grep 'not found' <<<"$trace" | tr '\n' ' ')" >&2
  exit 1
fi
# The bare root has no /proc, which shm:// needs (owners' process start times): that one test runs outside
# the chroot, in gpu_api_test itself; here the point is that every library resolves.
env -i LD_LIBRARY_PATH=/carry/missing TMPDIR=/tmp "$CHROOT" "$ROOT" "/carry/bin/$(basename "$BIN")" \
  --gtest_filter=-GpuApiTest.StoreOffersItsShmMappingForPinning >"$ROOT/run.log" 2>&1 || {
  echo "carry_closure_test: FAILED: the carried binary did not run:" >&2
  tail -20 "$ROOT/run.log" >&2
  exit 1
}
echo "carry_closure_test: libkvtier.so resolves every library and $(basename "$BIN") ran: $(grep -E '^\[  PASSED  \]' "$ROOT/run.log")"
