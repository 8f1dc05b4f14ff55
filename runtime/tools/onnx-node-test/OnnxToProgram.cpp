//===- OnnxToProgram.cpp - One-node ONNX models as device programs --------===//
//
// See OnnxToProgram.h.
//
//===----------------------------------------------------------------------===//
#include "OnnxToProgram.h"

#include <cstring>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>
#include <fcntl.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <map>
#include <unistd.h>

namespace strait {
namespace rt {
namespace onnxtest {

Status readProto(const std::string &path, google::protobuf::Message &message) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return ioError("cannot open '" + path + "'");
  google::protobuf::io::FileInputStream stream(fd);
  bool ok = message.ParseFromZeroCopyStream(&stream);
  ::close(fd);
  if (!ok)
    return invalidArgument("cannot parse '" + path + "'");
  return Status::ok();
}

namespace {
template <typename Src, typename Dst>
void packInto(const Src &src, std::string &raw) {
  raw.resize(src.size() * sizeof(Dst));
  Dst *d = reinterpret_cast<Dst *>(&raw[0]);
  for (int i = 0; i < src.size(); ++i)
    d[i] = static_cast<Dst>(src.Get(i));
}
} // namespace

StatusOr<program::TensorData> convertTensor(const onnx::TensorProto &t) {
  program::TensorData out;
  int type = t.data_type();
  if (!program::DType_IsValid(type) || dtypeSize(static_cast<DType>(type)) == 0)
    return unimplemented("tensor element type " + std::to_string(type));
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return unimplemented("external tensor data");
  DType dtype = static_cast<DType>(type);
  out.set_dtype(dtype);
  for (int64_t d : t.dims())
    out.add_shape(d);
  std::string raw;
  if (t.has_raw_data()) {
    raw = t.raw_data();
  } else {
    switch (dtype) {
    case program::DTYPE_F32: packInto<decltype(t.float_data()), float>(t.float_data(), raw); break;
    case program::DTYPE_F64: packInto<decltype(t.double_data()), double>(t.double_data(), raw); break;
    case program::DTYPE_I64: packInto<decltype(t.int64_data()), int64_t>(t.int64_data(), raw); break;
    case program::DTYPE_I32: packInto<decltype(t.int32_data()), int32_t>(t.int32_data(), raw); break;
    case program::DTYPE_I16: packInto<decltype(t.int32_data()), int16_t>(t.int32_data(), raw); break;
    case program::DTYPE_U16:
    case program::DTYPE_F16:
    case program::DTYPE_BF16: packInto<decltype(t.int32_data()), uint16_t>(t.int32_data(), raw); break;
    case program::DTYPE_I8: packInto<decltype(t.int32_data()), int8_t>(t.int32_data(), raw); break;
    case program::DTYPE_U8:
    case program::DTYPE_BOOL: packInto<decltype(t.int32_data()), uint8_t>(t.int32_data(), raw); break;
    case program::DTYPE_U32: packInto<decltype(t.uint64_data()), uint32_t>(t.uint64_data(), raw); break;
    case program::DTYPE_U64: packInto<decltype(t.uint64_data()), uint64_t>(t.uint64_data(), raw); break;
    default: return unimplemented("tensor payload for " + dtypeName(dtype));
    }
  }
  Shape shape(t.dims().begin(), t.dims().end());
  if (raw.size() != numElements(shape) * dtypeSize(dtype))
    return invalidArgument("tensor '" + t.name() + "' holds " +
                           std::to_string(raw.size()) + " bytes for " +
                           dtypeName(dtype) + shapeToString(shape));
  out.set_raw(raw);
  return out;
}

StatusOr<program::Attribute> convertAttribute(const onnx::AttributeProto &a) {
  program::Attribute out;
  switch (a.type()) {
  case onnx::AttributeProto::INT: out.set_i(a.i()); break;
  case onnx::AttributeProto::FLOAT: out.set_f(a.f()); break;
  case onnx::AttributeProto::STRING: out.set_s(a.s()); break;
  case onnx::AttributeProto::INTS:
    for (int64_t v : a.ints())
      out.mutable_ints()->add_v(v);
    break;
  case onnx::AttributeProto::FLOATS:
    for (float v : a.floats())
      out.mutable_floats()->add_v(v);
    break;
  case onnx::AttributeProto::STRINGS:
    for (const auto &v : a.strings())
      out.mutable_strings()->add_v(v);
    break;
  case onnx::AttributeProto::TENSOR: {
    STRAIT_ASSIGN_OR_RETURN(*out.mutable_t(), convertTensor(a.t()));
    break;
  }
  default:
    return unimplemented("attribute '" + a.name() + "' of ONNX type " +
                         std::to_string(a.type()));
  }
  return out;
}

namespace {
program::Value *addValue(program::Program &p, uint32_t id, const std::string &name,
                         const onnx::TensorProto &t, program::ValueRole role) {
  program::Value *v = p.add_values();
  v->set_id(id);
  v->set_name(name);
  v->set_dtype(static_cast<DType>(t.data_type()));
  for (int64_t d : t.dims())
    v->add_shape(d);
  v->set_role(role);
  return v;
}
} // namespace

namespace {

/// Static shapes of every intermediate value, from ONNX shape inference
/// (with data propagation) seeded with the concrete input shapes.
StatusOr<std::map<std::string, onnx::TypeProto_Tensor>>
inferIntermediateTypes(const onnx::ModelProto &model,
                       const std::vector<onnx::TensorProto> &inputs) {
  onnx::ModelProto copy = model;
  onnx::GraphProto *g = copy.mutable_graph();
  for (int i = 0; i < g->input_size(); ++i) {
    auto *shape = g->mutable_input(i)->mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    for (int64_t d : inputs[i].dims())
      shape->add_dim()->set_dim_value(d);
  }
  try {
    onnx::ShapeInferenceOptions options(false, 0, true);
    onnx::shape_inference::InferShapes(copy, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception &e) {
    return unimplemented(std::string("ONNX shape inference failed: ") + e.what());
  }
  std::map<std::string, onnx::TypeProto_Tensor> types;
  for (const auto &vi : copy.graph().value_info())
    if (vi.type().has_tensor_type())
      types[vi.name()] = vi.type().tensor_type();
  return types;
}

Status addIntermediate(program::Program &p, uint32_t id, const std::string &name,
                       const std::map<std::string, onnx::TypeProto_Tensor> &types) {
  auto it = types.find(name);
  if (it == types.end() || !it->second.has_shape())
    return unimplemented("no static shape inferred for intermediate '" + name + "'");
  program::Value *v = p.add_values();
  v->set_id(id);
  v->set_name(name);
  v->set_dtype(static_cast<DType>(it->second.elem_type()));
  if (dtypeSize(v->dtype()) == 0)
    return unimplemented("intermediate '" + name + "' has element type " +
                         std::to_string(it->second.elem_type()));
  for (const auto &d : it->second.shape().dim()) {
    if (!d.has_dim_value())
      return unimplemented("intermediate '" + name + "' has a dynamic shape");
    v->add_shape(d.dim_value());
  }
  v->set_role(program::ROLE_ACTIVATION);
  return Status::ok();
}

Status addKernel(program::Program &p, const onnx::ModelProto &model,
                 const onnx::NodeProto &node, uint32_t kernelId,
                 const std::map<std::string, uint32_t> &ids) {
  program::Kernel *k = p.add_kernels();
  k->set_id(kernelId);
  k->set_op(node.op_type());
  k->set_domain(node.domain());
  k->set_name(node.name().empty() ? node.op_type() + "_" + std::to_string(kernelId)
                                  : node.name());
  for (const auto &op : model.opset_import())
    if (op.domain() == node.domain() || (op.domain() == "ai.onnx" && node.domain().empty()))
      k->set_opset(op.version());
  for (const std::string &in : node.input()) {
    auto it = ids.find(in);
    if (!in.empty() && it == ids.end())
      return invalidArgument("node input '" + in + "' is not defined before use");
    k->add_inputs(in.empty() ? 0xFFFFFFFFu : it->second);
  }
  for (const std::string &out : node.output())
    k->add_outputs(out.empty() ? 0xFFFFFFFFu : ids.at(out));
  for (const auto &a : node.attribute()) {
    STRAIT_ASSIGN_OR_RETURN(program::Attribute attr, convertAttribute(a));
    (*k->mutable_attrs())[a.name()] = attr;
  }
  return Status::ok();
}

} // namespace

StatusOr<program::Program>
buildNodeProgram(const onnx::ModelProto &model,
                 const std::vector<onnx::TensorProto> &inputs,
                 const std::vector<onnx::TensorProto> &outputs,
                 program::ParameterShardFile *shards) {
  const onnx::GraphProto &g = model.graph();
  if (static_cast<int>(inputs.size()) != g.input_size() ||
      static_cast<int>(outputs.size()) != g.output_size())
    return invalidArgument("test data does not match graph inputs/outputs");
  for (const auto *list : {&g.input(), &g.output()})
    for (const auto &vi : *list)
      if (vi.type().value_case() != onnx::TypeProto::kTensorType)
        return unimplemented("value '" + vi.name() +
                             "' is not a tensor (sequence/optional/map)");
  program::Program p;
  p.set_format_version(program::FORMAT_VERSION_1);
  p.set_rank(0);
  p.set_world_size(1);
  p.set_device("cpu");
  p.set_producer("strait-onnx-node-test");
  std::map<std::string, uint32_t> ids;
  uint32_t next = 0;
  for (int i = 0; i < g.input_size(); ++i) {
    if (dtypeSize(static_cast<DType>(inputs[i].data_type())) == 0)
      return unimplemented("input element type " + std::to_string(inputs[i].data_type()));
    addValue(p, next, g.input(i).name(), inputs[i], program::ROLE_INPUT);
    ids[g.input(i).name()] = next++;
  }
  for (int i = 0; i < g.output_size(); ++i) {
    if (dtypeSize(static_cast<DType>(outputs[i].data_type())) == 0)
      return unimplemented("output element type " + std::to_string(outputs[i].data_type()));
    addValue(p, next, g.output(i).name(), outputs[i], program::ROLE_OUTPUT);
    ids[g.output(i).name()] = next++;
  }
  // Initializers become parameters, initialized from the shard file.
  if (g.initializer_size() > 0 && !shards)
    return unimplemented("graph initializers without a shard file");
  if (shards)
    shards->set_format_version(program::FORMAT_VERSION_1);
  for (const onnx::TensorProto &init : g.initializer()) {
    if (ids.count(init.name()))
      continue; // also a graph input: the test data provides it
    STRAIT_ASSIGN_OR_RETURN(program::TensorData data, convertTensor(init));
    program::Value *v = addValue(p, next, init.name(), init, program::ROLE_PARAMETER);
    v->set_parameter_name(init.name());
    program::ParameterEntry *e = shards->add_parameters();
    e->set_name(init.name());
    *e->mutable_data() = std::move(data);
    ids[init.name()] = next++;
  }
  std::map<std::string, onnx::TypeProto_Tensor> types;
  if (g.node_size() > 1) {
    STRAIT_ASSIGN_OR_RETURN(types, inferIntermediateTypes(model, inputs));
  }
  program::Step *step = p.add_steps();
  step->set_label("graph");
  for (int n = 0; n < g.node_size(); ++n) {
    const onnx::NodeProto &node = g.node(n);
    for (const std::string &out : node.output()) {
      if (out.empty() || ids.count(out))
        continue;
      if (g.node_size() == 1)
        return unimplemented("node output '" + out + "' is not a graph output");
      STRAIT_RETURN_IF_ERROR(addIntermediate(p, next, out, types));
      ids[out] = next++;
    }
    STRAIT_RETURN_IF_ERROR(addKernel(p, model, node, n, ids));
    step->mutable_run()->add_kernel_ids(n);
  }
  return p;
}

} // namespace onnxtest
} // namespace rt
} // namespace strait
