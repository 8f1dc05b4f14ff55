//===- Program.cpp - Loading and validating device programs ---------------===//
//
// Implements the constraints of docs/program-format.md ("P1".."P13"). Each
// error message starts with the path of the offending field.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Program.h"
#include "strait/runtime/Codec.h"

#include "ProgramBytes.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

namespace strait {
namespace rt {

bool isSupportedFormatVersion(int version) {
  return version == program::FORMAT_VERSION_1;
}

namespace {

constexpr uint64_t kMaxValueElements = 1ull << 48;
/// All values together (and the arena) at most 2^56 bytes (64 PiB, more
/// than any device holds): the memory plan's sums never overflow.
constexpr uint64_t kMaxProgramBytes = 1ull << 56;

std::string at(const char *field, int index) {
  return std::string(field) + "[" + std::to_string(index) + "]";
}

Status checkVersion(int version, const std::string &what) {
  if (isSupportedFormatVersion(version))
    return Status::ok();
  return invalidArgument(
      what + ".format_version: unsupported program format version " +
      std::to_string(version) + " (this runtime reads version 1)");
}

Status checkValue(const program::Value &v, const std::string &path) {
  if (dtypeSize(v.dtype()) == 0)
    return invalidArgument(path + ".dtype: unspecified or unknown dtype " +
                           std::to_string(v.dtype()));
  uint64_t elements = 1;
  for (int d = 0; d < v.shape_size(); ++d) {
    if (v.shape(d) < 0)
      return invalidArgument(path + ".shape[" + std::to_string(d) +
                             "]: negative dimension " +
                             std::to_string(v.shape(d)));
    // At most 2^48 elements (as the ONNX importer): byte sizes and the
    // memory plan's sums then never overflow.
    if (v.shape(d) > 0 && elements > kMaxValueElements / static_cast<uint64_t>(v.shape(d)))
      return invalidArgument(path + ".shape: " +
                             shapeToString(Shape(v.shape().begin(), v.shape().end())) +
                             " has more than 2^48 elements");
    elements *= static_cast<uint64_t>(v.shape(d));
  }
  if (v.role() == program::ROLE_UNSPECIFIED)
    return invalidArgument(path + ".role: unspecified");
  if (v.role() == program::ROLE_PARAMETER && v.parameter_name().empty())
    return invalidArgument(path + ".parameter_name: empty for a parameter");
  if (v.role() == program::ROLE_CONSTANT) {
    if (v.constant().dtype() != v.dtype())
      return invalidArgument(path + ".constant.dtype: " +
                             dtypeName(v.constant().dtype()) +
                             " does not match the value's " +
                             dtypeName(v.dtype()));
    Shape cs(v.constant().shape().begin(), v.constant().shape().end());
    Shape vs(v.shape().begin(), v.shape().end());
    if (cs != vs)
      return invalidArgument(path + ".constant.shape: " + shapeToString(cs) +
                             " does not match the value's " +
                             shapeToString(vs));
  }
  return Status::ok();
}

Status checkKernels(const program::Program &p,
                    const std::set<uint32_t> &valueIds,
                    std::set<uint32_t> &kernelIds) {
  for (int k = 0; k < p.kernels_size(); ++k) {
    const program::Kernel &kernel = p.kernels(k);
    std::string path = at("kernels", k);
    if (!kernelIds.insert(kernel.id()).second)
      return invalidArgument(path + ".id: duplicate kernel id " +
                             std::to_string(kernel.id()));
    if (kernel.op().empty())
      return invalidArgument(path + ".op: empty op type");
    for (int i = 0; i < kernel.inputs_size(); ++i) {
      uint32_t id = kernel.inputs(i);
      if (id != kAbsentValue && !valueIds.count(id))
        return invalidArgument(path + ".inputs[" + std::to_string(i) +
                               "]: unknown value id " + std::to_string(id));
    }
    for (int i = 0; i < kernel.outputs_size(); ++i)
      if (kernel.outputs(i) != kAbsentValue && !valueIds.count(kernel.outputs(i)))
        return invalidArgument(path + ".outputs[" + std::to_string(i) +
                               "]: unknown value id " +
                               std::to_string(kernel.outputs(i)));
    for (const auto &attr : kernel.attrs())
      if (attr.second.value_case() == program::Attribute::VALUE_NOT_SET)
        return invalidArgument(path + ".attrs['" + attr.first +
                               "']: no value set");
  }
  return Status::ok();
}

Status checkPeer(int peer, const program::Program &p,
                 const std::string &path) {
  if (peer < 0 || peer >= p.world_size() || peer == p.rank())
    return invalidArgument(path + ".peer: " + std::to_string(peer) +
                           " is not another rank of a world of " +
                           std::to_string(p.world_size()));
  return Status::ok();
}

/// P13: a Send's keep_decoded / repeat_payload (proto comments): a lossy,
/// non-adaptive, non-AQ-SGD codec; a repeat follows a keep_decoded send of
/// the same value and codec.
Status checkDecodedSend(const program::Program &p, int s, const std::string &path) {
  const program::Send &m = p.steps(s).send();
  if (!m.keep_decoded() && !m.repeat_payload())
    return Status::ok();
  const char *field = m.keep_decoded() ? ".send.keep_decoded" : ".send.repeat_payload";
  if (m.keep_decoded() && m.repeat_payload())
    return invalidArgument(path + ".send: keep_decoded and repeat_payload exclude each other");
  program::Codec c = m.codec().codec();
  if (c == program::CODEC_NONE || isAqSgdCodec(c) || m.codec().adapt())
    return invalidArgument(path + field + " needs a fixed lossy codec (not " +
                           (m.codec().adapt() ? std::string("adaptive top-k")
                                              : program::Codec_Name(c)) +
                           ")");
  if (m.keep_decoded())
    return Status::ok();
  for (int e = s - 1; e >= 0; --e) {
    const program::Step &earlier = p.steps(e);
    if (!earlier.has_send() || !earlier.send().keep_decoded() ||
        earlier.send().value_id() != m.value_id())
      continue;
    program::CodecParams a = earlier.send().codec(), b = m.codec();
    a.clear_error_feedback(); // the repeat keeps no residual of its own
    b.clear_error_feedback();
    if (a.SerializeAsString() != b.SerializeAsString())
      return invalidArgument(path + field + ": the codec differs from that of steps[" +
                             std::to_string(e) + "], whose payload it repeats");
    return Status::ok();
  }
  return invalidArgument(path + field + ": no earlier keep_decoded send of value " +
                         std::to_string(m.value_id()) + " whose payload it could repeat");
}

Status checkSteps(const program::Program &p,
                  const std::set<uint32_t> &valueIds,
                  const std::set<uint32_t> &kernelIds) {
  for (int s = 0; s < p.steps_size(); ++s) {
    const program::Step &step = p.steps(s);
    std::string path = at("steps", s);
    auto checkValueId = [&](uint32_t id, const std::string &field) {
      if (!valueIds.count(id))
        return invalidArgument(path + field + ": unknown value id " +
                               std::to_string(id));
      return Status::ok();
    };
    if (step.once() && step.kind_case() != program::Step::kRun)
      return invalidArgument(path + ".once: only run steps may run once");
    switch (step.kind_case()) {
    case program::Step::kRun:
      for (int i = 0; i < step.run().kernel_ids_size(); ++i)
        if (!kernelIds.count(step.run().kernel_ids(i)))
          return invalidArgument(path + ".run.kernel_ids[" +
                                 std::to_string(i) + "]: unknown kernel id " +
                                 std::to_string(step.run().kernel_ids(i)));
      break;
    case program::Step::kSend:
      STRAIT_RETURN_IF_ERROR(checkValueId(step.send().value_id(), ".send.value_id"));
      STRAIT_RETURN_IF_ERROR(checkPeer(step.send().peer(), p, path + ".send"));
      STRAIT_RETURN_IF_ERROR(checkDecodedSend(p, s, path));
      break;
    case program::Step::kRecv:
      STRAIT_RETURN_IF_ERROR(checkValueId(step.recv().value_id(), ".recv.value_id"));
      STRAIT_RETURN_IF_ERROR(checkPeer(step.recv().peer(), p, path + ".recv"));
      break;
    case program::Step::kAllReduce:
      for (int i = 0; i < step.all_reduce().value_ids_size(); ++i)
        STRAIT_RETURN_IF_ERROR(checkValueId(step.all_reduce().value_ids(i),
                                            ".all_reduce.value_ids[" +
                                                std::to_string(i) + "]"));
      for (int i = 0; i < step.all_reduce().ranks_size(); ++i) {
        int r = step.all_reduce().ranks(i);
        if (r < 0 || r >= p.world_size() ||
            (i > 0 && r <= step.all_reduce().ranks(i - 1)))
          return invalidArgument(path + ".all_reduce.ranks[" +
                                 std::to_string(i) + "]: rank " +
                                 std::to_string(r) +
                                 " out of range or not sorted and distinct");
      }
      if (step.all_reduce().ranks_size() > 0 &&
          std::find(step.all_reduce().ranks().begin(), step.all_reduce().ranks().end(),
                    p.rank()) == step.all_reduce().ranks().end())
        return invalidArgument(path + ".all_reduce.ranks: does not contain this "
                                      "program's rank " + std::to_string(p.rank()));
      break;
    case program::Step::KIND_NOT_SET:
      return invalidArgument(path + ": step kind not set");
    }
  }
  return Status::ok();
}

Status checkArena(const program::Program &p) {
  uint32_t align = p.memory_plan().alignment() ? p.memory_plan().alignment() : 64;
  for (int v = 0; v < p.values_size(); ++v) {
    const program::Value &value = p.values(v);
    if (!value.has_arena_offset() || !inArena(value.role()))
      continue;
    uint64_t size = numElements(Shape(value.shape().begin(), value.shape().end())) *
                    dtypeSize(value.dtype());
    std::string path = at("values", v) + ".arena_offset";
    if (value.arena_offset() % align != 0)
      return invalidArgument(path + ": " + std::to_string(value.arena_offset()) +
                             " is not a multiple of the alignment " +
                             std::to_string(align));
    if (value.arena_offset() > p.memory_plan().arena_bytes() ||
        size > p.memory_plan().arena_bytes() - value.arena_offset())
      return invalidArgument(path + ": value of " + std::to_string(size) +
                             " bytes at offset " +
                             std::to_string(value.arena_offset()) +
                             " exceeds memory_plan.arena_bytes " +
                             std::to_string(p.memory_plan().arena_bytes()));
  }
  return Status::ok();
}

} // namespace

Status validateProgram(const program::Program &p) {
  STRAIT_RETURN_IF_ERROR(checkVersion(p.format_version(), "program"));
  if (p.world_size() < 1)
    return invalidArgument("world_size: must be at least 1, got " +
                           std::to_string(p.world_size()));
  if (p.rank() < 0 || p.rank() >= p.world_size())
    return invalidArgument("rank: " + std::to_string(p.rank()) +
                           " outside [0, world_size=" +
                           std::to_string(p.world_size()) + ")");
  if (p.device().empty())
    return invalidArgument("device: empty");
  if (!program::PipelineSchedule_IsValid(p.schedule()))
    return invalidArgument("schedule: unknown pipeline schedule " +
                           std::to_string(p.schedule()));
  std::set<uint32_t> valueIds, kernelIds;
  uint64_t totalBytes = 0;
  for (int v = 0; v < p.values_size(); ++v) {
    if (p.values(v).id() == kAbsentValue)
      return invalidArgument(at("values", v) + ".id: reserved id " +
                             std::to_string(kAbsentValue));
    if (!valueIds.insert(p.values(v).id()).second)
      return invalidArgument(at("values", v) + ".id: duplicate value id " +
                             std::to_string(p.values(v).id()));
    STRAIT_RETURN_IF_ERROR(checkValue(p.values(v), at("values", v)));
    const program::Value &value = p.values(v);
    uint64_t bytes = numElements(Shape(value.shape().begin(), value.shape().end())) *
                     dtypeSize(value.dtype());
    if (bytes > kMaxProgramBytes - totalBytes)
      return invalidArgument(at("values", v) + ": the program's values take more than 2^56 "
                             "bytes together");
    totalBytes += bytes;
  }
  if (p.memory_plan().arena_bytes() > kMaxProgramBytes)
    return invalidArgument("memory_plan.arena_bytes: " +
                           std::to_string(p.memory_plan().arena_bytes()) +
                           " is more than 2^56");
  STRAIT_RETURN_IF_ERROR(checkKernels(p, valueIds, kernelIds));
  STRAIT_RETURN_IF_ERROR(checkSteps(p, valueIds, kernelIds));
  return checkArena(p);
}

Status validateManifest(const program::PlanManifest &m) {
  STRAIT_RETURN_IF_ERROR(checkVersion(m.format_version(), "manifest"));
  if (m.world_size() < 1 || m.ranks_size() != m.world_size())
    return invalidArgument("ranks: " + std::to_string(m.ranks_size()) +
                           " entries for world_size " +
                           std::to_string(m.world_size()));
  std::set<int> seen;
  for (int i = 0; i < m.ranks_size(); ++i) {
    const auto &r = m.ranks(i);
    if (r.rank() < 0 || r.rank() >= m.world_size() || !seen.insert(r.rank()).second)
      return invalidArgument(at("ranks", i) + ".rank: " +
                             std::to_string(r.rank()) +
                             " out of range or duplicate");
    if (r.program_file().empty())
      return invalidArgument(at("ranks", i) + ".program_file: empty");
  }
  return Status::ok();
}

namespace {
StatusOr<std::string> readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return ioError("cannot open '" + path + "': " + std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

template <typename M>
StatusOr<M> parseFile(const std::string &path, const char *what) {
  STRAIT_ASSIGN_OR_RETURN(std::string bytes, readFile(path));
  M message;
  if (!message.ParseFromString(bytes))
    return invalidArgument("'" + path + "' is not a valid " + what +
                           " (protobuf parse failed)");
  return message;
}
} // namespace

StatusOr<program::Program> parseProgram(const std::string &bytes) {
  program::Program p;
  if (!p.ParseFromString(bytes))
    return invalidArgument("not a valid program (protobuf parse failed)");
  STRAIT_RETURN_IF_ERROR(validateProgram(p));
  return p;
}

StatusOr<program::Program> loadProgram(const std::string &path) {
  STRAIT_ASSIGN_OR_RETURN(program::Program p,
                          parseFile<program::Program>(path, "program"));
  Status s = validateProgram(p);
  if (!s.isOk())
    return invalidArgument("'" + path + "': " + s.getMessage())
        .withRank(p.rank())
        .withDevice(p.device());
  return p;
}

StatusOr<program::PlanManifest> loadManifest(const std::string &path) {
  STRAIT_ASSIGN_OR_RETURN(program::PlanManifest m,
                          parseFile<program::PlanManifest>(path, "manifest"));
  Status s = validateManifest(m);
  if (!s.isOk())
    return invalidArgument("'" + path + "': " + s.getMessage());
  return m;
}

StatusOr<program::ParameterShardFile> loadShardFile(const std::string &path) {
  STRAIT_ASSIGN_OR_RETURN(
      program::ParameterShardFile f,
      parseFile<program::ParameterShardFile>(path, "parameter shard file"));
  STRAIT_RETURN_IF_ERROR(checkVersion(f.format_version(), "'" + path + "'"));
  return f;
}

Status writeMessage(const google::protobuf::Message &message,
                    const std::string &path) {
  if (!program::writeDeterministic(message, path)) // as straitc writes them
    return ioError("cannot write '" + path + "'");
  return Status::ok();
}

namespace {
template <typename Src, typename Dst>
void convertInto(const Src &src, void *dst) {
  Dst *d = static_cast<Dst *>(dst);
  for (int i = 0; i < src.size(); ++i)
    d[i] = static_cast<Dst>(src.Get(i));
}
} // namespace

Status copyTensorData(const program::TensorData &data, const Tensor &out,
                      const std::string &what) {
  Shape shape(data.shape().begin(), data.shape().end());
  if (data.dtype() != out.dtype || shape != out.shape)
    return invalidArgument(what + ": data is " + dtypeName(data.dtype()) +
                           shapeToString(shape) + ", expected " +
                           out.typeString());
  int64_t n = out.numel();
  if (!data.raw().empty()) {
    if (data.raw().size() != out.byteSize())
      return invalidArgument(what + ".raw: " + std::to_string(data.raw().size()) +
                             " bytes, expected " + std::to_string(out.byteSize()));
    std::memcpy(out.data, data.raw().data(), out.byteSize());
    return Status::ok();
  }
  auto sizeError = [&](const char *field, int got) {
    return invalidArgument(what + "." + field + ": " + std::to_string(got) +
                           " elements, expected " + std::to_string(n));
  };
  switch (out.dtype) {
  case program::DTYPE_F32:
    if (data.float_data_size() != n)
      return sizeError("float_data", data.float_data_size());
    convertInto<decltype(data.float_data()), float>(data.float_data(), out.data);
    return Status::ok();
  case program::DTYPE_F64:
    if (data.double_data_size() != n)
      return sizeError("double_data", data.double_data_size());
    convertInto<decltype(data.double_data()), double>(data.double_data(), out.data);
    return Status::ok();
  case program::DTYPE_I64:
    if (data.int64_data_size() != n)
      return sizeError("int64_data", data.int64_data_size());
    convertInto<decltype(data.int64_data()), int64_t>(data.int64_data(), out.data);
    return Status::ok();
  case program::DTYPE_I32:
    if (data.int32_data_size() != n)
      return sizeError("int32_data", data.int32_data_size());
    convertInto<decltype(data.int32_data()), int32_t>(data.int32_data(), out.data);
    return Status::ok();
  case program::DTYPE_BOOL:
  case program::DTYPE_U8:
  case program::DTYPE_I8:
    if (data.int32_data_size() != n)
      return sizeError("int32_data", data.int32_data_size());
    convertInto<decltype(data.int32_data()), uint8_t>(data.int32_data(), out.data);
    return Status::ok();
  default:
    return unimplemented(what + ": typed payload for " + dtypeName(out.dtype) +
                         " unsupported; use raw");
  }
}

Status initializeParameter(const program::ParameterEntry &entry,
                           const Tensor &out) {
  std::string what = "parameter '" + entry.name() + "'";
  if (entry.has_data())
    return copyTensorData(entry.data(), out, what + ".data");
  if (out.dtype != program::DTYPE_F32)
    return unimplemented(what + ": init schemes need f32, got " +
                         out.typeString());
  float *p = out.as<float>();
  int64_t n = out.numel();
  std::mt19937_64 rng(entry.seed());
  switch (entry.init()) {
  case program::ParameterEntry::INIT_ZEROS:
    std::fill(p, p + n, 0.0f);
    return Status::ok();
  case program::ParameterEntry::INIT_ONES:
    std::fill(p, p + n, 1.0f);
    return Status::ok();
  case program::ParameterEntry::INIT_NORMAL: {
    std::normal_distribution<float> dist(0.0f, entry.init_scale());
    for (int64_t i = 0; i < n; ++i)
      p[i] = dist(rng);
    return Status::ok();
  }
  case program::ParameterEntry::INIT_UNIFORM: {
    std::uniform_real_distribution<float> dist(-entry.init_scale(),
                                               entry.init_scale());
    for (int64_t i = 0; i < n; ++i)
      p[i] = dist(rng);
    return Status::ok();
  }
  default:
    return invalidArgument(what + ": neither data nor an init scheme");
  }
}

} // namespace rt
} // namespace strait
