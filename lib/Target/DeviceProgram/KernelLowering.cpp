//===- KernelLowering.cpp - Graph ops to runtime kernels ------------------===//
//
// Kernels follow ONNX opset 18 (LayerNormalization 17, Gelu 20,
// RMSNormalization 23): the static
// configuration that the graph dialect keeps in attributes (Reshape's shape,
// Slice's starts, Reduce axes, Pad's pads, ...) goes back to constant inputs;
// enum attributes become ONNX strings.
//
//===----------------------------------------------------------------------===//

#include "KernelLowering.h"

#include "strait/Dialect/Graph/GraphOps.h"

#include "mlir/IR/BuiltinDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace strait;
using namespace strait::exporter;
namespace pb = strait::program;

pb::DType strait::exporter::dtypeOf(Type t) {
  if (t.isF32()) return pb::DTYPE_F32;
  if (t.isF16()) return pb::DTYPE_F16;
  if (t.isBF16()) return pb::DTYPE_BF16;
  if (t.isF64()) return pb::DTYPE_F64;
  if (t.isInteger(1)) return pb::DTYPE_BOOL;
  if (auto i = dyn_cast<IntegerType>(t)) {
    bool u = i.isUnsigned();
    switch (i.getWidth()) {
    case 8: return u ? pb::DTYPE_U8 : pb::DTYPE_I8;
    case 16: return u ? pb::DTYPE_U16 : pb::DTYPE_I16;
    case 32: return u ? pb::DTYPE_U32 : pb::DTYPE_I32;
    case 64: return u ? pb::DTYPE_U64 : pb::DTYPE_I64;
    }
  }
  return pb::DTYPE_UNSPECIFIED;
}

LogicalResult strait::exporter::fillTensorData(ElementsAttr attr, pb::TensorData &data) {
  auto type = cast<ShapedType>(attr.getType());
  data.set_dtype(dtypeOf(type.getElementType()));
  for (int64_t d : type.getShape())
    data.add_shape(d);
  std::string *raw = data.mutable_raw();
  Type elt = type.getElementType();
  int64_t n = type.getNumElements();
  if (auto res = dyn_cast<DenseResourceElementsAttr>(attr)) {
    AsmResourceBlob *blob = res.getRawHandle().getBlob();
    if (!blob)
      return failure();
    raw->assign(blob->getData().data(), blob->getData().size());
    return success();
  }
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense)
    return failure();
  if (elt.isInteger(1)) {
    for (bool b : dense.getValues<bool>())
      raw->push_back(b ? 1 : 0);
    return success();
  }
  ArrayRef<char> bytes = dense.getRawData();
  if (!dense.isSplat()) {
    raw->assign(bytes.data(), bytes.size());
    return success();
  }
  raw->reserve(bytes.size() * n);
  for (int64_t i = 0; i < n; ++i)
    raw->append(bytes.data(), bytes.size());
  return success();
}

uint32_t ValueTable::get(Value v, pb::ValueRole role, StringRef name) {
  auto it = ids.find(v);
  if (it != ids.end())
    return it->second;
  uint32_t id = program.values_size();
  pb::Value *pv = program.add_values();
  pv->set_id(id);
  pv->set_name(name.str());
  auto type = cast<ShapedType>(v.getType());
  pv->set_dtype(dtypeOf(type.getElementType()));
  for (int64_t d : type.getShape())
    pv->add_shape(d);
  pv->set_role(role);
  ids[v] = id;
  return id;
}

std::optional<uint32_t> ValueTable::lookup(Value v) const {
  auto it = ids.find(v);
  if (it == ids.end())
    return std::nullopt;
  return it->second;
}

uint32_t ValueTable::constant(ElementsAttr attr, StringRef name) {
  uint32_t id = program.values_size();
  pb::Value *pv = program.add_values();
  pv->set_id(id);
  pv->set_name(name.str());
  auto type = cast<ShapedType>(attr.getType());
  pv->set_dtype(dtypeOf(type.getElementType()));
  for (int64_t d : type.getShape())
    pv->add_shape(d);
  pv->set_role(pb::ROLE_CONSTANT);
  (void)fillTensorData(attr, *pv->mutable_constant());
  return id;
}

uint32_t ValueTable::constInts(ArrayRef<int64_t> v, bool scalar) {
  uint32_t id = program.values_size();
  pb::Value *pv = program.add_values();
  pv->set_id(id);
  pv->set_dtype(pb::DTYPE_I64);
  if (!scalar)
    pv->add_shape(v.size());
  pv->set_role(pb::ROLE_CONSTANT);
  pb::TensorData *d = pv->mutable_constant();
  d->set_dtype(pb::DTYPE_I64);
  if (!scalar)
    d->add_shape(v.size());
  d->mutable_raw()->assign(reinterpret_cast<const char *>(v.data()), v.size() * 8);
  return id;
}

