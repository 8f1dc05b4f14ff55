//===- Attributes.cpp - Typed access to kernel attributes -----------------===//
//
// AttrReader getters: default when absent, error when of the wrong kind.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Attributes.h"

namespace strait {
namespace rt {

namespace {
Status wrongKind(const std::string &name, const char *want) {
  return invalidArgument("attribute '" + name + "' is not of kind " + want);
}
} // namespace

StatusOr<int64_t> AttrReader::getInt(const std::string &name,
                                     int64_t dflt) const {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return dflt;
  if (it->second.value_case() != program::Attribute::kI)
    return wrongKind(name, "int");
  return it->second.i();
}

StatusOr<float> AttrReader::getFloat(const std::string &name,
                                     float dflt) const {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return dflt;
  if (it->second.value_case() == program::Attribute::kI)
    return static_cast<float>(it->second.i());
  if (it->second.value_case() != program::Attribute::kF)
    return wrongKind(name, "float");
  return it->second.f();
}

StatusOr<std::string> AttrReader::getString(const std::string &name,
                                            const std::string &dflt) const {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return dflt;
  if (it->second.value_case() != program::Attribute::kS)
    return wrongKind(name, "string");
  return it->second.s();
}

StatusOr<std::vector<int64_t>>
AttrReader::getInts(const std::string &name,
                    const std::vector<int64_t> &dflt) const {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return dflt;
  if (it->second.value_case() != program::Attribute::kInts)
    return wrongKind(name, "ints");
  const auto &v = it->second.ints().v();
  return std::vector<int64_t>(v.begin(), v.end());
}

StatusOr<std::vector<float>>
AttrReader::getFloats(const std::string &name,
                      const std::vector<float> &dflt) const {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return dflt;
  if (it->second.value_case() != program::Attribute::kFloats)
    return wrongKind(name, "floats");
  const auto &v = it->second.floats().v();
  return std::vector<float>(v.begin(), v.end());
}

StatusOr<std::vector<std::string>>
AttrReader::getStrings(const std::string &name,
                       const std::vector<std::string> &dflt) const {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return dflt;
  if (it->second.value_case() != program::Attribute::kStrings)
    return wrongKind(name, "strings");
  const auto &v = it->second.strings().v();
  return std::vector<std::string>(v.begin(), v.end());
}

StatusOr<const program::TensorData *>
AttrReader::getTensor(const std::string &name) const {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return static_cast<const program::TensorData *>(nullptr);
  if (it->second.value_case() != program::Attribute::kT)
    return wrongKind(name, "tensor");
  return &it->second.t();
}

} // namespace rt
} // namespace strait
