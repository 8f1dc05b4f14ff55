//===- Npy.h - Strict reader and writer of NumPy .npy files -----*- C++ -*-===//
//
// The reader accepts format versions 1.0, 2.0 and 3.0 with a header of
// exactly the keys 'descr', 'fortran_order' (False only) and 'shape', a
// little-endian (or byte-sized) descr among <f4 <f8 <i8 <i4 <i2 |i1 <u2 <u4
// <u8 |u1 |b1, and a payload of exactly prod(shape) elements. Anything else
// (bad magic, malformed header, big-endian or Fortran-ordered data, a
// truncated or over-long payload, an element count that overflows) is an
// InvalidArgument or IoError naming the file; nothing aborts.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_DATA_NPY_H
#define STRAIT_RUNTIME_DATA_NPY_H

#include "strait/runtime/Status.h"
#include "strait/runtime/Tensor.h"

#include <string>
#include <vector>

namespace strait {
namespace rt {
namespace data {

struct NpyArray {
  DType dtype = program::DTYPE_UNSPECIFIED;
  Shape shape;
  std::vector<char> bytes; // row-major, little-endian
  int64_t numel() const { return numElements(shape); }
};

/// Parses the bytes of a .npy file; `name` is used in error messages.
StatusOr<NpyArray> parseNpy(const std::string &contents, const std::string &name);
/// Reads and parses a .npy file.
StatusOr<NpyArray> readNpy(const std::string &path);
/// Writes a tensor as a version 1.0 .npy file.
Status writeNpy(const std::string &path, const Tensor &tensor);
/// The npy descr of a dtype ("<f4"), or "" when .npy has none (bf16).
std::string npyDescr(DType dtype);

} // namespace data
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_DATA_NPY_H