uint32_t ValueTable::constScalar(Type elt, double v) {
  uint32_t id = program.values_size();
  pb::Value *pv = program.add_values();
  pv->set_id(id);
  pb::DType dt = dtypeOf(elt);
  pv->set_dtype(dt);
  pv->set_role(pb::ROLE_CONSTANT);
  pb::TensorData *d = pv->mutable_constant();
  d->set_dtype(dt);
  std::string *raw = d->mutable_raw();
  auto put = [&](auto x) { raw->assign(reinterpret_cast<const char *>(&x), sizeof(x)); };
  if (elt.isF64())
    put(v);
  else if (elt.isF32())
    put(static_cast<float>(v));
  else if (elt.isInteger(64))
    put(static_cast<int64_t>(v));
  else if (elt.isInteger(32))
    put(static_cast<int32_t>(v));
  else if (elt.isInteger(8) || elt.isInteger(1))
    put(static_cast<int8_t>(v));
  else if (elt.isInteger(16))
    put(static_cast<int16_t>(v));
  else
    put(static_cast<float>(v)); // f16/bf16 scalars are not produced by the importer
  return id;
}

namespace {

/// Sets `kernel.attrs[name]` from a builtin or graph attribute.
LogicalResult setAttr(pb::Kernel &k, StringRef name, Attribute a) {
  pb::Attribute &out = (*k.mutable_attrs())[name.str()];
  if (auto i = dyn_cast<IntegerAttr>(a)) {
    out.set_i(i.getType().isUnsignedInteger() ? (int64_t)i.getValue().getZExtValue()
                                              : i.getValue().getSExtValue());
  } else if (auto f = dyn_cast<FloatAttr>(a)) {
    out.set_f(static_cast<float>(f.getValueAsDouble()));
  } else if (auto ints = dyn_cast<DenseI64ArrayAttr>(a)) {
    for (int64_t v : ints.asArrayRef())
      out.mutable_ints()->add_v(v);
  } else if (auto fl = dyn_cast<DenseF32ArrayAttr>(a)) {
    for (float v : fl.asArrayRef())
      out.mutable_floats()->add_v(v);
  } else if (auto s = dyn_cast<StringAttr>(a)) {
    out.set_s(s.str());
  } else if (auto t = dyn_cast<TypeAttr>(a)) {
    out.set_i(static_cast<int64_t>(dtypeOf(t.getValue())));
  } else if (auto e = dyn_cast<ElementsAttr>(a)) {
    if (failed(fillTensorData(e, *out.mutable_t())))
      return failure();
  } else {
    std::string str = llvm::TypeSwitch<Attribute, std::string>(a)
        .Case([](graph::PadModeAttr x) { return graph::stringifyPadMode(x.getValue()).str(); })
        .Case([](graph::GeluApproxAttr x) { return graph::stringifyGeluApprox(x.getValue()).str(); })
        .Case([](graph::ResizeModeAttr x) { return graph::stringifyResizeMode(x.getValue()).str(); })
        .Case([](graph::CoordModeAttr x) { return graph::stringifyCoordMode(x.getValue()).str(); })
        .Case([](graph::NearestModeAttr x) { return graph::stringifyNearestMode(x.getValue()).str(); })
        .Case([](graph::ScatterReductionAttr x) { return graph::stringifyScatterReduction(x.getValue()).str(); })
        .Case([](graph::DepthToSpaceModeAttr x) { return graph::stringifyDepthToSpaceMode(x.getValue()).str(); })
        .Case([](graph::LossReductionAttr x) { return graph::stringifyLossReduction(x.getValue()).str(); })
        .Default([](Attribute) { return std::string(); });
    if (str.empty()) {
      k.mutable_attrs()->erase(name.str());
      return failure();
    }
    out.set_s(str);
  }
  return success();
}

/// Static configuration that ONNX opset 18 passes as an int64 input: the
/// attribute name and its input position.
struct IntsInput {
  StringRef attr;
  unsigned index;
  bool scalar = false;
};

/// The attributes of `op` that become constant inputs, in input order.
SmallVector<IntsInput> intsInputsOf(Operation *op) {
  return llvm::TypeSwitch<Operation *, SmallVector<IntsInput>>(op)
      .Case<graph::ReshapeOp>([](auto) { return SmallVector<IntsInput>{{"shape", 1}}; })
      .Case<graph::SqueezeOp, graph::UnsqueezeOp, graph::ReduceSumOp, graph::ReduceMeanOp,
            graph::ReduceMaxOp, graph::ReduceMinOp, graph::ReduceProdOp, graph::ReduceL1Op,
            graph::ReduceL2Op, graph::ReduceLogSumOp, graph::ReduceLogSumExpOp,
            graph::ReduceSumSquareOp>(
          [](auto) { return SmallVector<IntsInput>{{"axes", 1}}; })
      .Case<graph::SplitOp>([](auto) { return SmallVector<IntsInput>{{"split", 1}}; })
      .Case<graph::SliceOp>([](auto) {
        return SmallVector<IntsInput>{{"starts", 1}, {"ends", 2}, {"axes", 3}, {"steps", 4}};
      })
      .Case<graph::ExpandOp>([](auto) { return SmallVector<IntsInput>{{"shape", 1}}; })
      .Case<graph::TileOp>([](auto) { return SmallVector<IntsInput>{{"repeats", 1}}; })
      .Case<graph::PadOp>([](auto) { return SmallVector<IntsInput>{{"pads", 1}}; })
      .Case<graph::TopKOp>([](auto) { return SmallVector<IntsInput>{{"k", 1}}; })
      .Case<graph::TriluOp>([](auto) { return SmallVector<IntsInput>{{"k", 1, true}}; })
      .Case<graph::CumSumOp>([](auto) { return SmallVector<IntsInput>{{"axis", 1, true}}; })
      .Case<graph::OneHotOp>([](auto) { return SmallVector<IntsInput>{{"depth", 1, true}}; })
      .Default([](Operation *) { return SmallVector<IntsInput>{}; });
}

/// Reads an int or int-array attribute as a list.
SmallVector<int64_t> intsOf(Attribute a) {
  if (auto arr = dyn_cast_or_null<DenseI64ArrayAttr>(a))
    return SmallVector<int64_t>(arr.asArrayRef());
  if (auto i = dyn_cast_or_null<IntegerAttr>(a))
    return {i.getValue().getSExtValue()};
  return {};
}

} // namespace

