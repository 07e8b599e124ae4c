#!/usr/bin/env bash
# The main job on a fresh Debian machine: install packages, build, generate a small demo model
# with random weights, and inspect and verify it. (Grows into `waste up` + a chat request as
# the daemons land.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
BUILD=${WASTE_BUILD_DIR:-build}
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release
ninja -C "$BUILD"
WASTE="$BUILD/tools/waste"
MODEL=${WASTE_DEMO_MODEL:-demo/kimi-linear-demo.waste}
mkdir -p "$(dirname "$MODEL")"
echo "== synthesize a Kimi-Linear-shaped demo model (full width, 4 layers, random weights)"
"$WASTE" synth --preset kimi-linear-48b --layers 4 --vocab 16384 --out "$MODEL"
echo "== waste info"
"$WASTE" info "$MODEL"
echo "== waste verify"
"$WASTE" verify "$MODEL"
