#!/usr/bin/env bash
# Soak test of `kiln serve` (a benchmark, not part of CI): starts the server on the demo model,
# finds its saturation throughput with `kiln bench serve` (closed loop, the best request rate over a
# few concurrencies), then sends Poisson arrivals at 80% of it for SOAK_MINUTES (default 10) and
# fails unless every request completed with exactly the tokens it asked for and the server is
# still healthy at the end and shuts down cleanly on SIGTERM.
#
#   bench/soak.sh                         # build/release/kiln, 10 minutes
#   SOAK_MINUTES=1 THREADS=2 bench/soak.sh
#
# Environment: KILN (binary), ENGINE (engine file; default: the demo model, which `kiln serve`
# compiles on first use), PORT (8321), THREADS (all cores), SOAK_MINUTES (10), INPUT_LEN (128),
# OUTPUT_LEN (128), OUT (build/soak: server log and the JSON of every run).
set -euo pipefail
cd "$(dirname "$0")/.."

kiln=${KILN:-build/release/kiln}
port=${PORT:-8321}
threads=${THREADS:-$(nproc)}
minutes=${SOAK_MINUTES:-10}
input_len=${INPUT_LEN:-128}
output_len=${OUTPUT_LEN:-128}
out=${OUT:-build/soak}
url=http://127.0.0.1:$port
mkdir -p "$out"

[ -x "$kiln" ] || { echo "soak: $kiln not found; build it with: cmake --build build/release --target kiln" >&2; exit 1; }
command -v jq >/dev/null || { echo "soak: needs jq (apt-get install jq)" >&2; exit 1; }

# shellcheck disable=SC2086
"$kiln" serve ${ENGINE:-} --host 127.0.0.1 --port "$port" --threads "$threads" >"$out/server.log" 2>&1 &
server=$!
cleanup() { kill "$server" 2>/dev/null || true; }
trap cleanup EXIT

echo "soak: waiting for kiln serve (pid $server) on $url"
for _ in $(seq 1 600); do
  curl -sf "$url/v1/models" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { echo "soak: kiln serve exited; see $out/server.log" >&2; tail -n 20 "$out/server.log" >&2; exit 1; }
  sleep 1
done
curl -sf "$url/v1/models" >/dev/null || { echo "soak: kiln serve did not come up in 10 minutes" >&2; exit 1; }

bench() {  # bench NAME ARGS...: one run, its JSON in $out/NAME.json
  local name=$1
  shift
  "$kiln" bench serve --url "$url" --tokenizer models/demo --random-input-len "$input_len" \
    --random-output-len "$output_len" --json "$out/$name.json" "$@" | tee "$out/$name.txt"
}

# Saturation: the best completed-requests-per-second of closed-loop runs at rising concurrency.
saturation=0
for c in 8 16 32 64; do
  bench "saturation_c$c" --max-concurrency "$c" --num-prompts $((c * 4)) --seed "$c" >/dev/null
  rate=$(jq '.request_throughput' "$out/saturation_c$c.json")
  failed=$(jq '.failed' "$out/saturation_c$c.json")
  echo "soak: concurrency $c: $rate req/s, $failed failed"
  saturation=$(jq -n "[$saturation, $rate] | max")
done
rate=$(jq -n "$saturation * 0.8")
prompts=$(jq -n "($rate * $minutes * 60) | ceil")
echo "soak: saturation $saturation req/s; $minutes minutes of Poisson arrivals at $rate req/s ($prompts requests)"

bench soak --request-rate "$rate" --num-prompts "$prompts" --seed 7
report=$out/soak.json
completed=$(jq '.completed' "$report")
failed=$(jq '.failed' "$report")
mismatch=$(jq '.output_len_mismatch' "$report")
status=0
if [ "$completed" != "$prompts" ] || [ "$failed" != 0 ] || [ "$mismatch" != 0 ]; then
  echo "soak: FAILED: $completed of $prompts completed, $failed failed, $mismatch with the wrong output length" >&2
  jq '.errors' "$report" >&2
  status=1
fi
if ! curl -sf "$url/v1/models" >/dev/null; then
  echo "soak: FAILED: the server no longer answers" >&2
  status=1
fi
kill -TERM "$server"
if ! wait "$server"; then
  echo "soak: FAILED: kiln serve did not exit 0 on SIGTERM" >&2
  status=1
fi
trap - EXIT
[ "$status" = 0 ] && echo "soak: passed: $completed requests at $rate req/s over $minutes minutes, none failed or lost"
exit "$status"