LogicalResult strait::exporter::lowerToKernel(Operation *op, ValueTable &values,
                                              pb::Kernel &k) {
  k.set_op(op->getName().stripDialect().str());
  k.set_opset(18);
  if (isa<graph::LayerNormalizationOp>(op))
    k.set_opset(17);
  else if (isa<graph::GeluOp>(op))
    k.set_opset(20);
  else if (isa<graph::RMSNormalizationOp>(op))
    k.set_opset(23);
  if (auto nameLoc = dyn_cast<NameLoc>(op->getLoc()))
    k.set_name(nameLoc.getName().str());

  // Operands in ONNX order, with config attributes turned into inputs.
  SmallVector<uint32_t> inputs;
  for (Value v : op->getOperands()) {
    std::optional<uint32_t> id = values.lookup(v);
    if (!id)
      return op->emitError("operand is not defined before this op in the exported function");
    inputs.push_back(*id);
  }
  SmallVector<IntsInput> moved = intsInputsOf(op);
  llvm::StringSet<> skip;
  for (const IntsInput &m : moved) {
    Attribute a = op->getAttr(m.attr);
    if (!a)
      continue;
    skip.insert(m.attr);
    if (isa<graph::SqueezeOp>(op) && intsOf(a).empty())
      continue; // no axes input: squeeze every unit dimension
    uint32_t id = values.constInts(intsOf(a), m.scalar);
    if (inputs.size() < m.index)
      inputs.resize(m.index, kAbsentValue);
    inputs.insert(inputs.begin() + m.index, id);
  }
  if (auto pad = dyn_cast<graph::PadOp>(op)) {
    skip.insert("value");
    inputs.push_back(values.constScalar(pad.getType().getElementType(),
                                        pad.getValue().convertToDouble()));
  } else if (auto clip = dyn_cast<graph::ClipOp>(op)) {
    Type elt = clip.getType().getElementType();
    skip.insert("min");
    skip.insert("max");
    inputs.push_back(clip.getMin() ? values.constScalar(elt, clip.getMin()->convertToDouble()) : kAbsentValue);
    inputs.push_back(clip.getMax() ? values.constScalar(elt, clip.getMax()->convertToDouble()) : kAbsentValue);
  } else if (auto resize = dyn_cast<graph::ResizeOp>(op)) {
    skip.insert("sizes");
    skip.insert("scales");
    inputs.push_back(kAbsentValue); // roi
    inputs.push_back(kAbsentValue); // scales
    inputs.push_back(values.constInts(resize.getSizes()));
  } else if (isa<graph::DropoutOp>(op)) {
    // With a graph.dropout_key (graph-build-training-step) it drops: the
    // DropoutTraining kernel, keyed; exportJob adds the seed, the replica
    // and the step input. Without one: the inference form, the identity.
    if (auto key = op->getAttrOfType<IntegerAttr>("graph.dropout_key")) {
      k.set_op("DropoutTraining");
      (*k.mutable_attrs())["key"].set_i(key.getInt());
    } else {
      skip.insert("ratio");
    }
  }
  for (uint32_t id : inputs)
    k.add_inputs(id);
  for (Value r : op->getResults())
    k.add_outputs(values.get(r, pb::ROLE_ACTIVATION));

  for (NamedAttribute attr : op->getAttrs()) {
    StringRef name = attr.getName().getValue();
    // Dialect attributes (graph.op_id, dist.stage) are not ONNX attributes;
    // symbol references (AccumulateGrad's variable) are carried by value ids.
    if (skip.contains(name) || name.contains('.') || isa<SymbolRefAttr>(attr.getValue()))
      continue;
    if (failed(setAttr(k, name, attr.getValue())))
      return op->emitError("attribute '") << name << "' cannot be exported";
  }
  return success();
}
