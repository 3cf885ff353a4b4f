#!/usr/bin/env bash
# The main job on a fresh machine: build Kiln, compile the bundled demo model (a 15.7M-parameter
# Llama trained on public-domain English, models/demo) into an engine file, and generate text.
set -euo pipefail
cd "$(dirname "$0")/.."

cmake --preset release >/dev/null
cmake --build --preset release --target kiln
kiln=build/release/kiln
engine=build/release/demo.kiln

"$kiln" build models/demo -o "$engine" --dtype bf16
"$kiln" inspect "$engine" | head -n 8
echo
"$kiln" run "$engine" -p "It is a truth universally acknowledged" -n 80 --temperature 0.8 --top-p 0.95 --seed 1
"$kiln" run "$engine" -p "In the beginning" -n 60 --temperature 0.8 --top-p 0.95 --seed 2
"$kiln" eval "$engine" --text models/demo/heldout.txt
