#!/usr/bin/env bash
# BERT-base (bench/bert_base_onnx.py: 12 layers, random weights) at sequence 128, batch 1 and 8,
# Kiln against ONNX Runtime (onnxruntime-node, bench/ort_time.mjs) on this machine's CPU with the
# same thread counts. First both run batch 8 once and the largest difference of their outputs is
# printed. Each round drops the model from the page cache, and the engine before every kiln run,
# then times both in turn; the summary gives the medians of the rounds' means and their ratio.
# With KILN_BASE, a second kiln build compiles the model into an engine of its own and runs it in
# each round too, for a before/after comparison.
# Needs python3-onnx and python3-numpy, and onnxruntime-node from tests/onnx/models/setup.sh.
#   [KILN=build/ci/kiln] [KILN_BASE=other/kiln] [KILN_ONNX_MODELS_DIR=build/ci/onnx_models] [ROUNDS=3]
#   [THREADS="1 2"] bench/bert_cpu_vs_ort.sh
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=${KILN:-build/ci/kiln}
base=${KILN_BASE:-}
export KILN_ONNX_MODELS_DIR=${KILN_ONNX_MODELS_DIR:-build/ci/onnx_models}
rounds=${ROUNDS:-3}
threads=${THREADS:-"1 2"}
work=build/bench/bert
mkdir -p "$work"
[ -f "$work/bert_base.onnx" ] || /usr/bin/python3 bench/bert_base_onnx.py "$work/bert_base.onnx"
/usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
ids = rng.integers(0, 30522, (8, 128)).astype(np.int64)
for b in (1, 8):
    np.save(f"{sys.argv[1]}/ids{b}.npy", ids[:b])
    np.save(f"{sys.argv[1]}/mask{b}.npy", np.ones((b, 128), np.int64))
PY
"$kiln" build "$work/bert_base.onnx" -o "$work/bert_base.kiln" \
  --profile input_ids:1x1,1x128,8x512 --profile attention_mask:1x1,1x128,8x512 2>&1 | tail -n 1
if [ -n "$base" ]; then
  "$base" build "$work/bert_base.onnx" -o "$work/bert_base_base.kiln" \
    --profile input_ids:1x1,1x128,8x512 --profile attention_mask:1x1,1x128,8x512 2>&1 | tail -n 1
fi
lscpu | grep 'Model name'
feeds() { echo "input_ids=$work/ids$1.npy attention_mask=$work/mask$1.npy"; }
kiln_feeds() { echo "--input input_ids=$work/ids$1.npy --input attention_mask=$work/mask$1.npy"; }
# The same outputs first: batch 8 through both.
# shellcheck disable=SC2046  # NAME=FILE words
"$kiln" eval "$work/bert_base.kiln" $(kiln_feeds 8) --outputs-dir "$work/out" >/dev/null
# shellcheck disable=SC2046
ORT_OUTPUTS_DIR="$work/ort" node bench/ort_time.mjs "$work/bert_base.onnx" 2 1 $(feeds 8) >/dev/null 2>&1
/usr/bin/python3 -c "
import sys, numpy as np
k, o = np.load(sys.argv[1]), np.load(sys.argv[2])
print(f'last_hidden_state {list(k.shape)}: largest difference {np.abs(k - o).max():.2e} (largest value {np.abs(o).max():.2f})')
" "$work/out/last_hidden_state.npy" "$work/ort/last_hidden_state.npy"
results=$(mktemp)
# The mean of one kiln build's runs of its engine $5 at batch $2 on $3 threads ($4 of them).
kiln_mean() {
  # shellcheck disable=SC2046
  "$1" eval "$5" $(kiln_feeds "$2") --outputs-dir "$work/out" --repeat "$4" --threads "$3" 2>&1 |
    sed -n 's/.*mean \([0-9.]*\) ms.*/\1/p'
}
for round in $(seq "$rounds"); do
  dd if="$work/bert_base.onnx" iflag=nocache count=0 status=none
  for b in 1 8; do
    repeat=$(( b == 1 ? 20 : 5 ))
    for t in $threads; do
      dd if="$work/bert_base.kiln" iflag=nocache count=0 status=none
      k=$(kiln_mean "$kiln" "$b" "$t" "$repeat" "$work/bert_base.kiln")
      kb=-
      if [ -n "$base" ]; then
        dd if="$work/bert_base_base.kiln" iflag=nocache count=0 status=none
        kb=$(kiln_mean "$base" "$b" "$t" "$repeat" "$work/bert_base_base.kiln")
      fi
      # shellcheck disable=SC2046
      o=$(node bench/ort_time.mjs "$work/bert_base.onnx" "$t" "$repeat" $(feeds "$b") 2>/dev/null |
            sed -n 's/.*mean \([0-9.]*\) ms.*/\1/p')
      echo "round $round batch $b threads $t: kiln $k ms, onnxruntime $o ms${base:+, kiln base $kb ms}"
      echo "$b $t $k $o $kb" >> "$results"
    done
  done
done
echo "medians of the rounds' means (batch, threads: kiln, onnxruntime, kiln / onnxruntime${base:+; kiln base, base / kiln}):"
# The median over the rounds of column $3 of the results for batch $1 and $2 threads.
median() {
  awk -v b="$1" -v t="$2" -v c="$3" '$1 == b && $2 == t { print $c }' "$results" | sort -g |
    awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
for b in 1 8; do
  for t in $threads; do
    km=$(median "$b" "$t" 3)
    om=$(median "$b" "$t" 4)
    awk -v b="$b" -v t="$t" -v k="$km" -v o="$om" 'BEGIN { printf "  batch %d, %d threads: %.1f ms, %.1f ms, %.2fx", b, t, k, o, k / o }'
    if [ -n "$base" ]; then
      bm=$(median "$b" "$t" 5)
      awk -v k="$km" -v m="$bm" 'BEGIN { printf "; %.1f ms, %.2fx", m, m / k }'
    fi
    echo
  done
done
rm -f "$results"
