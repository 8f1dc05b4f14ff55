//===- Tensor.h - Non-owning typed views over runtime memory ----*- C++ -*-===//
//
// A Tensor is a (dtype, static shape, pointer) triple. It never owns memory:
// the executor places activations in the arena and persistent values in their
// own buffers (see Buffer), and hands kernels Tensors over them.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TENSOR_H
#define STRAIT_RUNTIME_TENSOR_H

#include "strait/runtime/DType.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strait {
namespace rt {

using Shape = std::vector<int64_t>;

int64_t numElements(const Shape &shape);
std::string shapeToString(const Shape &shape);

struct Tensor {
  DType dtype = program::DTYPE_UNSPECIFIED;
  Shape shape;
  void *data = nullptr;
  /// A host copy of the bytes, for small integer program constants (the
  /// executor's): a device backend reads such an input (axes, bounds)
  /// without waiting for its stream. Null otherwise.
  const void *host = nullptr;

  int64_t numel() const { return numElements(shape); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  size_t byteSize() const { return numel() * dtypeSize(dtype); }
  template <typename T> T *as() const { return static_cast<T *>(data); }
  /// "f32[2x3]"
  std::string typeString() const;
};

/// An owned, 64-byte aligned, zero-initialised byte buffer.
class Buffer {
public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  /// Takes ownership of `bytes` at `data`, released by `release(data)`:
  /// memory a device backend allocated (e.g. CUDA managed memory).
  static Buffer adopt(void *data, size_t bytes, void (*release)(void *));
  void *data() const { return storage.get(); }
  size_t size() const { return bytes; }

private:
  struct FreeDeleter {
    void (*release)(void *); // null (value-initialized): std::free
    void operator()(void *p) const;
  };
  std::unique_ptr<void, FreeDeleter> storage;
  size_t bytes = 0;
};

/// A Tensor together with the Buffer holding its data; used by tests, tools
/// and persistent values.
struct OwnedTensor {
  Buffer buffer;
  Tensor tensor;

  OwnedTensor() = default;
  OwnedTensor(DType dtype, Shape shape);
  template <typename T> T *as() const { return tensor.as<T>(); }
};

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_TENSOR_H
