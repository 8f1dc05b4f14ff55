#!/usr/bin/env bash
#===- fuzz/build-codec.sh - Build the codec payload fuzzer -----------------===#
#
# Compiles the runtime's codecs (runtime/lib/codec/Codec.cpp and the core
# files it needs) and the program format's generated protobuf code with
# clang and -fsanitize=fuzzer,address. Needs a configured build for the
# generated strait_program.pb.{h,cc} (default: build/).
#
#   fuzz/build-codec.sh [BUILD_DIR]   -> fuzz/out/codec_fuzzer
#   fuzz/out/codec_fuzzer -max_total_time=60 fuzz/corpus/codec
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
  echo "build-codec.sh: no $proto/strait_program.pb.cc; run: ninja -C $build strait_program_proto" >&2
  exit 1
fi
mkdir -p "$here/out" "$here/corpus/codec"
nice -n 10 "$cxx" -O1 -g -fsanitize="$san" -std=gnu++17 -I"$root/runtime/include" -I"$proto" \
  "$here/codec_fuzzer.cpp" "$proto/strait_program.pb.cc" \
  "$root"/runtime/lib/codec/Codec.cpp "$root"/runtime/lib/core/{ThreadPool,Status}.cpp \
  -lprotobuf -lpthread -o "$here/out/codec_fuzzer"
echo "built $here/out/codec_fuzzer"
