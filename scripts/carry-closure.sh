#!/usr/bin/env bash
# The shared libraries a set of ELF files needs, closed transitively, for carrying binaries built here to
# a machine that lacks some of them (scripts/gpu-carry.sh, scripts/gpu-e2e.sh).
#
#   carry-closure.sh gather LIBDIR ELF...        here: copies into LIBDIR every library the ELFs load and
#                                                every library those load (repeated until nothing new;
#                                                RUNPATHs such as librados's .../ceph are followed by the
#                                                loader), except glibc's and the C/C++ runtime's
#   carry-closure.sh link LIBDIR LINKDIR ELF...  there: links into LINKDIR each carried library this
#                                                machine lacks, with LINKDIR on LD_LIBRARY_PATH, repeated
#                                                over the ELFs and the linked libraries until no new one
#                                                is missing (a library the loader could not find hides its
#                                                own needs from one pass); exit 1 naming any library that
#                                                is missing and not carried
#
# The list comes from the dynamic loader in trace mode (ldd). KVTIER_CARRY_ROOT=/dir makes `link` ask the
# loader inside `chroot /dir` (paths under it; /dir/bin/env must exist), which is how tests/scripts/carry_closure_test.sh plays a
# machine without this one's libraries.
set -euo pipefail
RUNTIME='/(libc|libm|libpthread|libdl|librt|libutil|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so'
ROOT=${KVTIER_CARRY_ROOT:-}

deps() {  # the loader's trace of one ELF; LD_LIBRARY_PATH as set by the caller
  if [ -n "$ROOT" ]; then
    chroot "$ROOT" /bin/env LD_TRACE_LOADED_OBJECTS=1 LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \
      /lib64/ld-linux-x86-64.so.2 "${1#"$ROOT"}" || true
  else
    ldd "$1" || true
  fi
}

gather() {
  local dest=$1
  shift
  mkdir -p "$dest"
  local -A seen=()
  local todo=("$@") added=1
  while [ "$added" -eq 1 ]; do
    added=0
    local next=()
    for elf in "${todo[@]}"; do
      while read -r path; do
        [ -n "$path" ] || continue
        local name=${path##*/}
        [ -z "${seen[$name]:-}" ] || continue
        seen[$name]=1
        cp -L "$path" "$dest/$name"
        next+=("$dest/$name")
        added=1
      done < <(deps "$elf" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | grep -Ev "$RUNTIME" || true)
    done
    todo=("${next[@]+"${next[@]}"}")
  done
  if deps_missing=$(for elf in "$@"; do deps "$elf"; done | awk '/not found/ {print $1}' | sort -u) && [ -n "$deps_missing" ]; then
    echo "carry-closure: not found here: $deps_missing" >&2
    return 1
  fi
}

link() {
  local libdir=$1 linkdir=$2
  shift 2
  mkdir -p "$linkdir"
  if [ -n "$ROOT" ]; then
    export LD_LIBRARY_PATH=${linkdir#"$ROOT"}
  else
    export LD_LIBRARY_PATH="$linkdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  local -A linked=() lost=() traced=()
  local added=1
  while [ "$added" -eq 1 ]; do
    added=0
    # The ELFs every pass (the loader walks their whole tree, now through what is linked); a linked
    # library once, as a root of its own.
    for elf in "$@" "$linkdir"/*; do
      [ -e "$elf" ] || continue
      if [ "${elf%/*}" = "$linkdir" ]; then
        [ -z "${traced[$elf]:-}" ] || continue
        traced[$elf]=1
      fi
      while read -r name; do
        [ -z "${linked[$name]:-}" ] || continue
        if [ -f "$libdir/$name" ]; then
          ln -sf "$(realpath --relative-to="$linkdir" "$libdir/$name")" "$linkdir/$name"
          linked[$name]=1
          added=1
        else
          lost[$name]=1
        fi
      done < <(deps "$elf" | awk '/not found/ {print $1}' | sort -u)
    done
  done
  if [ "${#lost[@]}" -gt 0 ]; then
    echo "carry-closure: missing here and not carried: ${!lost[*]}" >&2
    return 1
  fi
  echo "${!linked[*]}"
}

case "${1:-}" in
  gather) shift; gather "$@" ;;
  link) shift; link "$@" ;;
  *) echo "usage: carry-closure.sh gather LIBDIR ELF... | link LIBDIR LINKDIR ELF..." >&2; exit 2 ;;
esac
