#!/usr/bin/env bash
# Checks a kvtier .deb without installing it (check-install.sh deb): its control fields (dependencies
# computed by dpkg-shlibdeps, a shlibs file, ldconfig run after install and removal) and its file
# list (everything under /usr, owned by root, nothing a test or benchmark built).
# A .deb that ships a shared library runs ldconfig either way dpkg allows: CPack 3.x writes postinst and
# postrm scripts that call it; CPack 4.x, like debhelper for Debian's own library packages, writes a
# `triggers` file whose `activate-noawait ldconfig` (or `activate ldconfig`) line has dpkg run it once
# after the whole transaction. Either passes; a package that does neither fails.
set -euo pipefail
deb=${1:?usage: check-deb.sh FILE.deb}
fail() { echo "FAIL: $deb: $*" >&2; exit 1; }
echo "== dpkg-deb --info $(basename "$deb")"
dpkg-deb --field "$deb" Package Version Architecture Depends
[ "$(dpkg-deb --field "$deb" Package)" = kvtier ] || fail "Package is not kvtier"
[ "$(dpkg-deb --field "$deb" Architecture)" = "$(dpkg --print-architecture)" ] || fail "wrong Architecture"
depends=$(dpkg-deb --field "$deb" Depends)
for d in libc6 libssl3 libstdc++6; do   # from dpkg-shlibdeps, not written by hand
  grep -q "\b$d\b" <<<"$depends" || fail "Depends lacks $d: $depends"
done
ctrl=$(mktemp -d)
trap 'rm -rf "$ctrl"' EXIT
dpkg-deb --control "$deb" "$ctrl"
grep -qx 'libkvtier 1 kvtier (>= [0-9.]*)' "$ctrl/shlibs" || fail "shlibs: $(cat "$ctrl/shlibs" 2>&1)"
runs_ldconfig() {   # the control directory's way of running ldconfig, or nothing
  if grep -qsxE 'activate(-noawait)?[[:space:]]+ldconfig' "$ctrl/triggers"; then
    echo "triggers: $(grep -xE 'activate(-noawait)?[[:space:]]+ldconfig' "$ctrl/triggers")"
  elif grep -qsE '^[[:space:]]*ldconfig([[:space:]]|$)' "$ctrl/postinst" &&
       grep -qsE '^[[:space:]]*ldconfig([[:space:]]|$)' "$ctrl/postrm"; then
    echo "postinst and postrm run ldconfig"
  fi
}
how=$(runs_ldconfig)
[ -n "$how" ] || fail "runs no ldconfig: no 'activate-noawait ldconfig' trigger, nor a postinst and postrm that run it (control files: $(ls "$ctrl" | tr '\n' ' '))"
echo "ldconfig: $how"

echo "== dpkg-deb --contents"
listing=$(dpkg-deb --contents "$deb")
files=$(awk '{print $6}' <<<"$listing")
for f in ./usr/bin/kvtier ./usr/lib/libkvtier.so ./usr/lib/libkvtier.so.1 ./usr/include/kvtier/kvtier.h \
         ./usr/lib/pkgconfig/kvtier.pc ./usr/lib/cmake/kvtier/kvtierConfig.cmake \
         ./usr/share/kvtier/systemd/kvtier-serve.service ./usr/share/kvtier/kubernetes/kustomization.yaml; do
  grep -qx -- "$f" <<<"$files" || fail "$f is not in the package"
done
outside=$(grep -v -e '^\./$' -e '^\./usr/' <<<"$files" || true)
[ -z "$outside" ] || fail "files outside /usr: $outside"
owners=$(awk '{print $2}' <<<"$listing" | sort -u)
[ "$owners" = root/root ] || fail "files not owned by root/root: $owners"
if grep -E '_test$|gtest|bench' <<<"$files"; then fail "a test or benchmark binary is packaged"; fi
echo "$(grep -c . <<<"$files") entries, all under /usr, root/root"
