//===- Tensor.cpp - Tensors, buffers and element types --------------------===//
//
// Sizes and names of element types, aligned buffers and tensor helpers.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

namespace strait {
namespace rt {

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case program::DTYPE_F32:
  case program::DTYPE_I32:
  case program::DTYPE_U32:
    return 4;
  case program::DTYPE_F64:
  case program::DTYPE_I64:
  case program::DTYPE_U64:
    return 8;
  case program::DTYPE_F16:
  case program::DTYPE_BF16:
  case program::DTYPE_I16:
  case program::DTYPE_U16:
    return 2;
  case program::DTYPE_U8:
  case program::DTYPE_I8:
  case program::DTYPE_BOOL:
    return 1;
  default:
    return 0;
  }
}

std::string dtypeName(DType dtype) {
  switch (dtype) {
  case program::DTYPE_F32:
    return "f32";
  case program::DTYPE_F64:
    return "f64";
  case program::DTYPE_F16:
    return "f16";
  case program::DTYPE_BF16:
    return "bf16";
  case program::DTYPE_I64:
    return "i64";
  case program::DTYPE_I32:
    return "i32";
  case program::DTYPE_I16:
    return "i16";
  case program::DTYPE_I8:
    return "i8";
  case program::DTYPE_U8:
    return "u8";
  case program::DTYPE_U16:
    return "u16";
  case program::DTYPE_U32:
    return "u32";
  case program::DTYPE_U64:
    return "u64";
  case program::DTYPE_BOOL:
    return "bool";
  default:
    return "unspecified(" + std::to_string(static_cast<int>(dtype)) + ")";
  }
}

int64_t numElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string shapeToString(const Shape &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? "x" : "") << shape[i];
  os << "]";
  return os.str();
}

std::string Tensor::typeString() const {
  return dtypeName(dtype) + shapeToString(shape);
}

void Buffer::FreeDeleter::operator()(void *p) const {
  if (release)
    release(p);
  else
    std::free(p);
}

Buffer Buffer::adopt(void *data, size_t bytes, void (*release)(void *)) {
  Buffer b;
  b.storage = std::unique_ptr<void, FreeDeleter>(data, FreeDeleter{release});
  b.bytes = bytes;
  return b;
}

Buffer::Buffer(size_t size) : bytes(size) {
  size_t rounded = ((size + 63) / 64) * 64;
  if (rounded == 0)
    rounded = 64;
  void *p = std::aligned_alloc(64, rounded);
  if (!p)
    throw std::bad_alloc();
  std::memset(p, 0, rounded);
  storage.reset(p);
}

OwnedTensor::OwnedTensor(DType dtype, Shape shape)
    : buffer(numElements(shape) * dtypeSize(dtype)) {
  tensor.dtype = dtype;
  tensor.shape = std::move(shape);
  tensor.data = buffer.data();
}

} // namespace rt
} // namespace strait
