//===- ImportSequence.cpp - ONNX sequences and optionals ------------------===//
//
// Sequences are static-length lists of tensors and optionals are present or
// empty, both known while importing (ImportStructured.h): SequenceAt picks an
// element, SplitToSequence splits into Split's results, ConcatFromSequence
// concatenates (or stacks) them, and positions, lengths and has-element tests
// are constants. Positions must therefore be constant too.
//
//===----------------------------------------------------------------------===//

#include "ImportStructured.h"

#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

//===----------------------------------------------------------------------===//
// Shared helpers (declared in ImportStructured.h)
//===----------------------------------------------------------------------===//

StringRef ImportedValue::kindName() const {
  switch (kind) {
  case Kind::Tensor: return "tensor";
  case Kind::Sequence: return "sequence";
  case Kind::Optional: return "optional";
  }
  return "value";
}

FailureOr<ArrayRef<Value>> StructuredNode::sequenceInput(size_t i, StringRef what) {
  const ImportedValue *v = input(i);
  if (!v)
    return n.error() << "missing input '" << what << "'";
  if (v->kind != ImportedValue::Kind::Sequence)
    return n.error() << "input '" << what << "' (" << n.proto().input(i)
                     << ") must be a sequence, got a " << v->kindName();
  return ArrayRef<Value>(v->elements);
}

FailureOr<const onnx::GraphProto *> StructuredNode::graphAttr(StringRef name) {
  const onnx::AttributeProto *a = n.attr(name);
  if (!a || !a->has_g())
    return n.error() << "missing graph attribute '" << name << "'";
  return &a->g();
}

std::string StructuredNode::name() const {
  if (auto named = dyn_cast<NameLoc>(n.location()))
    return named.getName().str();
  return n.proto().name();
}

FailureOr<Value> strait::onnximport::stackTensors(NodeImporter &n, ArrayRef<Value> parts,
                                                  int64_t axis) {
  SmallVector<Value> expanded;
  for (Value p : parts) {
    FailureOr<Values> u = n.create<graph::UnsqueezeOp>(p, {n.named("axes", n.i64s({axis}))});
    if (failed(u))
      return failure();
    expanded.push_back((*u)[0]);
  }
  if (expanded.size() == 1)
    return expanded[0];
  FailureOr<Values> c = n.create<graph::ConcatOp>(expanded, {n.named("axis", n.i64(axis))});
  if (failed(c))
    return failure();
  return (*c)[0];
}

void StructuredRegistry::add(StringRef opType, int sinceVersion, StructuredImportFn fn) {
  auto &entries = table[opType];
  entries.push_back({sinceVersion, fn});
  llvm::sort(entries, [](auto &a, auto &b) { return a.first < b.first; });
}

StructuredImportFn StructuredRegistry::lookup(StringRef opType, int64_t opset) const {
  auto it = table.find(opType);
  if (it == table.end())
    return nullptr;
  StructuredImportFn fn = nullptr;
  for (auto &[since, f] : it->second)
    if (since <= opset)
      fn = f;
  return fn;
}

SmallVector<StringRef> StructuredRegistry::opTypes() const {
  SmallVector<StringRef> out;
  for (auto &e : table)
    out.push_back(e.first());
  llvm::sort(out);
  return out;
}

const StructuredRegistry &strait::onnximport::structuredRegistry() {
  static const StructuredRegistry registry = [] {
    StructuredRegistry r;
    registerControlFlowImporters(r);
    registerSequenceImporters(r);
    return r;
  }();
  return registry;
}

//===----------------------------------------------------------------------===//
// Sequence and optional ops
//===----------------------------------------------------------------------===//

