#!/usr/bin/env bash
# Compiles, in a build without liburing (-During=disabled), exactly what differs from the default
# build: every object that includes the generated iod/uring_config.h (the default build's own
# dependency records say which: ninja -t deps), and the iod library (no io_uring engine in it).
# A cheap check for CI that the no-liburing configuration still compiles; the whole build and
# suite of that configuration is `scripts/test.sh --no-uring` (docs/TESTING.md).
# Usage: scripts/nouring-compile.sh [BUILT_DEFAULT_BUILD_DIR]   (default: $WASTE_BUILD_DIR or build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-${WASTE_BUILD_DIR:-build}}
NOURING=$BUILD-nouring
if [ ! -f "$BUILD/build.ninja" ]; then
  echo "nouring-compile: $BUILD is not set up; build it first (scripts/test.sh)" >&2
  exit 2
fi
mapfile -t objs < <(ninja -C "$BUILD" -t deps |
  awk '/^[^ ].*: #deps/ { obj = $1; sub(":$", "", obj) } /^    / && $1 == "iod/uring_config.h" { print obj }' | sort -u)
# iod's store includes it for certain: without an object of the iod library in the list the
# records are missing (the default build was not built), not "nothing differs". (An object is
# a unity group of several sources, or one source where unity is off.)
if ! printf '%s\n' "${objs[@]}" | grep -q '^iod/libwaste_iod\.a\.p/'; then
  echo "nouring-compile: $BUILD has no dependency records of the iod library; build it first (ninja -C $BUILD)" >&2
  exit 2
fi
[ -f "$NOURING/build.ninja" ] || meson setup "$NOURING" --buildtype=release -During=disabled
if ! grep -q 'WASTE_HAVE_IO_URING 0' "$NOURING/iod/uring_config.h"; then
  echo "nouring-compile: $NOURING was set up with io_uring; run: meson configure $NOURING -During=disabled" >&2
  exit 2
fi
ninja -C "$NOURING" iod/libwaste_iod.a "${objs[@]}"
echo "nouring-compile: the iod library and ${#objs[@]} objects that include iod/uring_config.h compile without io_uring"
