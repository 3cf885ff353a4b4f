#!/usr/bin/env bash
# Installs the clients the end-to-end server tests drive (exact versions from package-lock.json)
# into OUT_DIR: tests/e2e/setup.sh OUT_DIR, then run ctest -L e2e with KILN_E2E_DIR=OUT_DIR
# (the CMake build sets it to build/<preset>/e2e).
set -euo pipefail
out=${1:?usage: tests/e2e/setup.sh OUT_DIR}
mkdir -p "$out"
src=$(cd "$(dirname "$0")" && pwd)
cp "$src/package.json" "$src/package-lock.json" "$out/"
cd "$out"
npm ci --prefer-offline --no-audit --no-fund --loglevel=error >/dev/null