namespace {

Value boolScalar(NodeImporter &n, bool v) {
  auto type = RankedTensorType::get({}, n.b().getI1Type());
  return n.constant(DenseElementsAttr::get(type, ArrayRef<bool>(v)));
}

Value i64Scalar(NodeImporter &n, int64_t v) {
  auto type = RankedTensorType::get({}, n.b().getI64Type());
  return n.constant(DenseElementsAttr::get(type, ArrayRef<int64_t>(v)));
}

/// The constant scalar position of input i (default `dflt` when absent),
/// checked to lie in [-size, size - 1 + extra], made non-negative.
FailureOr<int64_t> position(StructuredNode &s, size_t i, int64_t dflt, int64_t size,
                            int64_t extra) {
  int64_t pos = dflt;
  if (s.n.input(i)) {
    FailureOr<SmallVector<int64_t>> p = s.n.constantInts(i, "position");
    if (failed(p))
      return failure();
    if (p->size() != 1)
      return s.n.error() << "input 'position' must be a scalar, got " << p->size()
                         << " values";
    pos = (*p)[0];
  } else if (s.input(i)) {
    return s.n.error() << "input 'position' must be a tensor";
  }
  if (pos < -size || pos > size - 1 + extra)
    return s.n.error() << "position " << pos << " is outside [" << -size << ", "
                       << size - 1 + extra << "] for a sequence of " << size << " tensors";
  return pos < 0 ? pos + size : pos;
}

LogicalResult importSequenceEmpty(StructuredNode &s) {
  if (failed(s.n.checkAttributes({"dtype"})))
    return failure();
  return s.setResults(ImportedValue::ofSequence({}));
}

LogicalResult importSequenceConstruct(StructuredNode &s) {
  if (failed(s.n.checkAttributes({})))
    return failure();
  SmallVector<Value> elements;
  for (size_t i = 0; i < s.numInputs(); ++i) {
    Value v = s.n.input(i);
    if (!v)
      return s.n.error() << "input " << i << " must be a tensor";
    elements.push_back(v);
  }
  if (elements.empty())
    return s.n.error() << "needs at least one input";
  return s.setResults(ImportedValue::ofSequence(elements));
}

LogicalResult importSequenceAt(StructuredNode &s) {
  FailureOr<ArrayRef<Value>> seq = s.sequenceInput(0, "input_sequence");
  if (failed(seq) || failed(s.n.checkAttributes({})))
    return failure();
  if (!s.input(1))
    return s.n.error() << "missing input 'position'";
  FailureOr<int64_t> pos = position(s, 1, 0, seq->size(), 0);
  if (failed(pos))
    return failure();
  return s.setResults(ImportedValue::ofTensor((*seq)[*pos]));
}

LogicalResult importSequenceInsert(StructuredNode &s) {
  FailureOr<ArrayRef<Value>> seq = s.sequenceInput(0, "input_sequence");
  if (failed(seq) || failed(s.n.checkAttributes({})))
    return failure();
  Value t = s.n.input(1);
  if (!t)
    return s.n.error() << "input 'tensor' must be a tensor";
  int64_t size = seq->size();
  FailureOr<int64_t> pos = position(s, 2, size, size, 1);
  if (failed(pos))
    return failure();
  SmallVector<Value> out(seq->begin(), seq->end());
  out.insert(out.begin() + *pos, t);
  return s.setResults(ImportedValue::ofSequence(out));
}

LogicalResult importSequenceErase(StructuredNode &s) {
  FailureOr<ArrayRef<Value>> seq = s.sequenceInput(0, "input_sequence");
  if (failed(seq) || failed(s.n.checkAttributes({})))
    return failure();
  int64_t size = seq->size();
  if (size == 0)
    return s.n.error() << "cannot erase from an empty sequence";
  FailureOr<int64_t> pos = position(s, 1, -1, size, 0);
  if (failed(pos))
    return failure();
  SmallVector<Value> out(seq->begin(), seq->end());
  out.erase(out.begin() + *pos);
  return s.setResults(ImportedValue::ofSequence(out));
}

LogicalResult importSequenceLength(StructuredNode &s) {
  FailureOr<ArrayRef<Value>> seq = s.sequenceInput(0, "input_sequence");
  if (failed(seq) || failed(s.n.checkAttributes({})))
    return failure();
  return s.setResults(ImportedValue::ofTensor(i64Scalar(s.n, seq->size())));
}

LogicalResult importSplitToSequence(StructuredNode &s) {
  NodeImporter &n = s.n;
  if (failed(n.checkAttributes({"axis", "keepdims"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> axisAttr = n.getInt("axis", 0), keepdims = n.getInt("keepdims", 1);
  if (failed(x) || failed(axisAttr) || failed(keepdims))
    return failure();
  auto type = dyn_cast<RankedTensorType>(n.inputType(0));
  if (!type)
    return n.error() << "input 'input' must be ranked, got " << n.inputType(0);
  FailureOr<int64_t> axis = graph::normalizeAxis(n.location(), *axisAttr, type.getRank(), "axis");
  if (failed(axis))
    return failure();
  int64_t extent = type.getDimSize(*axis);
  if (extent == ShapedType::kDynamic)
    return n.error() << "the split axis of input 'input' must be static, got " << type;
  SmallVector<int64_t> sizes;
  bool squeeze = false;
  if (n.input(1)) {
    FailureOr<SmallVector<int64_t>> split = n.constantInts(1, "split");
    if (failed(split))
      return failure();
    if (n.inputType(1).getRank() == 0) {
      int64_t chunk = (*split)[0];
      if (chunk <= 0)
        return n.error() << "input 'split' must be positive, got " << chunk;
      for (int64_t start = 0; start < extent; start += chunk)
        sizes.push_back(std::min(chunk, extent - start));
    } else {
      sizes = *split;
    }
  } else {
    sizes.assign(extent, 1);
    squeeze = *keepdims == 0;
  }
  if (sizes.empty())
    return s.setResults(ImportedValue::ofSequence({}));
  FailureOr<Values> parts = n.create<graph::SplitOp>(
      *x, {n.named("axis", n.i64(*axis)), n.named("split", n.i64s(sizes))});
  if (failed(parts))
    return failure();
  SmallVector<Value> elements(parts->begin(), parts->end());
  if (squeeze)
    for (Value &e : elements) {
      FailureOr<Values> sq = n.create<graph::SqueezeOp>(e, {n.named("axes", n.i64s({*axis}))});
      if (failed(sq))
        return failure();
      e = (*sq)[0];
    }
  return s.setResults(ImportedValue::ofSequence(elements));
}

LogicalResult importConcatFromSequence(StructuredNode &s) {
  NodeImporter &n = s.n;
  FailureOr<ArrayRef<Value>> seq = s.sequenceInput(0, "input_sequence");
  if (failed(seq) || failed(n.checkAttributes({"axis", "new_axis"})))
    return failure();
  FailureOr<std::optional<int64_t>> axisAttr = n.getOptionalInt("axis");
  FailureOr<int64_t> newAxis = n.getInt("new_axis", 0);
  if (failed(axisAttr) || failed(newAxis))
    return failure();
  if (!*axisAttr)
    return n.error() << "missing attribute 'axis'";
  if (seq->empty())
    return n.error() << "input 'input_sequence' is empty: the output type is unknown";
  auto type = dyn_cast<RankedTensorType>((*seq)[0].getType());
  if (!type)
    return n.error() << "the sequence's tensors must be ranked";
  if (*newAxis) {
    FailureOr<int64_t> axis =
        graph::normalizeAxis(n.location(), **axisAttr, type.getRank() + 1, "axis");
    FailureOr<Value> stacked = failed(axis) ? FailureOr<Value>(failure()) : stackTensors(n, *seq, *axis);
    return failed(stacked) ? failure() : s.setResults(ImportedValue::ofTensor(*stacked));
  }
  FailureOr<Values> c =
      seq->size() == 1 ? Values{(*seq)[0]}
                       : n.create<graph::ConcatOp>(*seq, {n.named("axis", n.i64(**axisAttr))});
  return failed(c) ? failure() : s.setResults(ImportedValue::ofTensor((*c)[0]));
}

LogicalResult importOptional(StructuredNode &s) {
  if (failed(s.n.checkAttributes({"type"})))
    return failure();
  const ImportedValue *v = s.input(0);
  if (!v && !s.n.attr("type"))
    return s.n.error() << "an empty Optional needs attribute 'type'";
  return s.setResults(ImportedValue::ofOptional(v));
}

LogicalResult importOptionalGetElement(StructuredNode &s) {
  if (failed(s.n.checkAttributes({})))
    return failure();
  const ImportedValue *v = s.input(0);
  if (!v)
    return s.n.error() << "missing input 'input'";
  if (v->kind != ImportedValue::Kind::Optional)
    return s.setResults(*v); // Opset 18: a tensor or sequence is returned as is.
  if (!v->contained)
    return s.n.error() << "input 'input' (" << s.n.proto().input(0)
                       << ") is an empty optional";
  return s.setResults(*v->contained);
}

LogicalResult importOptionalHasElement(StructuredNode &s) {
  if (failed(s.n.checkAttributes({})))
    return failure();
  const ImportedValue *v = s.input(0);
  bool has = v && (v->kind != ImportedValue::Kind::Optional || v->contained);
  return s.setResults(ImportedValue::ofTensor(boolScalar(s.n, has)));
}

/// Identity of any value (a tensor, a sequence or an optional).
LogicalResult importIdentity(StructuredNode &s) {
  const ImportedValue *v = s.input(0);
  if (!v)
    return s.n.error() << "missing input 'input'";
  return s.setResults(*v);
}

} // namespace

void strait::onnximport::registerSequenceImporters(StructuredRegistry &r) {
  r.add("SequenceEmpty", 11, importSequenceEmpty);
  r.add("SequenceConstruct", 11, importSequenceConstruct);
  r.add("SequenceAt", 11, importSequenceAt);
  r.add("SequenceInsert", 11, importSequenceInsert);
  r.add("SequenceErase", 11, importSequenceErase);
  r.add("SequenceLength", 11, importSequenceLength);
  r.add("SplitToSequence", 11, importSplitToSequence);
  r.add("ConcatFromSequence", 11, importConcatFromSequence);
  r.add("Optional", 15, importOptional);
  r.add("OptionalGetElement", 15, importOptionalGetElement);
  r.add("OptionalHasElement", 15, importOptionalHasElement);
  r.add("Identity", 1, importIdentity);
}
