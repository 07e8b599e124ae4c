#!/usr/bin/env bash
# The main job on a fresh Debian machine: install packages, build, generate a small demo model
# with random weights, start an instance (iod + compute + OpenAI-compatible HTTP) with
# `waste up`, send one streaming chat request with curl and one `waste run`, print the
# statistics and stop everything with `waste down`.
#
# The demo model is synthetic: Kimi-Linear's real widths and expert counts, 4 layers, random
# weights. It exercises every code path but writes meaningless text. For a real model:
#   waste convert /path/to/Kimi-Linear-48B-A3B-Instruct --out kl.waste
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
BUILD=${WASTE_BUILD_DIR:-build}
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release
ninja -C "$BUILD"
WASTE="$BUILD/tools/waste"
MODEL=${WASTE_DEMO_MODEL:-demo/kimi-linear-demo.waste}
RUN_DIR=${WASTE_DEMO_RUN_DIR:-demo/run}
PORT=${WASTE_DEMO_PORT:-18080}
mkdir -p "$(dirname "$MODEL")"

if ! "$WASTE" info "$MODEL" >/dev/null 2>&1; then
  echo "== waste synth: a Kimi-Linear-shaped demo model (full width, 4 layers, random weights)"
  "$WASTE" synth --preset kimi-linear-48b --layers 4 --vocab 16384 --out "$MODEL"
fi
echo "== waste info"
"$WASTE" info "$MODEL"
echo "== waste verify"
"$WASTE" verify "$MODEL"
echo "== waste plan"
"$WASTE" plan "$MODEL"

echo "== waste up (iod, compute, HTTP on 127.0.0.1:$PORT)"
"$WASTE" up "$MODEL" --run-dir "$RUN_DIR" --http "127.0.0.1:$PORT"
trap '"$WASTE" down --run-dir "$RUN_DIR" || true' EXIT

echo "== a streaming chat request (OpenAI API, curl)"
curl -sS -N "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Tell me about streaming experts from disk."}],
       "max_tokens": 24, "stream": true}'
echo
echo "== waste run through the running instance (Engine RPC: warm trunk and expert cache)"
"$WASTE" run "$MODEL" "The capital of France is" -n 24 --connect "$RUN_DIR" --no-progress
echo "== waste status"
"$WASTE" status --run-dir "$RUN_DIR"
echo "== waste down"
trap - EXIT
"$WASTE" down --run-dir "$RUN_DIR"
