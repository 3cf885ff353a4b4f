#!/usr/bin/env bash
# The main job on a fresh machine: build Kiln, compile a bundled checkpoint into an engine file,
# inspect it and run it.
set -euo pipefail
cd "$(dirname "$0")/.."

cmake --preset release >/dev/null
cmake --build --preset release --target kiln
kiln=build/release/kiln
model=tests/golden/data/llama_gqa
engine=build/release/demo-llama.kiln

"$kiln" build "$model" -o "$engine" --dtype fp32
"$kiln" inspect "$engine"
echo
"$kiln" eval "$engine" --ids 266,83,150,67,90,12 --logits-out build/release/demo-logits.npy --generate 12
