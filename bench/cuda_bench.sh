#!/usr/bin/env bash
# Kiln on the GPU, in one run: makes a random-weight Llama-2-7B checkpoint (fp16), builds it with
# `kiln build --target cuda --dtype fp16` (kernels timed on this GPU), then measures
#   - load to first token (`kiln eval` of one token, wall clock, engine in the page cache),
#   - batch-1 decode tokens/s after a 128-token prompt (`kiln bench`, median of 3),
#   - the time of one 2048-token prefill step (`kiln bench --prompt 2048`, median of 3),
#   - both again with a bf16 KV cache (`--kv-cache-dtype bf16`),
#   - output tokens/s of 64 requests of 128 + 128 tokens at once, and of OFFLINE_REQUESTS (256)
#     such requests (`kiln bench --offline`, KV cache of BATCH_KV elements, default bf16); with
#     SERVE=1, kiln serve on the GPU (the same KV cache) driven by kiln bench serve at concurrency
#     1, 16 and 64; with PROFILE=1, the per-node profile of eager steps;
#     with QUANT=1, batch-1 decode and the 2048-token prefill of weight-only int8 (per channel) and
#     int4 (groups of 32 and of 128) engines and of an fp8 (e4m3) engine built from the same
#     checkpoint
# and, with PEERS set to a folder of PyTorch peer scripts (eager transformers, torch.compile), runs them beside it in the
# same call so that both see the same clocks. Writes $OUT/kiln_cuda.json (+ the peers' JSON).
#
#   KILN=path/to/kiln WORK=/scratch OUT=bench/results [PEERS=dir] bench/cuda_bench.sh
#
# The checkpoint and engine take 27 GB under $WORK; an existing checkpoint is reused.
set -euo pipefail
KILN=${KILN:-build/release/kiln}
WORK=${WORK:-/tmp/kiln_cuda_bench}
OUT=${OUT:-bench/results}
PEERS=${PEERS:-}
batch_kv=${BATCH_KV:-bf16}  # the KV cache of the batched, offline and serving runs
mkdir -p "$WORK" "$OUT"
ckpt=$WORK/llama-2-7b-fp16
engine=$WORK/llama-2-7b-fp16.kiln
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
if [ ! -f "$ckpt/config.json" ]; then
  t0=$(now)
  "$KILN" random-checkpoint llama-2-7b -o "$ckpt" --dtype float16
  echo "random checkpoint: $(since "$t0") s"
fi
if [ ! -f "$ckpt/tokenizer.json" ]; then
  # The serving loop (--offline) detokenizes what it generates: give the random checkpoint the
  # demo model's BPE tokenizer, its vocabulary padded with unused entries to the model's size.
  python3 - "$ckpt" "${TOKENIZER:-models/demo/tokenizer.json}" <<'PY'
import json, sys
ckpt, src = sys.argv[1], sys.argv[2]
n = json.load(open(f"{ckpt}/config.json"))["vocab_size"]
t = json.load(open(src))
vocab = t["model"]["vocab"]
i = 0
while len(vocab) < n:
    vocab.setdefault(f"<unused_{i}>", len(vocab))
    i += 1
json.dump(t, open(f"{ckpt}/tokenizer.json", "w"))
PY
fi
t0=$(now)
"$KILN" build "$ckpt" -o "$engine" --target cuda --dtype fp16 --max-batch-tokens 2048 2>&1 | tail -n 2
build_s=$(since "$t0")
t0=$(now)
"$KILN" eval "$engine" --ids 1 >/dev/null
first_token_s=$(since "$t0")
"$KILN" bench "$engine" --prompt 128 --decode 128 --repeat 3 | tee "$WORK/decode.txt"
"$KILN" bench "$engine" --prompt 2048 --decode 8 --repeat 3 | tee "$WORK/prefill.txt"
"$KILN" bench "$engine" --prompt 128 --decode 128 --repeat 3 --kv-cache-dtype bf16 | tee "$WORK/decode_bf16kv.txt"
"$KILN" bench "$engine" --prompt 2048 --decode 8 --repeat 3 --kv-cache-dtype bf16 | tee "$WORK/prefill_bf16kv.txt"
# Batch 64 (64 requests of 128 + 128 tokens at once: decode-bound) and offline throughput
# (OFFLINE_REQUESTS requests of 128 + 128, the serving loop batching up to that many), each
# through the serving loop with a KV pool large enough that nothing is preempted (OFFLINE_KV_GIB,
# default 72: 256 requests need 32 GiB of a bf16 cache; 40 leaves an 80 GB card room for the weights).
# BATCH=0 leaves both out.
if [ "${BATCH:-1}" = 1 ]; then
  "$KILN" bench "$engine" --offline --batch 64 --prompt 128 --decode 128 --kv-cache-gib 24 --kv-cache-dtype "$batch_kv" |
    tee "$WORK/batch64.txt"
  "$KILN" bench "$engine" --offline --batch "${OFFLINE_REQUESTS:-256}" --prompt 128 --decode 128 --kv-cache-gib "${OFFLINE_KV_GIB:-72}" \
    --kv-cache-dtype "$batch_kv" | tee "$WORK/offline.txt"
