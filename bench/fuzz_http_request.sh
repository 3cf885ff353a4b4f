#!/usr/bin/env bash
# A long run of the HTTP request fuzzer (tests/fuzz/fuzz_http_request.cpp): raw request bytes
# through the parser, the framing check, the gate and the generation endpoints' parsers, as the
# server runs them. CI runs it for 30 s; this runs it for RUNS executions (default 10 million),
# keeps the corpus it grows in build/fuzz/corpus-http_request, and writes the summary to OUT.
#   bench/fuzz_http_request.sh [RUNS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10000000}
out=${2:-bench/results/fuzz_http_request_$(date -u +%Y-%m-%d).txt}
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target fuzz_http_request
corpus=build/fuzz/corpus-http_request
mkdir -p "$corpus"
log=$(mktemp)
start=$(date +%s)
status=0
build/fuzz/tests/fuzz/fuzz_http_request -runs="$runs" -print_final_stats=1 "$corpus" tests/fuzz/corpus/http_request \
  > "$log" 2>&1 || status=$?
seconds=$(( $(date +%s) - start ))
{
  echo "fuzz_http_request: $runs executions asked, $seconds s, exit status $status ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), one core"
  grep -E '^(stat::|Done|#[0-9]+ *DONE)|ERROR|crash|deadly' "$log" || true
} | tee "$out"
[ "$status" -eq 0 ] || { tail -n 60 "$log"; exit "$status"; }
rm -f "$log"
