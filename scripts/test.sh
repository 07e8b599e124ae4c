#!/usr/bin/env bash
# Builds WASTE and runs the whole test suite (unit + integration). Exit status is the suite's.
# Usage: scripts/test.sh [--sanitize address,undefined|thread] [--no-uring] [meson test args...]
#        scripts/test.sh --help
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
Usage: scripts/test.sh [--sanitize address,undefined|thread] [--no-uring] [meson test args...]

Builds WASTE and runs the test suite; the last line is "N passed, N failed, N skipped" and the
exit status is the suite's.

  (no option)                   release build in $WASTE_BUILD_DIR (default: build), every test
  --sanitize address,undefined  ASan + UBSan + LeakSanitizer build in $WASTE_BUILD_DIR-asan
                                (default: build-asan), every test
  --sanitize thread             TSan build in $WASTE_BUILD_DIR-tsan (default: build-tsan); without
                                test names: the threaded suites (iod, thread pool, engine,
                                integration), see TSAN_TESTS in this script
  --no-uring                    the build without liburing (-During=disabled: iod reads with its
                                pread pool only) in a directory of its own, suffix -nouring
                                (default: build-nouring; with --sanitize: build-asan-nouring ...);
                                the tests of the io_uring paths report SKIP there
  meson test args               passed on, e.g. test names (unit-iod integration-serve),
                                --timeout-multiplier N (overrides the sanitizer's default),
                                --repeat N, --list, --no-rebuild (no build either)

Under a sanitizer any report fails the test it happened in, also a report of a child process
(waste-iod, waste-compute, waste-serve, waste): every process writes its reports to
<build>/sanitizer-logs/<test>-<pid>/, which scripts/sanitizers/wrap checks after each test
and prints. See docs/TESTING.md, "Sanitizers".
EOF
}

sanitize=""
no_uring=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --no-uring) no_uring=1; shift ;;
    --sanitize) [ $# -ge 2 ] || { usage >&2; exit 2; }; sanitize=$2; shift 2 ;;
    --sanitize=*) sanitize=${1#--sanitize=}; shift ;;
    *) break ;;  # the rest goes to meson test
  esac
done

scripts/install-deps.sh
BUILD=${WASTE_BUILD_DIR:-build}
# Sanitizer builds get a directory of their own: b_sanitize changes every object file, and a
# release build beside it stays usable (CI runs both from one checkout).
setup_args=(--buildtype=release)
test_args=()
san_env=()
case "$sanitize" in
  "") ;;
  address,undefined|undefined,address)
    BUILD=$BUILD-asan
    # -O1 -g1 (line tables only): the sanitizers' recommended level, reports still get
    # file:line, and the build is much cheaper than -O2 -g (heavy on capnp/json templates); it
    # is part of CI's time. Not a release buildtype, so asserts stay on (an assert is a finding
    # too). b_lundef=false because the sanitizer runtimes resolve symbols at load time, which
    # -Wl,--no-undefined rejects for shared libraries. -fno-sanitize-recover: UBSan otherwise
    # prints and carries on, and the test would pass.
    setup_args=(-Db_sanitize=address,undefined -Dbuildtype=debugoptimized -Doptimization=1 -Ddebug=false
                "-Dcpp_args=-g1 -fno-sanitize-recover=undefined" -Db_lundef=false)
    # ASan costs ~2-3x CPU and the integration tests run many processes: 3x their timeouts.
    test_args=(--timeout-multiplier 3)
    # halt_on_error + abort_on_error: the first report ends the process (and fails the test)
    # with SIGABRT; detect_leaks: LeakSanitizer at exit; suppressions only for third-party code
    # (the file explains each). log_path is set per test by scripts/sanitizers/wrap.
    san_env=(
      "ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:check_initialization_order=1:disable_coredump=1"
      "UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:report_error_type=1:suppressions=$PWD/scripts/sanitizers/ubsan.supp"
      "LSAN_OPTIONS=suppressions=$PWD/scripts/sanitizers/lsan.supp:print_suppressions=0"
    )
    ;;
  thread)
    BUILD=$BUILD-tsan
    # Same optimization level and reasoning as the ASan build.
    setup_args=(-Db_sanitize=thread -Dbuildtype=debugoptimized -Doptimization=1 -Ddebug=false
                -Dcpp_args=-g1 -Db_lundef=false)
    # TSan costs 5-15x CPU and memory; the multiplier keeps the timeouts meaningful.
    test_args=(--timeout-multiplier 6)
    san_env=(
      "TSAN_OPTIONS=halt_on_error=1:abort_on_error=1:second_deadlock_stack=1:report_signal_unsafe=1:disable_coredump=1:suppressions=$PWD/scripts/sanitizers/tsan.supp"
    )
    ;;
  *) echo "test.sh: --sanitize takes address,undefined or thread, not '$sanitize'" >&2; exit 2 ;;
