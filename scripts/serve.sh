#!/usr/bin/env bash
# The main job on a fresh machine: build Kiln and serve the bundled demo model (a 15.7M-parameter
# Llama trained on public-domain English, models/demo) with `kiln serve` on http://127.0.0.1:8000,
# an OpenAI- and KServe-compatible API. `kiln serve` compiles the demo engine on first use and
# prints a curl line to try. Extra arguments go to `kiln serve` (e.g. --port 8080 --api-key KEY).
#
# --cuda builds the `cuda` preset instead (the CUDA backend for Hopper GPUs; needs the CUDA toolkit
# 12.0 or newer) and runs build/cuda/kiln serve, which serves engines built with --target cuda on
# the GPU:
#   ./scripts/serve.sh --cuda model.kiln --gpu-memory-fraction 0.9
set -euo pipefail
cd "$(dirname "$0")/.."

preset=release
args=()
for arg in "$@"; do
  if [ "$arg" = "--cuda" ]; then preset=cuda; else args+=("$arg"); fi
done

cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" --target kiln
exec "build/$preset/kiln" serve "${args[@]}"