fi
if [ "${SERVE:-0}" = 1 ]; then  # kiln serve on the GPU (KV cache from --gpu-memory-fraction), kiln bench serve on loopback
  "$KILN" serve "$engine" --port 8391 --gpu-memory-fraction 0.9 --max-num-seqs 64 --kv-cache-dtype "$batch_kv" \
    > "$WORK/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 300); do curl -sf http://127.0.0.1:8391/v2/health/ready > /dev/null && break; sleep 0.2; done
  head -n 2 "$WORK/serve.log"
  for c in 1 16 64; do
    "$KILN" bench serve --url http://127.0.0.1:8391 --tokenizer "$engine" --max-concurrency "$c" \
      --num-prompts $((c == 1 ? 8 : 2 * c)) --random-input-len 128 --random-output-len 128 \
      --json "$OUT/kiln_cuda_serve_c$c.json" | grep -iE "throughput|time to first token|time per output token" |
      sed "s/^/c=$c /" || true
  done
  kill "$server"; wait "$server" 2> /dev/null || true
fi
if [ "${QUANT:-0}" = 1 ]; then  # integer and fp8 engines of the same checkpoint
  for spec in ${QUANT_SPECS:-int8:0 int4:32 int4:128 fp8:0}; do
    dtype=${spec%:*} group=${spec#*:}
    qengine=$WORK/llama-2-7b-$dtype-g$group.kiln
    group_flag=()
    if [ "$dtype" != fp8 ]; then group_flag=(--group "$group"); fi
    t0=$(now)
    "$KILN" build "$ckpt" -o "$qengine" --target cuda --dtype "$dtype" "${group_flag[@]}" --max-batch-tokens 2048 2>&1 |
      tail -n 1
    echo "build $dtype group $group: $(since "$t0") s"
    "$KILN" bench "$qengine" --prompt 128 --decode 128 --repeat 3 | tee "$WORK/decode_${dtype}_g$group.txt"
    "$KILN" bench "$qengine" --prompt 2048 --decode 8 --repeat 3 | tee "$WORK/prefill_${dtype}_g$group.txt"
    if [ "${PROFILE:-0}" = 1 ]; then
      KILN_CUDA_PROFILE=1 "$KILN" bench "$qengine" --prompt 128 --decode 64 --repeat 1 \
        > "$OUT/kiln_cuda_profile_${dtype}_g$group.txt" 2>&1
    fi
    rm -f "$qengine"
  done
fi
if [ "${PROFILE:-0}" = 1 ]; then  # the per-node profile of eager decode and prefill steps
  KILN_CUDA_PROFILE=1 "$KILN" bench "$engine" --prompt 128 --decode 64 --repeat 1 > "$WORK/profile.txt" 2>&1
  KILN_CUDA_PROFILE=1 "$KILN" bench "$engine" --prompt 2048 --decode 1 --repeat 3 >> "$WORK/profile.txt" 2>&1
  KILN_CUDA_PROFILE=1 "$KILN" bench "$engine" --prompt 2048 --decode 1 --repeat 3 --kv-cache-dtype bf16 \
    >> "$WORK/profile.txt" 2>&1
  KILN_CUDA_PROFILE=1 "$KILN" bench "$engine" --offline --batch 64 --prompt 128 --decode 32 --kv-cache-gib 8 \
    >> "$WORK/profile.txt" 2>&1
  cp "$WORK/profile.txt" "$OUT/kiln_cuda_profile.txt"
fi

python3 - "$WORK" "$OUT" "$build_s" "$first_token_s" <<'PY'
import json, re, subprocess, sys, datetime
work, out, build_s, first_s = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
def grab(path, key):
    text = open(path).read()
    return float(re.search(rf"^{key}\s+([0-9.]+)", text, re.M).group(1))
decode = open(f"{work}/decode.txt").read()
res = {
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "gpu": subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.strip(),
    "model": "random llama-2-7b, fp16 weights (kiln build --target cuda --dtype fp16 --max-batch-tokens 2048)",
    "build_s": build_s,
    "load_to_first_token_s": first_s,
    "decode_bs1_after_128_tok_s": grab(f"{work}/decode.txt", "decode"),
    "prefill_2048_tok_s": grab(f"{work}/prefill.txt", "prefill"),
    "weights_MB_per_token": grab(f"{work}/decode.txt", "weights"),
    "copy_bandwidth_GB_s": grab(f"{work}/decode.txt", "memory"),
}
for name in ("batch64", "offline"):
    try:
        text = open(f"{work}/{name}.txt").read()
    except FileNotFoundError:
        continue
    res[f"{name}_output_tok_s"] = float(re.search(r"^output\s+([0-9.]+)", text, re.M).group(1))
    res[f"{name}_requests"] = int(re.search(r"^serving\s+([0-9]+) requests", text, re.M).group(1))
    res[f"{name}_step_ms"] = float(re.search(r"mean ([0-9.]+) ms in the model", text).group(1))
    res[f"{name}_preemptions"] = int(re.search(r"^preemptions ([0-9]+)", text, re.M).group(1))
    decode_only = re.search(r"^decode\s+([0-9.]+) tokens/s\s+\(in the model", text, re.M)
    if decode_only:  # the model's rate over steps of generated tokens only
        res[f"{name}_decode_only_tok_s"] = float(decode_only.group(1))
    res[f"{name}_kv_cache"] = re.search(r"KV pool [0-9]+ MiB (\S+)", text).group(1)
res["prefill_2048_ms"] = 2048 / res["prefill_2048_tok_s"] * 1e3
res["decode_bs1_bf16_kv_tok_s"] = grab(f"{work}/decode_bf16kv.txt", "decode")
res["prefill_2048_bf16_kv_ms"] = 2048 / grab(f"{work}/prefill_bf16kv.txt", "prefill") * 1e3
for spec in ("int8_g0", "int4_g32", "int4_g128", "fp8_g0"):
    try:
        q = grab(f"{work}/decode_{spec}.txt", "decode")
    except FileNotFoundError:
        continue
    res[f"decode_bs1_{spec}_tok_s"] = q
    res[f"decode_bs1_{spec}_vs_fp16"] = q / res["decode_bs1_after_128_tok_s"]
    res[f"weights_MB_per_token_{spec}"] = grab(f"{work}/decode_{spec}.txt", "weights")
    res[f"prefill_2048_{spec}_ms"] = 2048 / grab(f"{work}/prefill_{spec}.txt", "prefill") * 1e3
res["bandwidth_limit_tok_s"] = res["copy_bandwidth_GB_s"] * 1e3 / res["weights_MB_per_token"]
res["decode_share_of_limit"] = res["decode_bs1_after_128_tok_s"] / res["bandwidth_limit_tok_s"]
json.dump(res, open(f"{out}/kiln_cuda.json", "w"), indent=1)
print(json.dumps(res, indent=1))
PY

if [ -n "$PEERS" ]; then
  export OUT
  PYTHONUNBUFFERED=1 python3 "$PEERS/torch_compiled_llama.py" 2>&1 | tail -n 20 || echo "torch_compiled_llama failed"
  if [ "${EAGER:-0}" = 1 ]; then
    PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error python3 "$PEERS/transformers_eager_llama.py" 2>&1 | tail -n 20 ||
      echo "transformers_eager_llama failed"
  fi
fi
