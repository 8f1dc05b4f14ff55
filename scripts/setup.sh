#!/usr/bin/env bash
# Installs what Strait needs (Debian packages, a Python venv) and builds it.
# Idempotent: packages already present are not reinstalled, an existing build
# is updated incrementally. Usage: scripts/setup.sh [build-dir]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"

packages=(
  cmake ninja-build g++ python3-venv
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools
  libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata
  libgloo-dev libhiredis-dev redis-server libdnnl-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev iproute2 libsodium-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# requirements.txt: tools and tests; requirements-check.txt: PyTorch for the
# numerical checks of gradients and training against torch autograd.
stamp="$venv/.requirements.sha"
want="$(cat "$root/python/requirements.txt" "$root/python/requirements-check.txt" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$venv/bin/pip" install -q --upgrade pip >/dev/null
  "$venv/bin/pip" install -q -r "$root/python/requirements.txt" -r "$root/python/requirements-check.txt"
  echo "$want" > "$stamp"
fi

if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py \
    -DSTRAIT_PYTHON="$venv/bin/python" >/dev/null
fi
jobs="${STRAIT_JOBS:-$(nproc)}"
ninja -C "$build" -j"$jobs"
