#!/usr/bin/env bash
#===- fuzz/build-fused.sh - Build the fused-program decoder fuzzer ---------===#
#
# Compiles runtime/lib/core's decoder (FusedProgram.cpp and what it needs)
# and the program format's generated protobuf code with clang and
# -fsanitize=fuzzer,address. Needs a configured build for the generated
# strait_program.pb.{h,cc} (default: build/).
#
#   fuzz/build-fused.sh [BUILD_DIR]   -> fuzz/out/fused_program_fuzzer
#   fuzz/out/fused_program_fuzzer -max_total_time=60 fuzz/corpus/fused
# Environment: CXX (default clang++-19), SANITIZERS (default fuzzer,address).
#
#===----------------------------------------------------------------------===#
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=$(cd "${1:-$root/build}" && pwd)
cxx=${CXX:-clang++-19}
san=${SANITIZERS:-fuzzer,address}
proto=$build/runtime/proto
if [[ ! -f $proto/strait_program.pb.cc ]]; then
  echo "build-fused.sh: no $proto/strait_program.pb.cc; run: ninja -C $build strait_program_proto" >&2
  exit 1
fi
mkdir -p "$here/out" "$here/corpus/fused"
nice -n 10 "$cxx" -O1 -g -fsanitize="$san" -std=gnu++17 -I"$root/runtime/include" -I"$proto" \
  "$here/fused_program_fuzzer.cpp" "$proto/strait_program.pb.cc" \
  "$root"/runtime/lib/core/{FusedProgram,Attributes,Backend,Status,Tensor}.cpp \
  -lprotobuf -lpthread -o "$here/out/fused_program_fuzzer"
echo "built $here/out/fused_program_fuzzer"
