//===- Attributes.h - Typed access to kernel attributes ---------*- C++ -*-===//
//
// Kernels read their ONNX attributes through AttrReader: one typed getter per
// attribute kind with a default, and an error (not a silent default) when the
// attribute is present with the wrong kind.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_ATTRIBUTES_H
#define STRAIT_RUNTIME_ATTRIBUTES_H

#include "strait/runtime/Status.h"
#include "strait_program.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace strait {
namespace rt {

class AttrReader {
public:
  using AttrMap = google::protobuf::Map<std::string, program::Attribute>;
  explicit AttrReader(const AttrMap &attrs) : attrs(attrs) {}

  bool has(const std::string &name) const { return attrs.count(name) != 0; }

  StatusOr<int64_t> getInt(const std::string &name, int64_t dflt) const;
  StatusOr<float> getFloat(const std::string &name, float dflt) const;
  StatusOr<std::string> getString(const std::string &name,
                                  const std::string &dflt) const;
  StatusOr<std::vector<int64_t>>
  getInts(const std::string &name, const std::vector<int64_t> &dflt) const;
  StatusOr<std::vector<float>>
  getFloats(const std::string &name, const std::vector<float> &dflt) const;
  StatusOr<std::vector<std::string>>
  getStrings(const std::string &name,
             const std::vector<std::string> &dflt) const;
  /// Returns nullptr when absent.
  StatusOr<const program::TensorData *>
  getTensor(const std::string &name) const;

private:
  const AttrMap &attrs;
};

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_ATTRIBUTES_H
