//===- Backend.cpp - Kernel contexts, tables and the backend registry -----===//
//
// Shared pieces of every backend.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Backend.h"

#include <algorithm>
#include <cstring>

namespace strait {
namespace rt {

int64_t KernelContext::trafficBytes() const {
  int64_t bytes = 0;
  std::vector<const void *> seen;
  for (const Tensor *t : ins) {
    if (!t || std::find(seen.begin(), seen.end(), t->data) != seen.end())
      continue;
    seen.push_back(t->data);
    bytes += static_cast<int64_t>(t->byteSize());
  }
  for (const Tensor *t : outs)
    if (t)
      bytes += static_cast<int64_t>(t->byteSize());
  return bytes;
}

Status KernelContext::error(const std::string &message) const {
  return invalidArgument(message).withKernel(kernel.op() + " '" +
                                             kernel.name() + "'");
}

Status KernelContext::unsupported(const std::string &message) const {
  return unimplemented(message).withKernel(kernel.op() + " '" +
                                           kernel.name() + "'");
}

StatusOr<const Tensor *> KernelContext::requireInput(size_t i,
                                                     DType dtype) const {
  const Tensor *t = input(i);
  if (!t)
    return error("missing input " + std::to_string(i));
  if (dtype != program::DTYPE_UNSPECIFIED && t->dtype != dtype)
    return unsupported("input " + std::to_string(i) + " has type " +
                       t->typeString() + ", expected " + dtypeName(dtype));
  return t;
}

StatusOr<Tensor *> KernelContext::requireOutput(size_t i, const Shape &shape,
                                                DType dtype) const {
  Tensor *t = output(i);
  if (!t)
    return error("missing output " + std::to_string(i));
  if (t->shape != shape || t->dtype != dtype)
    return error("output " + std::to_string(i) + " is declared " +
                 t->typeString() + " but the op computes " + dtypeName(dtype) +
                 shapeToString(shape));
  return t;
}

const KernelFn *KernelTable::lookup(const std::string &op) const {
  auto it = table.find(op);
  return it == table.end() ? nullptr : &it->second;
}

std::vector<std::string> KernelTable::ops() const {
  std::vector<std::string> result;
  for (const auto &entry : table)
    result.push_back(entry.first);
  return result;
}

void BackendRegistry::add(std::unique_ptr<Backend> backend) {
  backends.push_back(std::move(backend));
}

Status Backend::scale(const Tensor &t, float factor) const {
  if (t.dtype != program::DTYPE_F32)
    return unimplemented("scale of " + t.typeString() + " (f32 only)");
  float *d = t.as<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    d[i] *= factor;
  return Status::ok();
}

Status Backend::copy(void *dst, const void *src, size_t bytes) const {
  if (bytes)
    std::memcpy(dst, src, bytes);
  return Status::ok();
}

StatusOr<const Backend *>
BackendRegistry::forDevice(const std::string &device) const {
  std::string kind = device.substr(0, device.find(':'));
  for (const auto &backend : backends)
    if (backend->name() == kind)
      return static_cast<const Backend *>(backend.get());
  return unimplemented("no backend registered for device '" + device + "'");
}

} // namespace rt
} // namespace strait
