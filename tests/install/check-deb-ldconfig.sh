#!/usr/bin/env bash
# Shows that check-deb.sh's ldconfig rule can fail (ctest install_deb, after the package itself passed):
# repacks a kvtier .deb with each way of running ldconfig that dpkg allows, and with none, and expects
#   a trigger `activate-noawait ldconfig` or `activate ldconfig` (CPack 4.x, debhelper)  -> passes
#   a postinst and a postrm that run ldconfig (CPack 3.x)                               -> passes
#   neither, or a postinst alone                                                        -> fails, naming ldconfig
# Nothing is installed: the packages are built and read with dpkg-deb in a temporary directory.
set -euo pipefail
deb=${1:?usage: check-deb-ldconfig.sh FILE.deb}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-deb-ldconfig.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

dpkg-deb -R "$deb" "$tmp/orig"
script() {   # script NAME BODY...: a maintainer script that runs BODY after install/removal
  local f=$tmp/variant/DEBIAN/$1; shift
  printf '#!/bin/sh\nset -e\n%s\n' "$@" >"$f"
  chmod 0755 "$f"
}
# variant NAME EXPECT SETUP: repack the package with SETUP applied to a copy of its DEBIAN/ and check it.
variant() {
  local name=$1 expect=$2 setup=$3 out
  rm -rf "$tmp/variant"
  cp -a "$tmp/orig" "$tmp/variant"
  rm -f "$tmp/variant/DEBIAN/"{triggers,postinst,postrm}
  $setup
  dpkg-deb --root-owner-group -Zgzip -z1 -b "$tmp/variant" "$tmp/$name.deb" >/dev/null
  if out=$(bash "$here/check-deb.sh" "$tmp/$name.deb" 2>&1); then
    [ "$expect" = pass ] || fail "$name: check-deb.sh passed a package that $name"
  else
    [ "$expect" = fail ] || fail "$name: check-deb.sh failed it: $(tail -1 <<<"$out")"
    grep -q 'runs no ldconfig' <<<"$out" || fail "$name: failed for another reason: $(tail -1 <<<"$out")"
  fi
  echo "$name: $expect"
}
none() { :; }
trigger_noawait() { echo 'activate-noawait ldconfig' >"$tmp/variant/DEBIAN/triggers"; }
trigger_await() { echo 'activate ldconfig' >"$tmp/variant/DEBIAN/triggers"; }
scripts_both() { script postinst 'if [ "$1" = "configure" ]; then' '	ldconfig' 'fi'
                 script postrm 'if [ "$1" = "remove" ]; then' '	ldconfig' 'fi'; }
postinst_only() { script postinst 'ldconfig'; }
other_trigger() { echo 'activate-noawait update-mime-database' >"$tmp/variant/DEBIAN/triggers"; }

variant trigger-activate-noawait pass trigger_noawait
variant trigger-activate pass trigger_await
variant postinst-and-postrm pass scripts_both
variant runs-no-ldconfig fail none
variant postinst-only fail postinst_only
variant another-trigger-only fail other_trigger
