#!/usr/bin/env bash
# Installs the reference tokenizers (exact versions from package-lock.json) and writes the
# expected ids for the parity test: tests/parity/setup.sh OUT_DIR, then run test_llm with
# KILN_PARITY_DIR=OUT_DIR.
set -euo pipefail
out=${1:?usage: tests/parity/setup.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")"
npm ci --prefer-offline --no-audit --no-fund >/dev/null
node make_expected.mjs "$out"
