#!/usr/bin/env bash
# Builds the libdlock npm tarball with a prebuilt libdlock.so bundled, and prints its path.
#
#   bindings/node/pack.sh OUT_DIR LIBDLOCK_SO
#
# LIBDLOCK_SO: the library to bundle (build/libdlock.so; symlinks are followed). It goes into
# the package as prebuilds/linux-<arch>/libdlock.so.0 (arch from its ELF header: x64 or arm64),
# debug sections stripped when `strip` is there, which lib/native.js loads first when
# DLOCK_LIBRARY is not set; and dlock.node, the addon, from beside it when it was built
# (prebuilds/linux-<arch>/dlock.node; lib/addon.js). The bundled file links hiredis, libevent, OpenSSL and libcurl from
# the system (glibc Linux): the README says which packages bring them.
#
# The package is staged in a temporary copy (the files package.json lists, plus LICENSE), so
# the source tree is left as it was; `npm pack` writes OUT_DIR/libdlock-VERSION.tgz. Needs node
# and npm; nothing is downloaded. Its dependency (koffi, pinned exactly in package.json, with
# its per-platform prebuilt packages pinned exactly by koffi) comes from the npm registry or
# cache when the tarball is installed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [[ $# -ne 2 ]]; then
  echo "usage: bindings/node/pack.sh OUT_DIR LIBDLOCK_SO" >&2
  exit 64
fi
lib=$2
[[ $lib == /* ]] || lib=$PWD/$lib
[[ -f $lib ]] || { echo "pack.sh: $lib: no such file" >&2; exit 66; }
if [[ $(head -c 4 "$lib" | od -An -c | tr -d ' ') != '177ELF' ]]; then
  echo "pack.sh: $lib is not an ELF shared library" >&2
  exit 65
fi
# e_machine (a little-endian uint16 at offset 18) names the architecture, as process.arch does.
machine=$(od -An -tu2 -j18 -N2 "$lib" | tr -d ' ')
case $machine in
62) arch=x64 ;;
183) arch=arm64 ;;
*)
  echo "pack.sh: $lib is for ELF machine $machine; only x86-64 (62) and aarch64 (183) have a prebuilds/ name here" >&2
  exit 65
  ;;
esac

mkdir -p "$1"
out=$(cd "$1" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

cd "$here"
cp -R package.json README.md index.js index.mjs index.d.ts index.d.mts lib "$stage/"
[[ -f ../../LICENSE ]] && cp ../../LICENSE "$stage/"
dest=$stage/prebuilds/linux-$arch
mkdir -p "$dest"
cp -L "$lib" "$dest/libdlock.so.0"
if command -v strip >/dev/null; then
  strip --strip-debug "$dest/libdlock.so.0"
fi
chmod 0755 "$dest/libdlock.so.0"
# The addon (dlock.node), when it was built beside the library (the build directory's root):
# index.js loads it from beside the bundled library, else takes the koffi path.
addon=$(dirname "$(readlink -f "$lib")")/dlock.node
if [[ -f $addon ]]; then
  cp -L "$addon" "$dest/dlock.node"
  if command -v strip >/dev/null; then strip --strip-debug "$dest/dlock.node"; fi
  chmod 0755 "$dest/dlock.node"
else
  echo "pack.sh: no dlock.node beside $lib: the package takes the koffi path" >&2
fi

# npm pack prints the tarball's name as its last line on stdout (notices go to stderr).
name=$(cd "$stage" && npm pack --ignore-scripts --loglevel=error --pack-destination "$out" | tail -n 1)
[[ -f $out/$name ]] || { echo "pack.sh: npm pack did not write $out/$name" >&2; exit 1; }
echo "$out/$name"
