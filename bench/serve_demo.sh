#!/usr/bin/env bash
# Serving figures on the demo model: kiln serve on loopback, driven by kiln bench serve at
# concurrency 1, 16 and 64 with the same random prompts (128 tokens in, 128 out), then the
# engine's own time against its model-step time from /metrics, and the CPU time of the server's
# network threads (HTTP, JSON, SSE; named kiln-http) against the same, split into user space and
# the kernel (mostly the loopback TCP stack, whose receiving side runs in the sender's time).
# Usage: [SERVE_ARGS="--kv-cache-dtype fp32"] [CONCURRENCY="1 16 64"] [KILN=path/to/kiln] bench/serve_demo.sh [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=${KILN:-build/release/kiln}
threads=${1:-2}
port=${KILN_BENCH_PORT:-8019}
engine=build/release/demo.kiln
[ -f "$engine" ] || "$kiln" build models/demo -o "$engine" --dtype bf16 >/dev/null
dd if="$engine" iflag=nocache count=0 status=none
# shellcheck disable=SC2086  # SERVE_ARGS: extra kiln serve flags, split on spaces
"$kiln" serve "$engine" --port "$port" --threads "$threads" --max-num-seqs 64 ${SERVE_ARGS:-} 2>/dev/null &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/v2/health/ready" >/dev/null && break; sleep 0.2; done
lscpu | grep 'Model name'
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 ~ "^"m"[{]" {print $2}'; }
http_cpu() {  # the server's network threads so far: "user-ticks system-ticks run-seconds"
  local user=0 sys=0 run=0 t
  for t in /proc/"$server"/task/*; do
    if [ "$(cat "$t/comm" 2>/dev/null)" = kiln-http ]; then
      read -r u s < <(awk '{print $14, $15}' "$t/stat")
      read -r r _ < "$t/schedstat"  # nanoseconds on a CPU: exact, where the ticks are 10 ms
      user=$((user + u)); sys=$((sys + s)); run=$((run + r))
    fi
  done
  awk -v u="$user" -v s="$sys" -v r="$run" 'BEGIN { print u, s, r / 1e9 }'
}
for c in ${CONCURRENCY:-1 16 64}; do
  n=$(( c == 1 ? 16 : 4 * c ))
  step0=$(metric kiln_engine_step_seconds_total); over0=$(metric kiln_engine_overhead_seconds_total); http0=$(http_cpu)
  "$kiln" bench serve --url "http://127.0.0.1:$port" --tokenizer "$engine" --max-concurrency "$c" \
      --num-prompts "$n" --random-input-len 128 --random-output-len 128 --json "/tmp/kiln_serve_demo_c$c.json" |
    grep -iE "throughput|time to first token|time per output token" | sed "s/^/c=$c /" || true
  step1=$(metric kiln_engine_step_seconds_total); over1=$(metric kiln_engine_overhead_seconds_total); http1=$(http_cpu)
  awk -v s0="$step0" -v s1="$step1" -v o0="$over0" -v o1="$over1" -v h0="$http0" -v h1="$http1" -v c="$c" \
    'BEGIN { split(h0, a, " "); split(h1, b, " "); u = b[1] - a[1]; k = b[2] - a[2]; r = b[3] - a[3]; d = s1 - s0
             f = (u + k) > 0 ? u / (u + k) : 0  # the user share, from the ticks
             printf "c=%s engine overhead %.2f%%, network threads %.2f%% (user %.2f%%, kernel %.2f%%) of model-step time\n",
                    c, 100 * (o1 - o0) / d, 100 * r / d, 100 * r * f / d, 100 * r * (1 - f) / d }'
done
