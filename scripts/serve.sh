#!/usr/bin/env bash
# The main job on a fresh machine: build Kiln and serve the bundled demo model (a 15.7M-parameter
# Llama trained on public-domain English, models/demo) with `kiln serve` on http://127.0.0.1:8000,
# an OpenAI- and KServe-compatible API. `kiln serve` compiles the demo engine on first use and
# prints a curl line to try. Extra arguments go to `kiln serve` (e.g. --port 8080 --api-key KEY).
set -euo pipefail
cd "$(dirname "$0")/.."

cmake --preset release >/dev/null
cmake --build --preset release --target kiln
exec build/release/kiln serve "$@"
