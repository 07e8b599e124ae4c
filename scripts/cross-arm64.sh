#!/usr/bin/env bash
# Cross-builds WASTE for aarch64 (Debian's cross gcc, the arm64 multiarch libraries) and runs the
# test suite under qemu user-mode emulation, once per emulated CPU. Exit status is the suite's.
# Usage: scripts/cross-arm64.sh [options] [meson test args...]; --help for the options.
set -euo pipefail
cd "$(dirname "$0")/.."

# The CPUs each suite runs on: qemu's "max" (every extension qemu 7.2 emulates: dotprod, i8mm,
# fp16, bf16, SVE) and a Cortex-A53 (ARMv8.0-A: Advanced SIMD only), so each run-time choice of a
# kernel path is taken both ways.
DEFAULT_CPUS=max,cortex-a53
# Emulation runs the tests 5-20x slower than the machine would natively (docs/TESTING.md, "ARM64
# under emulation", has the measured times); the tests' own timeouts are for native runs.
DEFAULT_TIMEOUT_MULTIPLIER=20

usage() {
  cat <<EOF
Usage: scripts/cross-arm64.sh [options] [meson test args...]

Cross-builds WASTE for aarch64 in \$WASTE_BUILD_DIR-arm64 (default: build-arm64) and runs the
tests under qemu-aarch64 once per CPU; the last line is "N passed, N failed, N skipped" over
all runs and the exit status is nonzero when any run failed.

  --unit-only        only the single-process tests (unit-*, fuzz-seeds-*), not integration-*
                     and chaos (the real processes and their sockets)
  --cpus A,B         the runs, each a qemu CPU (default: $DEFAULT_CPUS), one of
                     \`qemu-aarch64-static -cpu help\`, optionally with a SIMD cap for every
                     process of that run: CPU:scalar or CPU:neon (WASTE_SIMD), e.g.
                     --cpus max,cortex-a53,max:scalar runs every path of the dispatch
  --no-install       do not install packages (scripts/install-deps.sh --arch arm64) nor register
                     qemu with binfmt_misc; fail if something is missing
  --build-only       configure and build, run nothing
  -h, --help         this text
  meson test args    passed on to every run, e.g. test names (unit-kernels unit-rvq),
                     --timeout-multiplier N (default $DEFAULT_TIMEOUT_MULTIPLIER), --repeat N,
                     --list, --no-rebuild (no build either); test names replace --unit-only's

The integration tests start waste-iod, waste-compute and the rest as child processes, which
the kernel runs through qemu only when qemu-aarch64 is registered with binfmt_misc: the script
registers it (as the qemu-user-static package does on a machine with systemd) unless
--no-install. Each run's meson log is <build>/meson-logs/testlog-<cpu>[-<cap>].json.
See docs/TESTING.md, "ARM64 under emulation".
EOF
}

install=1 unit_only=0 build_only=0 cpus=$DEFAULT_CPUS
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --unit-only) unit_only=1; shift ;;
    --no-install) install=0; shift ;;
    --build-only) build_only=1; shift ;;
    --cpus) [ $# -ge 2 ] || { usage >&2; exit 2; }; cpus=$2; shift 2 ;;
    --cpus=*) cpus=${1#--cpus=}; shift ;;
    *) break ;;  # the rest goes to meson test
  esac
done
IFS=, read -r -a cpu_list <<<"$cpus"
[ ${#cpu_list[@]} -gt 0 ] || { echo "cross-arm64: --cpus names no CPU" >&2; exit 2; }
for run in "${cpu_list[@]}"; do
  cpu=${run%%:*} cap=""
  [ "$cpu" = "$run" ] || cap=${run#*:}
  [ -n "$cpu" ] || { echo "cross-arm64: --cpus: '$run' names no CPU" >&2; exit 2; }
  case "$cap" in
    ''|scalar|neon) ;;
    *) echo "cross-arm64: --cpus: '$run': the SIMD cap after ':' is scalar or neon, not '$cap'" >&2; exit 2 ;;
  esac
done

BUILD=${WASTE_BUILD_DIR:-build}-arm64
QEMU=qemu-aarch64-static
BINFMT=/proc/sys/fs/binfmt_misc

# Can the kernel run an aarch64 ELF by itself (qemu registered with binfmt_misc)? Registering
# needs root; the registration's F flag makes the kernel hold qemu open, so it works in every
# mount namespace afterwards.
binfmt_ready() { [ -r "$BINFMT/qemu-aarch64" ] && head -n1 "$BINFMT/qemu-aarch64" | grep -qx enabled; }
register_binfmt() {
  local conf=/usr/lib/binfmt.d/qemu-aarch64.conf SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  [ -r "$conf" ] || { echo "cross-arm64: $conf missing (qemu-user-static not installed?)" >&2; return 1; }
  if [ ! -e "$BINFMT/register" ]; then
    echo "cross-arm64: mounting binfmt_misc on $BINFMT"
    $SUDO mount -t binfmt_misc binfmt_misc "$BINFMT" || return 1
  fi
  [ "$(cat "$BINFMT/status")" = enabled ] || { echo "cross-arm64: binfmt_misc is disabled" >&2; return 1; }
  echo "cross-arm64: registering qemu-aarch64 with binfmt_misc ($conf)"
  $SUDO tee "$BINFMT/register" <"$conf" >/dev/null
}

phase_start=$SECONDS
if [ $install = 1 ]; then
  scripts/install-deps.sh --arch arm64
  binfmt_ready || register_binfmt || echo "cross-arm64: could not register qemu-aarch64 with binfmt_misc" >&2
fi
for tool in aarch64-linux-gnu-g++ $QEMU capnp pkg-config meson ninja; do
  command -v "$tool" >/dev/null || {
    echo "cross-arm64: $tool not found (scripts/install-deps.sh --arch arm64 installs it)" >&2; exit 1; }
done

if [ ! -f "$BUILD/build.ninja" ]; then
  cross_files=(--cross-file scripts/cross/aarch64-linux-gnu.ini)
  # meson puts ccache in front of the compilers it finds itself, not of a cross file's: a
  # second cross file (later files win) does it when ccache is there.
  if command -v ccache >/dev/null; then
    mkdir -p "$BUILD"
    printf "[binaries]\nc = ['ccache', 'aarch64-linux-gnu-gcc']\ncpp = ['ccache', 'aarch64-linux-gnu-g++']\n" \
      >"$BUILD/ccache-cross.ini"
    cross_files+=(--cross-file "$BUILD/ccache-cross.ini")
  fi
  meson setup "$BUILD" "${cross_files[@]}" --buildtype=release
fi
# The targets the selected tests run (meson introspect: each test's `depends`, as files), so a
# run of the unit tests builds those and not the tools, servers and benchmarks beside them (a
# third of a clean cross build, in CI's time). Prints nothing when the selection is every test.
test_targets() {  # test names...
  meson introspect "$BUILD" --tests --targets 2>/dev/null | python3 -c '
import json, os, sys
info = json.load(sys.stdin)
names = set(sys.argv[2:])
files = {t["id"]: t["filename"] for t in info["targets"]}
out = set()
for t in info["tests"]:
    if t["name"] in names:
        for d in t["depends"]:
            out.update(os.path.relpath(f, sys.argv[1]) for f in files.get(d, []))
print("\n".join(sorted(out)))' "$BUILD" "$@"
}

# Does the command line name tests (or suites)? Skip the values of options that take one.
named=0 skip=0 has_multiplier=0
for a in "$@"; do
  if [ $skip = 1 ]; then skip=0; continue; fi
  case "$a" in
    --suite) named=1; skip=1 ;;
    --no-suite) skip=1 ;;  # a filter, combined with --unit-only's list
    --timeout-multiplier|-t) has_multiplier=1; skip=1 ;;
    --repeat|--num-processes|--setup|--wrapper|--test-args|-C|--logbase) skip=1 ;;
    -*) ;;
    *) named=1 ;;
  esac
done
test_args=()
[ $has_multiplier = 1 ] || test_args+=(--timeout-multiplier "$DEFAULT_TIMEOUT_MULTIPLIER")
selected=()
if [ $unit_only = 1 ] && [ $named = 0 ]; then
  # meson test --list prints "project[:suite] / name".
  mapfile -t unit_tests < <(meson test -C "$BUILD" --no-rebuild --list 2>/dev/null |
                            sed -n 's#^.* / \(unit-.*\|fuzz-seeds-.*\)$#\1#p')
  [ ${#unit_tests[@]} -gt 0 ] || { echo "cross-arm64: no unit test found in $BUILD" >&2; exit 1; }
  test_args+=("${unit_tests[@]}")
  selected=("${unit_tests[@]}")
fi
case " $* " in
  *" --no-rebuild "*) ;;
  *)
    targets=()
    [ ${#selected[@]} -gt 0 ] && mapfile -t targets < <(test_targets "${selected[@]}")
    if [ ${#targets[@]} -gt 0 ]; then
      ninja -C "$BUILD" -j 2 "${targets[@]}"
      test_args+=(--no-rebuild)
    else
      ninja -C "$BUILD" -j 2
    fi
    echo "cross-arm64: build done after $((SECONDS - phase_start)) s (${#targets[@]} test targets, 0: all)"
    ;;
esac
[ $build_only = 1 ] && exit 0
if [ $unit_only = 0 ] && ! binfmt_ready; then
  echo "cross-arm64: the integration tests start aarch64 child processes, which needs qemu-aarch64" \
       "registered with binfmt_misc ($BINFMT/qemu-aarch64): run as root without --no-install," \
       "or use --unit-only" >&2
  exit 1
fi

overall=0
logs=()
for run in "${cpu_list[@]}"; do
  cpu=${run%%:*} cap=""
  [ "$cpu" = "$run" ] || cap=${run#*:}
  label=$cpu${cap:+-$cap}
  # QEMU_CPU (not -cpu in the cross file's exe_wrapper) and WASTE_SIMD: every aarch64 process
  # reads them, the tests started through the wrapper and the children they start through
  # binfmt_misc alike.
  echo "cross-arm64: running the tests on qemu cpu '$cpu'${cap:+ with WASTE_SIMD=$cap}"
  run_start=$SECONDS
  set +e
  if [ -n "$cap" ]; then
    QEMU_CPU=$cpu WASTE_SIMD=$cap meson test -C "$BUILD" --print-errorlogs --num-processes 2 --logbase "testlog-$label" \
      "${test_args[@]}" "$@"
  else
    # The run's own dispatch: a WASTE_SIMD of the caller's environment would cap it.
    QEMU_CPU=$cpu env -u WASTE_SIMD meson test -C "$BUILD" --print-errorlogs --num-processes 2 \
      --logbase "testlog-$label" "${test_args[@]}" "$@"
  fi
  status=$?
  set -e
  echo "cross-arm64: '$run' done in $((SECONDS - run_start)) s, status $status"
  [ $status = 0 ] || overall=$status
  logs+=("$BUILD/meson-logs/testlog-$label.json")
done

# Per CPU, then one plain summary line over all runs, as scripts/test.sh prints it.
python3 - "${cpu_list[@]}" -- "${logs[@]}" <<'PY'
import json, sys
sep = sys.argv.index("--")
cpus, logs = sys.argv[1:sep], sys.argv[sep + 1:]
total = [0, 0, 0]
for cpu, log in zip(cpus, logs):
    counts = [0, 0, 0]
    try:
        lines = open(log).readlines()
    except OSError:
        lines = []  # --list writes no log
    for line in lines:
        r = json.loads(line).get("result")
        counts[0 if r in ("OK", "EXPECTEDFAIL") else 2 if r == "SKIP" else 1] += 1
    print("cpu %s: %d passed, %d failed, %d skipped" % (cpu, *counts))
    total = [t + c for t, c in zip(total, counts)]
print("%d passed, %d failed, %d skipped" % tuple(total))
PY
exit $overall
