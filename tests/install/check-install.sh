#!/usr/bin/env bash
# Installs kvtier out of a build tree and builds programs against the installed copy (ctest install_*):
#   check-install.sh prefix BUILD_DIR   `cmake --install BUILD_DIR --prefix TMP/prefix`
#   check-install.sh deb BUILD_DIR      `cpack` (make deb) into TMP, checks the package's fields and files
#                                       (dpkg-deb), extracts it into TMP/root (nothing is installed on
#                                       the system)
# then, against that copy: the files and SONAME, the installed CLI, a C and a C++ program (consumer/)
# built with pkg-config and with find_package(kvtier), each run and checked to use the installed
# library, and the Python package (without a library of its own, KVTIER_LIBRARY unset) finding it by
# its SONAME. Exits non-zero at the first failure, saying which.
set -euo pipefail
mode=${1:?usage: check-install.sh prefix|deb BUILD_DIR}
build=$(cd "${2:?usage: check-install.sh prefix|deb BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }
# The cmake and cpack of the CMake that configured BUILD_DIR (ctest passes them), not whichever is first
# on PATH: CPack 3.x and 4.x write different packages (check-deb.sh).
cmake=${KVTIER_CMAKE:-cmake}
cpack=${KVTIER_CPACK:-cpack}

case "$mode" in
  prefix)
    step "$cmake --install $build --prefix $tmp/prefix"
    "$cmake" --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
    prefix=$tmp/prefix
    sysroot=""
    ;;
  deb)
    step "$cpack (make deb) into $tmp/pkg: CPack $("$cpack" --version | head -1 | awk '{print $3}')"
    (cd "$tmp" && "$cpack" --config "$build/CPackConfig.cmake" -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1) ||
      { cat "$tmp/cpack.log"; fail "cpack"; }
    deb=$(ls "$tmp"/pkg/kvtier_*.deb) || fail "no kvtier_*.deb in $tmp/pkg"
    bash "$here/check-deb.sh" "$deb"
    step "check-deb.sh's ldconfig rule on repacked variants"
    bash "$here/check-deb-ldconfig.sh" "$deb"
    dpkg-deb -x "$deb" "$tmp/root"
    prefix=$tmp/root/usr
    sysroot=$tmp/root
    ;;
  *) fail "mode must be prefix or deb, not '$mode'" ;;
esac
lib=$prefix/lib

step "installed files"
for f in bin/kvtier lib/libkvtier.so lib/libkvtier.so.1 include/kvtier/kvtier.h lib/pkgconfig/kvtier.pc \
         lib/cmake/kvtier/kvtierConfig.cmake lib/cmake/kvtier/kvtierConfigVersion.cmake \
         lib/cmake/kvtier/kvtierTargets.cmake share/kvtier/systemd/kvtier-serve.service \
         share/kvtier/systemd/kvtier-gc@.timer share/kvtier/kubernetes/kustomization.yaml; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
[ "$(readlink "$lib/libkvtier.so")" = libkvtier.so.1 ] || fail "libkvtier.so does not link to libkvtier.so.1"
soname=$(objdump -p "$lib/libkvtier.so.1" | awk '$1 == "SONAME" {print $2}')
[ "$soname" = libkvtier.so.1 ] || fail "SONAME is '$soname', not libkvtier.so.1"
abi=$(sed -n 's/^#define KVTIER_ABI_VERSION \([0-9]*\)u$/\1/p' "$prefix/include/kvtier/kvtier.h")
[ "$soname" = "libkvtier.so.$abi" ] || fail "SONAME $soname does not name KVTIER_ABI_VERSION '$abi' of kvtier.h"
if objdump -p "$lib/libkvtier.so.1" "$prefix/bin/kvtier" | grep -E 'R(UN)?PATH'; then
  fail "an installed binary keeps a build RPATH"
fi
pc_prefix=${prefix#"$sysroot"}   # the prefix installed to: /usr inside the package
grep -qx "prefix=$pc_prefix" "$lib/pkgconfig/kvtier.pc" ||
  fail "kvtier.pc's prefix is not the installed one: $(grep ^prefix= "$lib/pkgconfig/kvtier.pc")"
"$prefix/bin/kvtier" --help | grep -q ' gc ' || fail "the installed kvtier CLI does not list its commands"

# Each program prints "kvtier VERSION from LIBRARY-FILE: ..."; LIBRARY-FILE must be the installed copy.
run_consumer() {
  local what=$1; shift
  local out
  out=$("$@") || fail "$what: exited $?"
  echo "$what: $out"
  case "$out" in
    "kvtier "*" from $lib/libkvtier.so.1: saved and loaded "*) ;;
    *) fail "$what did not run against $lib/libkvtier.so.1" ;;
  esac
}

step "pkg-config: C and C++ programs"
pc_env=(env PKG_CONFIG_LIBDIR="$lib/pkgconfig" PKG_CONFIG_PATH= PKG_CONFIG_SYSROOT_DIR="$sysroot"
        PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1)
pc_out=$("${pc_env[@]}" pkg-config --cflags --libs kvtier) || fail "pkg-config --cflags --libs kvtier"
read -r -a pc_flags <<<"$pc_out"
cc -std=c11 -Wall -Werror "$here/consumer/consumer.c" "${pc_flags[@]}" -o "$tmp/consumer_c"
c++ -std=c++17 -Wall -Werror "$here/consumer/consumer.cc" "${pc_flags[@]}" -o "$tmp/consumer_cxx"
run_consumer "pkg-config C" env LD_LIBRARY_PATH="$lib" "$tmp/consumer_c"
run_consumer "pkg-config C++" env LD_LIBRARY_PATH="$lib" "$tmp/consumer_cxx"

step "find_package(kvtier): C and C++ programs"
cmake -S "$here/consumer" -B "$tmp/consumer-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER_LAUNCHER= -DCMAKE_CXX_COMPILER_LAUNCHER= >"$tmp/consumer.log" 2>&1 ||
  { cat "$tmp/consumer.log"; fail "find_package(kvtier)"; }
grep -q "kvtier_DIR:PATH=$lib/cmake/kvtier" "$tmp/consumer-build/CMakeCache.txt" ||
  fail "find_package(kvtier) found $(grep kvtier_DIR "$tmp/consumer-build/CMakeCache.txt")"
cmake --build "$tmp/consumer-build" >>"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log"; fail "build"; }
run_consumer "find_package C" "$tmp/consumer-build/consumer_c"      # the build RPATH names $lib
run_consumer "find_package C++" "$tmp/consumer-build/consumer_cxx"

step "Python package without a library of its own, KVTIER_LIBRARY unset"
mkdir -p "$tmp/py"
cp -r "$source_dir/python/kvtier" "$tmp/py/kvtier"
rm -f "$tmp/py/kvtier/libkvtier.so"
env -u KVTIER_LIBRARY LD_LIBRARY_PATH="$lib" PYTHONPATH="$tmp/py" PYTHONDONTWRITEBYTECODE=1 \
  /usr/bin/python3 "$here/python_consumer.py" "$(readlink -f "$lib/libkvtier.so.1")"
echo "install_$mode: OK"
