#!/bin/sh
# Prints, one a line, the distribution packages that hold the shared
# libraries the binaries and libraries under PREFIX load (through ldd and
# dpkg -S), so the runtime image installs exactly those, by the names of
# its own distribution (Debian 12 and Ubuntu 24.04 name some differently).
# Libraries no package owns (ours under PREFIX; the GPU driver's, which the
# container runtime mounts) are left out.
#
#   docker/runtime-packages.sh PREFIX
set -eu
prefix=$1
owner() {
  # dpkg knows a file by the path its package shipped; ldd may print the
  # /lib or /usr/lib twin (merged /usr), or an alternatives link.
  for p in "$1" "$(readlink -f "$1")" "/usr$1" "${1#/usr}"; do
    pkg=$(dpkg -S "$p" 2>/dev/null | head -n 1 | cut -d: -f1)
    if [ -n "$pkg" ]; then
      echo "$pkg"
      return 0
    fi
  done
  case $1 in "$prefix"/*) ;; *) echo "runtime-packages: no package owns $1 (left out)" >&2 ;; esac
}
find "$prefix" -type f \( -perm -u+x -o -name '*.so*' \) | while read -r f; do
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
  owner "$lib"
done | sort -u