esac
# The build without liburing: its own directory too (-During changes which files are compiled and
# what iod/uring_config.h says), so the default build stays usable beside it.
if [ $no_uring = 1 ]; then
  BUILD=$BUILD-nouring
  setup_args+=(-During=disabled)
fi

if [ ! -f "$BUILD/build.ninja" ]; then
  if [ -n "$sanitize" ]; then
    # clang for the sanitizer builds: gcc's ASan+UBSan build of this tree took over two hours on
    # 2 cores, clang's about 20 minutes (docs/LEARNED.md). CC/CXX of the caller win.
    if [ -z "${CXX:-}" ] && ! command -v clang++ >/dev/null; then
      SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
      echo "test.sh: installing clang for the sanitizer build"
      $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang
    fi
    export CC=${CC:-clang} CXX=${CXX:-clang++}
  fi
  meson setup "$BUILD" "${setup_args[@]}"
fi
# A directory set up earlier by hand must be what its name says (iod/uring_config.h is generated
# from -During at setup).
if [ $no_uring = 1 ] && ! grep -q 'WASTE_HAVE_IO_URING 0' "$BUILD/iod/uring_config.h"; then
  echo "test.sh: $BUILD was set up with io_uring; run: meson configure $BUILD -During=disabled" >&2
  exit 2
fi
# meson test's --no-rebuild skips the build here too (run what is built, e.g. a few tests while
# the rest of a slow sanitizer build is not done).
case " $* " in *" --no-rebuild "*) ;; *) ninja -C "$BUILD" ;; esac

testlog=testlog.json
if [ -n "$sanitize" ]; then
  export "${san_env[@]}"
  # Per-test report directories (the wrapper makes them); emptied so that an old run's reports
  # cannot fail this one. Absolute: tests chdir into temporary directories.
  export WASTE_SANITIZER_LOG_DIR=$PWD/$BUILD/sanitizer-logs
  rm -rf "$WASTE_SANITIZER_LOG_DIR"
  mkdir -p "$WASTE_SANITIZER_LOG_DIR"
  test_args+=(--wrapper "$PWD/scripts/sanitizers/wrap")
  # With a wrapper meson names its log after it (always, whatever --logbase says).
  testlog=testlog-wrap.json
  # TSan: the suites with threads of their own and processes talking to each other (the rest is
  # single-threaded kernels, which TSan only slows down). Test names given on the command line win.
  TSAN_TESTS=(unit-util unit-iod unit-engine unit-cache unit-model unit-session unit-batch unit-kernels
              integration-iod integration-iobench integration-engine integration-frontends
              integration-serve integration-serve-hardening integration-chat-api integration-prompt-cache
              integration-liveness integration-vision-api chaos)
  if [ "$sanitize" = thread ]; then
    # Does the command line name tests (or suites)? Skip the values of options that take one.
    named=0 skip=0
    for a in "$@"; do
      if [ $skip = 1 ]; then skip=0; continue; fi
      case "$a" in
        --suite|--no-suite) named=1; skip=1 ;;
        --timeout-multiplier|-t|--repeat|--num-processes|--setup|--wrapper|--test-args|-C) skip=1 ;;
        -*) ;;
        *) named=1 ;;
      esac
    done
    [ $named = 1 ] || test_args+=("${TSAN_TESTS[@]}")
  fi
fi

set +e
meson test -C "$BUILD" --print-errorlogs --num-processes 2 "${test_args[@]}" "$@"
status=$?
set -e
# One plain summary line ("N passed, N failed") from meson's JSON log, for people and CI.
python3 - "$BUILD/meson-logs/$testlog" <<'PY'
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
