#!/usr/bin/env bash
#===- fuzz/build.sh - Build the ONNX importer fuzzers with libFuzzer -------===#
#
# Compiles the importer and the graph dialect sources with clang and
# -fsanitize=fuzzer,address (so libFuzzer sees their coverage) and links the
# Debian MLIR/LLVM libraries, which stay uninstrumented. Needs the tablegen
# outputs of a configured CMake build (default: build/, run
# `ninja -C build StraitGraph` once first).
#
#   fuzz/build.sh [BUILD_DIR]       -> fuzz/out/onnx_import_fuzzer
#                                      fuzz/out/onnx_text_import_fuzzer
# Environment: CXX (default clang++-19), JOBS (default 2), SANITIZERS
# (default fuzzer,address), LLVM_DIR (default /usr/lib/llvm-19).
#
#===----------------------------------------------------------------------===#
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=$(cd "${1:-$root/build}" && pwd)
llvm=${LLVM_DIR:-/usr/lib/llvm-19}
cxx=${CXX:-clang++-19}
jobs=${JOBS:-2}
san=${SANITIZERS:-fuzzer,address}
out=$here/out
mkdir -p "$out/obj"

if [[ ! -f $build/include/strait/Dialect/Graph/GraphOps.h.inc ]]; then
  echo "build.sh: no tablegen outputs in $build/include; run: ninja -C $build StraitGraph" >&2
  exit 1
fi

sources=(
  "$root"/lib/Target/ONNX/*.cpp
  "$root"/lib/Dialect/Graph/IR/*.cpp
  "$root"/lib/Dialect/Graph/Transforms/InferShapes.cpp
)
mlir_libs=(Transforms TransformUtils Rewrite RewritePDL PDLToPDLInterp
  PDLInterpDialect PDLDialect Pass Analysis LoopLikeInterface
  DataLayoutInterfaces InferIntRangeInterface Presburger ViewLikeInterface
  FuncDialect InferTypeOpInterface SideEffectInterfaces CallInterfaces
  ControlFlowInterfaces FunctionInterfaces CopyOpInterface
  MemorySlotInterfaces RuntimeVerifiableOpInterface SubsetOpInterface
  ValueBoundsOpInterface DestinationStyleOpInterface IR Support)
libs=""
for l in "${mlir_libs[@]}"; do libs+=" $llvm/lib/libMLIR$l.a"; done

cflags="-O1 -gline-tables-only -fsanitize=$san -std=gnu++17 -fno-exceptions"
cflags+=" -fno-omit-frame-pointer -DONNX_ML=1 -DONNX_NAMESPACE=onnx -DNDEBUG"
cflags+=" -D__STDC_CONSTANT_MACROS -D__STDC_FORMAT_MACROS -D__STDC_LIMIT_MACROS"
cflags+=" -I$llvm/include -I$root/include -I$build/include -Wno-unused-command-line-argument"
# gcc accepts narrowing in braces as a warning; clang rejects it by default.
cflags+=" -Wno-c++11-narrowing"

# A generated ninja file gives incremental rebuilds with header dependencies.
{
  echo "cflags = $cflags"
  echo "rule cxx"
  echo "  command = $cxx \$cflags \$extra -MD -MF \$out.d -c \$in -o \$out"
  echo "  depfile = \$out.d"
  echo "  deps = gcc"
  echo "  description = CXX \$out"
  echo "rule link"
  echo "  command = $cxx -fsanitize=$san \$in -o \$out -Wl,--start-group$libs -Wl,--end-group" \
       "$llvm/lib/libLLVM.so.1 -lonnx_proto -lprotobuf -lpthread -Wl,-rpath,$llvm/lib"
  echo "  description = LINK \$out"
  objs=""
  for s in "${sources[@]}"; do
    o="obj/$(basename "$(dirname "$s")")_$(basename "${s%.cpp}").o"
    echo "build $o: cxx $s"
    objs+=" $o"
  done
  echo "build obj/binary.o: cxx $here/onnx_import_fuzzer.cpp"
  echo "build obj/text.o: cxx $here/onnx_import_fuzzer.cpp"
  echo "  extra = -DSTRAIT_FUZZ_TEXT=1"
  echo "build onnx_import_fuzzer: link obj/binary.o$objs"
  echo "build onnx_text_import_fuzzer: link obj/text.o$objs"
} > "$out/build.ninja"

nice -n 10 ninja -C "$out" -j "$jobs"
echo "built $out/onnx_import_fuzzer and $out/onnx_text_import_fuzzer"
