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

root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/fuzz/runtime-fuzzer.sh"
BUILD_DIR=${1:-} build_runtime_fuzzer fused_program_fuzzer fused fused_program_fuzzer.cpp \
  "$root"/runtime/lib/core/{FusedProgram,Attributes,Backend,Status,Tensor}.cpp
