//===- ImportControlFlow.cpp - If, Loop, Scan, SequenceMap ----------------===//
//
// The graph dialect has static shapes and no control flow, so these resolve at
// import time through GraphImporter::importGraph:
//  - If imports the taken branch when the condition folds to a constant.
//    Otherwise it imports both and selects each output with Where, which needs
//    the branches to give the same static types (both branches then run).
//  - Loop unrolls when its trip count is constant and the condition folds to a
//    constant in every iteration; Scan and SequenceMap unroll over the scanned
//    axis / the sequence. Each iteration imports the body again, with its
//    inputs bound to that iteration's values, so shape folding sees constants.
//    At most kMaxUnrolledIterations iterations.
//
//===----------------------------------------------------------------------===//

#include "ImportStructured.h"

#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

namespace {

Value scalarConstant(NodeImporter &n, Type elt, int64_t v) {
  auto type = RankedTensorType::get({}, elt);
  if (elt.isInteger(1))
    return n.constant(DenseElementsAttr::get(type, ArrayRef<bool>(v != 0)));
  return n.constant(DenseElementsAttr::get(type, ArrayRef<int64_t>(v)));
}

/// The value of a constant single-element bool tensor.
std::optional<bool> constantBool(Value v) {
  DenseElementsAttr attr;
  if (!v || !matchPattern(v, m_Constant(&attr)) || attr.getNumElements() != 1)
    return std::nullopt;
  if (attr.getElementType().isInteger(1))
    return *attr.getValues<bool>().begin();
  if (isa<IntegerType>(attr.getElementType()))
    return !(*attr.getValues<APInt>().begin()).isZero();
  return std::nullopt;
}

/// Where(cond, a, b) for two branch results of the same static type, element
/// by element for sequences and optionals.
FailureOr<ImportedValue> selectBranches(NodeImporter &n, Value cond, const ImportedValue &a,
                                        const ImportedValue &b, size_t i) {
  if (a.kind != b.kind)
    return n.error() << "output " << i << ": the branches give a " << a.kindName()
                     << " and a " << b.kindName();
  switch (a.kind) {
  case ImportedValue::Kind::Tensor: {
    auto ta = dyn_cast<RankedTensorType>(a.tensor.getType());
    if (!ta || !ta.hasStaticShape() || a.tensor.getType() != b.tensor.getType())
      return n.error() << "output " << i << ": the branches give " << a.tensor.getType()
                       << " and " << b.tensor.getType()
                       << "; with a condition that is not constant both branches must give "
                          "the same static type";
    FailureOr<Values> r = n.create<graph::WhereOp>({cond, a.tensor, b.tensor});
    if (failed(r))
      return failure();
    return ImportedValue::ofTensor((*r)[0]);
  }
  case ImportedValue::Kind::Sequence: {
    if (a.elements.size() != b.elements.size())
      return n.error() << "output " << i << ": the branches give sequences of "
                       << a.elements.size() << " and " << b.elements.size()
                       << " tensors; with a condition that is not constant they must agree";
    SmallVector<Value> out;
    for (auto [x, y] : llvm::zip(a.elements, b.elements)) {
      FailureOr<ImportedValue> e = selectBranches(n, cond, ImportedValue::ofTensor(x),
                                                  ImportedValue::ofTensor(y), i);
      if (failed(e))
        return failure();
      out.push_back(e->tensor);
    }
    return ImportedValue::ofSequence(out);
  }
  case ImportedValue::Kind::Optional: {
    if (!a.contained && !b.contained)
      return a;
    if (!a.contained || !b.contained)
      return n.error() << "output " << i << ": one branch gives an empty optional and the "
                          "other does not, with a condition that is not constant";
    FailureOr<ImportedValue> e = selectBranches(n, cond, *a.contained, *b.contained, i);
    if (failed(e))
      return failure();
    return ImportedValue::ofOptional(&*e);
  }
  }
  return failure();
}

LogicalResult importIf(StructuredNode &s) {
  NodeImporter &n = s.n;
  if (failed(n.checkAttributes({"then_branch", "else_branch"})))
    return failure();
  FailureOr<const onnx::GraphProto *> thenG = s.graphAttr("then_branch");
  FailureOr<const onnx::GraphProto *> elseG = s.graphAttr("else_branch");
  FailureOr<Value> cond = n.requiredInput(0);
  if (failed(thenG) || failed(elseG) || failed(cond))
    return failure();
  auto condType = dyn_cast<RankedTensorType>(cond->getType());
  if (!condType || !condType.getElementType().isInteger(1) || condType.getNumElements() != 1)
    return n.error() << "input 'cond' must be a single bool, got " << cond->getType();
  std::string name = s.name();
  if (std::optional<bool> taken = constantBool(*cond)) {
    FailureOr<ImportedValues> r = s.importGraph(*taken ? **thenG : **elseG, {},
                                                name + (*taken ? "/then/" : "/else/"));
    return failed(r) ? failure() : s.setResults(*r);
  }
  FailureOr<ImportedValues> t = s.importGraph(**thenG, {}, name + "/then/");
  if (failed(t))
    return failure();
  FailureOr<ImportedValues> e = s.importGraph(**elseG, {}, name + "/else/");
  if (failed(e))
    return failure();
  if (t->size() != e->size())
    return n.error() << "the branches give " << t->size() << " and " << e->size() << " outputs";
  FailureOr<Values> scalar = n.create<graph::ReshapeOp>(*cond, {n.named("shape", n.i64s({}))});
  if (failed(scalar))
    return failure();
  ImportedValues out;
  for (size_t i = 0; i < t->size(); ++i) {
    FailureOr<ImportedValue> v = selectBranches(n, (*scalar)[0], (*t)[i], (*e)[i], i);
    if (failed(v))
      return failure();
    out.push_back(*v);
  }
  return s.setResults(out);
}

/// The zero-length stack of a scan output whose body declares a static type.
FailureOr<Value> emptyScanOutput(NodeImporter &n, const onnx::ValueInfoProto &decl) {
  const onnx::TypeProto::Tensor &t = decl.type().tensor_type();
  Type elt = elementType(n.ctx(), t.elem_type());
  SmallVector<int64_t> shape{0};
  for (const auto &d : t.shape().dim())
    if (d.has_dim_value())
      shape.push_back(d.dim_value());
  if (!elt || !t.has_shape() || (int)shape.size() != t.shape().dim_size() + 1)
    return n.error() << "runs no iteration and the body's scan output '" << decl.name()
                     << "' has no static type";
  return n.constant(DenseElementsAttr::get(RankedTensorType::get(shape, elt),
                                           ArrayRef<Attribute>{}));
}

LogicalResult importLoop(StructuredNode &s) {
  NodeImporter &n = s.n;
  if (failed(n.checkAttributes({"body"})))
    return failure();
  FailureOr<const onnx::GraphProto *> body = s.graphAttr("body");
  if (failed(body))
    return failure();
  std::optional<int64_t> tripCount;
  if (n.input(0)) {
    DenseElementsAttr m;
    if (!matchPattern(n.input(0), m_Constant(&m)) || !isa<IntegerType>(m.getElementType()) ||
        m.getNumElements() != 1)
      return n.error() << "input 'M' (" << n.proto().input(0)
                       << ") must be constant (an integer): a loop is unrolled at import";
    tripCount = (*m.getValues<APInt>().begin()).getSExtValue();
  }
  bool hasCond = n.input(1) != nullptr, cond = true;
  if (hasCond) {
    std::optional<bool> c = constantBool(n.input(1));
    if (!c)
      return n.error() << "input 'cond' (" << n.proto().input(1)
                       << ") must be constant (a bool): a loop is unrolled at import";
    cond = *c;
  }
  if (!tripCount && !hasCond)
    return n.error() << "has neither a trip count 'M' nor a condition 'cond' (an endless loop)";
  size_t numCarried = s.numInputs() > 2 ? s.numInputs() - 2 : 0;
  ImportedValues carried;
  for (size_t i = 0; i < numCarried; ++i) {
    const ImportedValue *v = s.input(2 + i);
    if (!v)
      return n.error() << "loop-carried input " << 2 + i << " is missing";
    carried.push_back(*v);
  }
  if ((size_t)(*body)->input_size() != 2 + numCarried ||
      (size_t)(*body)->output_size() < 1 + numCarried)
    return n.error() << "the body has " << (*body)->input_size() << " inputs and "
                     << (*body)->output_size() << " outputs, expected " << 2 + numCarried
                     << " inputs and at least " << 1 + numCarried << " outputs";
  size_t numScans = (*body)->output_size() - 1 - numCarried;
  SmallVector<SmallVector<Value>> scans(numScans);
  std::string prefix = s.name() + "/body@";
  for (int64_t i = 0; (!tripCount || i < *tripCount) && cond; ++i) {
    if (i >= kMaxUnrolledIterations)
      return n.error() << "runs more than " << kMaxUnrolledIterations
                       << " iterations, too many to unroll";
    ImportedValues args{ImportedValue::ofTensor(scalarConstant(n, n.b().getI64Type(), i)),
                        ImportedValue::ofTensor(scalarConstant(n, n.b().getI1Type(), 1))};
    args.append(carried.begin(), carried.end());
    FailureOr<ImportedValues> outs =
        s.importGraph(**body, args, prefix + std::to_string(i) + "/");
    if (failed(outs))
      return failure();
    if (hasCond) {
      std::optional<bool> c = (*outs)[0].isTensor() ? constantBool((*outs)[0].tensor)
                                                    : std::nullopt;
      if (!c)
        return n.error() << "the body's condition output '" << (*body)->output(0).name()
                         << "' is not constant in iteration " << i
                         << ": a data-dependent loop cannot be unrolled";
      cond = *c;
    }
    carried.assign(outs->begin() + 1, outs->begin() + 1 + numCarried);
    for (size_t k = 0; k < numScans; ++k) {
      const ImportedValue &v = (*outs)[1 + numCarried + k];
      if (!v.isTensor())
        return n.error() << "scan output '" << (*body)->output(1 + numCarried + k).name()
                         << "' must be a tensor, got a " << v.kindName();
      scans[k].push_back(v.tensor);
    }
  }
  ImportedValues results = carried;
  for (size_t k = 0; k < numScans; ++k) {
    FailureOr<Value> stacked =
        scans[k].empty() ? emptyScanOutput(n, (*body)->output(1 + numCarried + k))
                         : stackTensors(n, scans[k], 0);
    if (failed(stacked))
      return failure();
    results.push_back(ImportedValue::ofTensor(*stacked));
  }
  return s.setResults(results);
}

/// Scan's directions and axes (axes normalized by unrollScan).
struct ScanLayout {
  SmallVector<int64_t> dirIn, axesIn, dirOut, axesOut;
};

/// Unrolls a Scan body over `scanIn` (equal static lengths along their axes):
/// the final states, then the scan outputs stacked along their axes.
FailureOr<ImportedValues> unrollScan(StructuredNode &s, const onnx::GraphProto &body,
                                     ImportedValues states, ArrayRef<Value> scanIn,
                                     ScanLayout layout, StringRef prefix) {
  NodeImporter &n = s.n;
  size_t numStates = states.size(), numScanOut = layout.dirOut.size();
  int64_t length = -1;
  for (auto [j, x] : llvm::enumerate(scanIn)) {
    auto type = x ? dyn_cast<RankedTensorType>(x.getType()) : RankedTensorType();
    if (!type)
      return n.error() << "scan input " << numStates + j << " must be a ranked tensor";
    FailureOr<int64_t> axis =
        graph::normalizeAxis(n.location(), layout.axesIn[j], type.getRank(), "scan_input_axes");
    if (failed(axis))
      return failure();
    layout.axesIn[j] = *axis;
    int64_t len = type.getDimSize(*axis);
    if (len == ShapedType::kDynamic || (length >= 0 && len != length))
      return n.error() << "scan input " << numStates + j << " (" << type
                       << ") has scan length " << (len == ShapedType::kDynamic ? -1 : len)
                       << "; the scan lengths must be static and equal";
    length = len;
  }
  if (length <= 0 || length > kMaxUnrolledIterations)
    return n.error() << "scan length " << length << " is outside [1, "
                     << kMaxUnrolledIterations << "] (unrolled at import)";
  SmallVector<SmallVector<Value>> scans(numScanOut);
  for (int64_t t = 0; t < length; ++t) {
    ImportedValues args = states;
    for (auto [j, x] : llvm::enumerate(scanIn)) {
      Value idx = scalarConstant(n, n.b().getI64Type(), layout.dirIn[j] ? length - 1 - t : t);
      FailureOr<Values> slice =
          n.create<graph::GatherOp>({x, idx}, {n.named("axis", n.i64(layout.axesIn[j]))});
      if (failed(slice))
        return failure();
      args.push_back(ImportedValue::ofTensor((*slice)[0]));
    }
    FailureOr<ImportedValues> outs = s.importGraph(body, args, (prefix + Twine(t) + "/").str());
    if (failed(outs))
      return failure();
    states.assign(outs->begin(), outs->begin() + numStates);
    for (size_t k = 0; k < numScanOut; ++k) {
      const ImportedValue &v = (*outs)[numStates + k];
      if (!v.isTensor())
        return n.error() << "scan output " << k << " must be a tensor, got a " << v.kindName();
      scans[k].push_back(v.tensor);
    }
  }
  ImportedValues results = states;
  for (size_t k = 0; k < numScanOut; ++k) {
    if (layout.dirOut[k])
      std::reverse(scans[k].begin(), scans[k].end());
    auto type = cast<RankedTensorType>(scans[k][0].getType());
    FailureOr<int64_t> axis = graph::normalizeAxis(n.location(), layout.axesOut[k],
                                                   type.getRank() + 1, "scan_output_axes");
    FailureOr<Value> stacked =
        failed(axis) ? FailureOr<Value>(failure()) : stackTensors(n, scans[k], *axis);
    if (failed(stacked))
      return failure();
    results.push_back(ImportedValue::ofTensor(*stacked));
  }
  return results;
}

/// Scan's body and its input split: `first` inputs before the states (opset
/// 8's sequence_lens), then states, then num_scan_inputs scan inputs.
struct ScanSignature {
  const onnx::GraphProto *body;
  size_t numStates, numScanIn, numScanOut;
};

FailureOr<ScanSignature> scanSignature(StructuredNode &s, size_t first) {
  NodeImporter &n = s.n;
  FailureOr<const onnx::GraphProto *> body = s.graphAttr("body");
  FailureOr<std::optional<int64_t>> numScanAttr = n.getOptionalInt("num_scan_inputs");
  if (failed(body) || failed(numScanAttr))
    return failure();
  size_t numIn = s.numInputs() > first ? s.numInputs() - first : 0;
  if (!*numScanAttr || **numScanAttr < 1 || (size_t)**numScanAttr > numIn)
    return n.error() << "attribute 'num_scan_inputs' must be in [1, " << numIn << "]";
  size_t numScanIn = **numScanAttr, numStates = numIn - numScanIn;
  if ((size_t)(*body)->input_size() != numIn || (size_t)(*body)->output_size() < numStates)
    return n.error() << "the body has " << (*body)->input_size() << " inputs and "
                     << (*body)->output_size() << " outputs, expected " << numIn
                     << " inputs and at least " << numStates << " outputs";
  return ScanSignature{*body, numStates, numScanIn, (*body)->output_size() - numStates};
}

LogicalResult importScan(StructuredNode &s) {
  NodeImporter &n = s.n;
  if (failed(n.checkAttributes({"body", "num_scan_inputs", "scan_input_directions",
                                "scan_input_axes", "scan_output_directions",
                                "scan_output_axes"})))
    return failure();
  FailureOr<ScanSignature> sig = scanSignature(s, 0);
  if (failed(sig))
    return failure();
  SmallVector<int64_t> zerosIn(sig->numScanIn, 0), zerosOut(sig->numScanOut, 0);
  FailureOr<SmallVector<int64_t>> dirIn = n.getInts("scan_input_directions", zerosIn);
  FailureOr<SmallVector<int64_t>> axesIn = n.getInts("scan_input_axes", zerosIn);
  FailureOr<SmallVector<int64_t>> dirOut = n.getInts("scan_output_directions", zerosOut);
  FailureOr<SmallVector<int64_t>> axesOut = n.getInts("scan_output_axes", zerosOut);
  if (failed(dirIn) || failed(axesIn) || failed(dirOut) || failed(axesOut))
    return failure();
  if (dirIn->size() != sig->numScanIn || axesIn->size() != sig->numScanIn ||
      dirOut->size() != sig->numScanOut || axesOut->size() != sig->numScanOut)
    return n.error() << "the scan direction and axis attributes need " << sig->numScanIn
                     << " entries for inputs and " << sig->numScanOut << " for outputs";
  ImportedValues states;
  for (size_t i = 0; i < sig->numStates; ++i) {
    const ImportedValue *v = s.input(i);
    if (!v)
      return n.error() << "state input " << i << " is missing";
    states.push_back(*v);
  }
  SmallVector<Value> scanIn;
  for (size_t j = 0; j < sig->numScanIn; ++j)
    scanIn.push_back(n.input(sig->numStates + j));
  FailureOr<ImportedValues> results =
      unrollScan(s, *sig->body, states, scanIn, {*dirIn, *axesIn, *dirOut, *axesOut},
                 s.name() + "/body@");
  return failed(results) ? failure() : s.setResults(*results);
}

/// Opset 8's batched Scan: axis 0 of the states and scan inputs is the batch,
/// axis 1 the sequence. Each batch entry is scanned on its own and the results
/// stacked again; sequence_lens, when given, must be constant and full.
LogicalResult importScan8(StructuredNode &s) {
  NodeImporter &n = s.n;
  if (failed(n.checkAttributes({"body", "num_scan_inputs", "directions"})))
    return failure();
  FailureOr<ScanSignature> sig = scanSignature(s, 1);
  if (failed(sig))
    return failure();
  SmallVector<int64_t> zerosIn(sig->numScanIn, 0), zerosOut(sig->numScanOut, 0);
  FailureOr<SmallVector<int64_t>> dirIn = n.getInts("directions", zerosIn);
  if (failed(dirIn))
    return failure();
  if (dirIn->size() != sig->numScanIn)
    return n.error() << "attribute 'directions' needs " << sig->numScanIn << " entries";
  SmallVector<Value> inputs;
  for (size_t i = 1; i < s.numInputs(); ++i) {
    auto type = n.input(i) ? dyn_cast<RankedTensorType>(n.input(i).getType())
                           : RankedTensorType();
    if (!type || type.getRank() < 1 || type.isDynamicDim(0) ||
        (i > sig->numStates && (type.getRank() < 2 || type.isDynamicDim(1))))
      return n.error() << "input " << i << " must be a tensor with static batch"
                       << (i > sig->numStates ? " and sequence" : "") << " axes";
    inputs.push_back(n.input(i));
  }
  int64_t batch = cast<RankedTensorType>(inputs[0].getType()).getDimSize(0);
  for (Value x : inputs)
    if (cast<RankedTensorType>(x.getType()).getDimSize(0) != batch)
      return n.error() << "the states and scan inputs must share their batch size " << batch;
  if (batch <= 0 || batch > kMaxUnrolledIterations)
    return n.error() << "batch size " << batch << " is outside [1, " << kMaxUnrolledIterations
                     << "] (each entry is unrolled at import)";
  if (n.input(0)) {
    int64_t length = cast<RankedTensorType>(inputs.back().getType()).getDimSize(1);
    FailureOr<SmallVector<int64_t>> lens = n.constantInts(0, "sequence_lens");
    if (failed(lens))
      return failure();
    for (int64_t len : *lens)
      if (len != length)
        return n.error() << "input 'sequence_lens' holds " << len
                         << "; only full sequences (" << length << ") are supported";
  }
  ScanLayout layout{*dirIn, zerosIn, zerosOut, zerosOut};
  SmallVector<ImportedValues> perBatch;
  for (int64_t b = 0; b < batch; ++b) {
    Value idx = scalarConstant(n, n.b().getI64Type(), b);
    SmallVector<Value> slices;
    for (Value x : inputs) {
      FailureOr<Values> slice = n.create<graph::GatherOp>({x, idx}, {n.named("axis", n.i64(0))});
      if (failed(slice))
        return failure();
      slices.push_back((*slice)[0]);
    }
    ImportedValues states;
    for (size_t i = 0; i < sig->numStates; ++i)
      states.push_back(ImportedValue::ofTensor(slices[i]));
    FailureOr<ImportedValues> r =
        unrollScan(s, *sig->body, states, ArrayRef<Value>(slices).drop_front(sig->numStates),
                   layout, s.name() + "/batch@" + std::to_string(b) + "/body@");
    if (failed(r))
      return failure();
    perBatch.push_back(*r);
  }
  ImportedValues results;
  for (size_t k = 0; k < perBatch[0].size(); ++k) {
    SmallVector<Value> parts;
    for (ImportedValues &r : perBatch)
      parts.push_back(r[k].tensor);
    FailureOr<Value> stacked = stackTensors(n, parts, 0);
    if (failed(stacked))
      return failure();
    results.push_back(ImportedValue::ofTensor(*stacked));
  }
  return s.setResults(results);
}

LogicalResult importSequenceMap(StructuredNode &s) {
  NodeImporter &n = s.n;
  if (failed(n.checkAttributes({"body"})))
    return failure();
  FailureOr<const onnx::GraphProto *> body = s.graphAttr("body");
  FailureOr<ArrayRef<Value>> seq = s.sequenceInput(0, "input_sequence");
  if (failed(body) || failed(seq))
    return failure();
  size_t length = seq->size();
  for (size_t i = 1; i < s.numInputs(); ++i) {
    const ImportedValue *v = s.input(i);
    if (!v || (!v->isTensor() && v->kind != ImportedValue::Kind::Sequence))
      return n.error() << "additional input " << i << " must be a tensor or a sequence";
    if (v->kind == ImportedValue::Kind::Sequence && v->elements.size() != length)
      return n.error() << "input " << i << " is a sequence of " << v->elements.size()
                       << " tensors, input 'input_sequence' of " << length;
  }
  if ((size_t)(*body)->input_size() != s.numInputs())
    return n.error() << "the body has " << (*body)->input_size() << " inputs, expected "
                     << s.numInputs();
  if (length > (size_t)kMaxUnrolledIterations)
    return n.error() << "maps over " << length << " tensors, more than "
                     << kMaxUnrolledIterations << " (unrolled at import)";
  SmallVector<SmallVector<Value>> outs((*body)->output_size());
  for (size_t t = 0; t < length; ++t) {
    ImportedValues args;
    for (size_t i = 0; i < s.numInputs(); ++i) {
      const ImportedValue &v = *s.input(i);
      args.push_back(v.isTensor() ? v : ImportedValue::ofTensor(v.elements[t]));
    }
    FailureOr<ImportedValues> r =
        s.importGraph(**body, args, s.name() + "/body@" + std::to_string(t) + "/");
    if (failed(r))
      return failure();
    for (auto [k, v] : llvm::enumerate(*r)) {
      if (!v.isTensor())
        return n.error() << "body output " << k << " must be a tensor, got a " << v.kindName();
      outs[k].push_back(v.tensor);
    }
  }
  ImportedValues results;
  for (auto &o : outs)
    results.push_back(ImportedValue::ofSequence(o));
  return s.setResults(results);
}

} // namespace

void strait::onnximport::registerControlFlowImporters(StructuredRegistry &r) {
  r.add("If", 1, importIf);
  r.add("Loop", 1, importLoop);
  r.add("Scan", 8, importScan8); // batched, with sequence_lens
  r.add("Scan", 9, importScan);
  r.add("SequenceMap", 17, importSequenceMap);
}
