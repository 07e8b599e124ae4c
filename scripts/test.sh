#!/usr/bin/env bash
# Builds WASTE and runs the whole test suite (unit + integration). Exit status is the suite's.
# Usage: scripts/test.sh [meson test args...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
BUILD=${WASTE_BUILD_DIR:-build}
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" --buildtype=release
fi
ninja -C "$BUILD"
set +e
meson test -C "$BUILD" --print-errorlogs --num-processes 2 "$@"
status=$?
set -e
# One plain summary line ("N passed, N failed") from meson's JSON log, for people and CI.
python3 - "$BUILD/meson-logs/testlog.json" <<'PY'
import json, sys
passed = failed = skipped = 0
for line in open(sys.argv[1]):
    r = json.loads(line).get("result")
    if r in ("OK", "EXPECTEDFAIL"): passed += 1
    elif r == "SKIP": skipped += 1
    else: failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
