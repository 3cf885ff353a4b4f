#!/usr/bin/env bash
# Trains the demo model on one CUDA GPU, from the repository root, after prepare_data.py has written
# .train_data/ and models/demo/heldout.txt. Steps: train the tokenizer; a 20-step smoke run of the
# whole pipeline (stops here if it fails); three training runs side by side on the same GPU (the
# model is small, so they share it well) that differ only in training length and dropout; keep the
# run whose reloaded checkpoint has the lowest held-out perplexity.
# Writes into $OUT (or ./train_out): smoke.log, run_{a,b,c}.log, runs.tar.gz (logs and curves of
# every run) and model.tar.part-* (the kept checkpoint folder, split into 15 MB parts; rejoin with
# `cat model.tar.part-* | tar -x`).
set -euo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
out=${OUT:-$PWD/train_out}
work=${WORK:-/tmp/demo_train}
max_seconds=${MAX_SECONDS:-300}
mkdir -p "$out" "$work"
common=(--train-dir .train_data/train --heldout models/demo/heldout.txt --tokenizer-dir "$work/tok")

{
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  python3 tools/train_demo/train_tokenizer.py --train-dir .train_data/train --out-dir "$work/tok"
  python3 tools/train_demo/train.py "${common[@]}" --out-dir "$work/smoke" --max-steps 20 --eval-every 10 \
    --warmup 5 --gen-tokens 8
} > "$out/smoke.log" 2>&1 || { cat "$out/smoke.log"; echo "smoke run FAILED"; exit 1; }
cat "$out/smoke.log"
echo "smoke run passed"

# name epochs dropout
runs=("a 12 0.1" "b 24 0.1" "c 40 0.2")
pids=()
for r in "${runs[@]}"; do
  read -r name epochs dropout <<<"$r"
  python3 tools/train_demo/train.py "${common[@]}" --out-dir "$work/run_$name" --epochs "$epochs" \
    --dropout "$dropout" --max-seconds "$max_seconds" > "$out/run_$name.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
[ $status -eq 0 ] || echo "some run FAILED"

best=$(python3 - "$work" <<'EOF'
import json, os, sys
work = sys.argv[1]
best = None
for name in "abc":
    path = os.path.join(work, "run_" + name, "training_log.json")
    if not os.path.exists(path):
        print(f"run {name}: no log", file=sys.stderr)
        continue
    log = json.load(open(path))
    ppl = log["final"]["heldout_ppl_fp32_reloaded"]
    print(f"run {name}: epochs {log['hyperparameters']['epochs']} dropout {log['hyperparameters']['dropout']} "
          f"steps {log['schedule']['steps']} ({log['schedule']['stopped_by']}) epochs seen {log['schedule']['epochs_seen']:.1f} "
          f"kept step {log['kept_checkpoint']['step']} val {log['kept_checkpoint']['val_loss']:.4f} "
          f"(final {log['kept_checkpoint']['final_step_val_loss']:.4f}) ppl {ppl:.3f} "
          f"{log['tokens_per_second']} tok/s {log['train_seconds']} s", file=sys.stderr)
    if best is None or ppl < best[1]:
        best = (name, ppl)
print(best[0] if best else "")
EOF
)
[ -n "$best" ] || { echo "no run finished"; exit 1; }
echo "kept run $best"
(cd "$work" && tar -czf "$out/runs.tar.gz" run_*/training_log.json run_*/loss_curve.png run_*/config.json)
(cd "$work/run_$best" && tar -cf - . | split -b 15000000 -d - "$out/model.tar.part-")
ls -la "$out" "$work/run_$best"
python3 - "$work/run_$best/training_log.json" <<'EOF'
import json, sys
log = json.load(open(sys.argv[1]))
print(json.dumps(log["final"], indent=1))
for s in log["samples"]:
    print(repr(s["prompt"]), "| greedy:", repr(s["greedy"]))
    print(repr(s["prompt"]), "| sampled:", repr(s["sampled_t0.8_k40_p0.95_seed0"]))
EOF
