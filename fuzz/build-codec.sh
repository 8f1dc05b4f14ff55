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

root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/fuzz/runtime-fuzzer.sh"
BUILD_DIR=${1:-} build_runtime_fuzzer codec_fuzzer codec codec_fuzzer.cpp \
  "$root"/runtime/lib/codec/{Codec,IntBits}.cpp "$root"/runtime/lib/core/{ThreadPool,Status,Trace}.cpp
