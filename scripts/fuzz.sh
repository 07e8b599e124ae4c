#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang, ASan + UBSan) and runs each for SECONDS
# (default 60) from a scratch copy of its committed seeds and regressions, then prints one line
# per target: executions, coverage (libFuzzer's cov: at the end), crashes.
#   scripts/fuzz.sh [-j N] [SECONDS] [TARGET...]     (TARGET: chat_request, config, ...; default all)
# -j N: targets run at once (default 2: this machine's cores; each target is one process).
# Exit 0 when every target ran clean, 1 on a finding (crash, sanitizer report, hang, leak: the
# inputs are kept and their directory printed), 77 (skip) when clang cannot link libFuzzer.
# WASTE_FUZZ_BUILD_DIR (default build-fuzz), CXX_FUZZ (default clang++), WASTE_SHARED_DIR
# (default ../shared: the session target loads the kimi-linear fixture).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=2
if [ "${1:-}" = "-j" ]; then
  jobs=${2:?-j needs a number}
  shift 2
fi
seconds=${1:-60}
[ $# -gt 0 ] && shift
build=${WASTE_FUZZ_BUILD_DIR:-build-fuzz}
cxx=${CXX_FUZZ:-clang++}
export WASTE_SHARED_DIR=${WASTE_SHARED_DIR:-$root/../shared}

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do
    n=${f#tests/fuzz/fuzz_}
    targets+=("${n%.cpp}")
  done
fi
for t in "${targets[@]}"; do
  [ -f "tests/fuzz/fuzz_$t.cpp" ] || { echo "fuzz.sh: no target '$t' (tests/fuzz/fuzz_$t.cpp)" >&2; exit 2; }
done

probe=$(mktemp -d /tmp/waste-fuzz-probe-XXXXXX)
trap 'rm -rf "$probe"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$probe/p.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>/dev/null; then
  echo "SKIP: $cxx cannot link libFuzzer (-fsanitize=fuzzer): install clang (Debian: clang, libclang-rt-dev)"
  exit 77
fi

if [ ! -f "$build/build.ninja" ]; then
  CXX=$cxx meson setup "$build" -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debugoptimized >/dev/null
fi
nice -n 10 ninja -C "$build" "${targets[@]/#/tests/fuzz/fuzz_}"

work=$(mktemp -d /tmp/waste-fuzz-XXXXXX)
# A sanitizer report aborts with a stack; leaks are findings; UBSan reports are fatal (the build
# compiles with -fno-sanitize-recover).
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_one() {
  local t=$1 dir=$work/$1
  mkdir -p "$dir/corpus" "$dir/findings"
  cp -r tests/fuzz/corpus/"$t"/. "$dir/corpus/" 2>/dev/null || true
  cp -r tests/fuzz/regressions/"$t"/. "$dir/corpus/" 2>/dev/null || true
  local args=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
              -artifact_prefix="$dir/findings/" -max_len=65536)
  [ "$t" = image ] && args+=(-max_len=262144)  # images need room; the decoder bounds the rest
  [ -f "tests/fuzz/$t.dict" ] && args+=(-dict="tests/fuzz/$t.dict")
  set +e
  nice -n 5 "$build/tests/fuzz/fuzz_$t" "${args[@]}" "$dir/corpus" >"$dir/log" 2>&1
  echo $? >"$dir/rc"
  set -e
}

echo "fuzz: ${#targets[@]} targets, $seconds s each, $jobs at a time (logs under $work)"
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
wait

status=0
printf '%-18s %12s %8s %8s\n' target executions cov crashes
for t in "${targets[@]}"; do
  dir=$work/$t
  # A run that died at its first input has no stats and no cov: line (hence the || true).
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1 || true)
  cov=$(grep -o 'cov: [0-9]*' "$dir/log" | tail -1 | cut -d' ' -f2 || true)
  found=$(find "$dir/findings" -type f | wc -l)
  rc=$(cat "$dir/rc")
  if [ "$rc" -ne 0 ] && [ "$found" -eq 0 ]; then found="rc=$rc"; fi  # died without leaving an input
  printf '%-18s %12s %8s %8s\n' "$t" "${execs:-?}" "${cov:-?}" "$found"
  if [ "$found" != 0 ]; then status=1; fi
done
if [ "$status" -ne 0 ]; then
  echo "fuzz: findings kept in $work/<target>/findings (logs: $work/<target>/log)"
  echo "      fix the parser, then add the input under tests/fuzz/regressions/<target>/"
else
  rm -rf "$work"
fi
exit $status
