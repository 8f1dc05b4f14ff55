#!/usr/bin/env bash
#===- fuzz/build-program.sh - Build the device program fuzzers -------------===#
#
# Usage: fuzz/build-program.sh
# Builds fuzz/out/program_fuzzer and fuzz/out/shard_fuzzer
# (fuzz/program_fuzzer.cpp) and fuzz/out/npy_fuzzer (fuzz/npy_fuzzer.cpp): the
# runtime core, the CPU backend, the codecs and the data loaders
# compiled with clang and -fsanitize=fuzzer-no-link,address (objects cached in
# fuzz/out/obj-program, rebuilt when their source is newer; two at a time),
# linked with the program format (protoc on runtime/proto) and OpenBLAS. Environment: CXX
# (default clang++-19), SANITIZERS (default address; e.g. address,undefined).
#
#===----------------------------------------------------------------------===#
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cxx=${CXX:-clang++-19}
san=${SANITIZERS:-address}
obj=$root/fuzz/out/obj-program-${san//,/-}
# Other sanitizer sets get their own binaries (program_fuzzer-address-undefined);
# UBSan findings stop the run (libFuzzer then reports them as crashes).
suffix=
extra=()
[[ $san == address ]] || suffix=-${san//,/-}
[[ $san == *undefined* ]] && extra=(-fno-sanitize-recover=undefined)
proto=$obj/proto
mkdir -p "$proto"
# The program format's C++ code, generated from the working tree's .proto.
if [[ ! $proto/strait_program.pb.cc -nt $root/runtime/proto/strait_program.proto ]]; then
  protoc -I"$root/runtime/proto" --cpp_out="$proto" "$root/runtime/proto/strait_program.proto"
  rm -f "$obj"/*.o
fi
flags=(-O1 -g -fsanitize=fuzzer-no-link,"$san" "${extra[@]}" -std=gnu++17 -I"$root/runtime/include"
       -I"$proto" -I"$root/runtime/proto" -I"$root/runtime/lib/cpu"
       -I/usr/include/x86_64-linux-gnu/openblas-pthread -Wno-c++11-narrowing)
sources=("$root"/runtime/lib/core/*.cpp "$root"/runtime/lib/cpu/*.cpp
         "$root"/runtime/lib/codec/*.cpp "$root"/runtime/lib/data/*.cpp
         "$proto/strait_program.pb.cc")
# An object is rebuilt when its source or any runtime header is newer.
header=$(ls -t "$root"/runtime/include/strait/runtime/*.h "$root"/runtime/lib/*/*.h \
  "$root"/runtime/proto/*.h "$proto/strait_program.pb.h" | head -1)
todo=()
for src in "${sources[@]}"; do
  o=$obj/$(basename "$src" .cpp).o
  [[ $o -nt $src && $o -nt $header ]] || todo+=("$src")
done
# clang rejects GCC's target_clones on a function declared before (CpuKernels.h):
# those files compile from a copy without the attribute (one version, no AVX2 clone).
for i in "${!todo[@]}"; do
  if grep -q target_clones "${todo[$i]}"; then
    copy=$obj/src/$(basename "${todo[$i]}")
    mkdir -p "$obj/src"
    sed 's/__attribute__((target_clones([^)]*)))//' "${todo[$i]}" > "$copy"
    todo[$i]=$copy
  fi
done
if ((${#todo[@]})); then
  printf '%s\n' "${todo[@]}" | nice -n 10 xargs -P 2 -I{} sh -c \
    'f={}; b=$(basename "$f" .cpp); exec "$0" "$@" -c "$f" -o '"$obj"'/"$b".o' "$cxx" "${flags[@]}"
fi
objs=()
for src in "${sources[@]}"; do objs+=("$obj/$(basename "$src" .cpp).o"); done
blas=/usr/lib/x86_64-linux-gnu/openblas-pthread
for variant in program:0 shard:1; do
  name=${variant%%:*}_fuzzer
  nice -n 10 "$cxx" -O1 -g -fsanitize=fuzzer,"$san" "${extra[@]}" -std=gnu++17 \
    -I"$root/runtime/include" -I"$proto" -DSTRAIT_FUZZ_SHARDS=${variant##*:} \
    "$root/fuzz/program_fuzzer.cpp" "${objs[@]}" -L"$blas" -Wl,-rpath,"$blas" -lopenblas \
    -lprotobuf -lpthread -o "$root/fuzz/out/$name$suffix"
  echo "built $root/fuzz/out/$name$suffix"
done
nice -n 10 "$cxx" -O1 -g -fsanitize=fuzzer,"$san" "${extra[@]}" -std=gnu++17 \
  -I"$root/runtime/include" -I"$proto" -I"$root/runtime/lib/data" "$root/fuzz/npy_fuzzer.cpp" \
  "${objs[@]}" -L"$blas" -Wl,-rpath,"$blas" -lopenblas -lprotobuf -lpthread \
  -o "$root/fuzz/out/npy_fuzzer$suffix"
echo "built $root/fuzz/out/npy_fuzzer$suffix"
