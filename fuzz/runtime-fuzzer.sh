#===- fuzz/runtime-fuzzer.sh - Shared part of the runtime fuzzer builds ----===#
#
# Sourced by build-codec.sh and build-fused.sh:
#   build_runtime_fuzzer NAME CORPUS FUZZER.cpp RUNTIME_SOURCES...
# compiles the fuzzer, the program format's generated protobuf code and the
# given runtime sources with clang and -fsanitize=fuzzer,address into
# fuzz/out/NAME. Needs a configured build for the generated
# strait_program.pb.{h,cc} ($1 of the calling script, default: build/).
# Environment: CXX (default clang++-19), SANITIZERS (default fuzzer,address).
#
#===----------------------------------------------------------------------===#

build_runtime_fuzzer() {
  local name=$1 corpus=$2 fuzzer=$3
  shift 3
  local here root build cxx san proto
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  root=$(dirname "$here")
  build=$(cd "${BUILD_DIR:-$root/build}" && pwd)
  cxx=${CXX:-clang++-19}
  san=${SANITIZERS:-fuzzer,address}
  proto=$build/runtime/proto
  if [[ ! -f $proto/strait_program.pb.cc ]]; then
    echo "$name: no $proto/strait_program.pb.cc; run: ninja -C $build strait_program_proto" >&2
    exit 1
  fi
  mkdir -p "$here/out" "$here/corpus/$corpus"
  nice -n 10 "$cxx" -O1 -g -fsanitize="$san" -std=gnu++17 -I"$root/runtime/include" -I"$proto" \
    "$here/$fuzzer" "$proto/strait_program.pb.cc" "$@" \
    -lprotobuf -lpthread -o "$here/out/$name"
  echo "built $here/out/$name"
}
