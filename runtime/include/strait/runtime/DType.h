//===- DType.h - Element types of runtime tensors ---------------*- C++ -*-===//
//
// The runtime's element type is the program format's DType enum; this header
// adds sizes, names and a compile-time mapping to C++ types.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_DTYPE_H
#define STRAIT_RUNTIME_DTYPE_H

#include "strait_program.pb.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace strait {
namespace rt {

using DType = ::strait::program::DType;

/// Bytes per element; 0 for DTYPE_UNSPECIFIED.
size_t dtypeSize(DType dtype);
/// "f32", "i64", ...
std::string dtypeName(DType dtype);

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> {
  static constexpr DType value = program::DTYPE_F32;
};
template <> struct DTypeOf<double> {
  static constexpr DType value = program::DTYPE_F64;
};
template <> struct DTypeOf<int64_t> {
  static constexpr DType value = program::DTYPE_I64;
};
template <> struct DTypeOf<int32_t> {
  static constexpr DType value = program::DTYPE_I32;
};
template <> struct DTypeOf<bool> {
  static constexpr DType value = program::DTYPE_BOOL;
};
template <> struct DTypeOf<uint8_t> {
  static constexpr DType value = program::DTYPE_U8;
};
template <> struct DTypeOf<int8_t> {
  static constexpr DType value = program::DTYPE_I8;
};

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_DTYPE_H
