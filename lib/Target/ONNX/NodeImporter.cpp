//===- NodeImporter.cpp - Per-node import context -------------------------===//

#include "NodeImporter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace strait::onnximport;

/// The most elements a tensor the importer builds or infers may have, so
/// that element and byte counts never overflow int64_t.
static constexpr int64_t kMaxElements = int64_t(1) << 48;

//===----------------------------------------------------------------------===//
// Data types and tensors
//===----------------------------------------------------------------------===//

Type strait::onnximport::elementType(MLIRContext *ctx, int32_t t) {
  Builder b(ctx);
  switch (t) {
  case onnx::TensorProto::FLOAT: return b.getF32Type();
  case onnx::TensorProto::FLOAT16: return b.getF16Type();
  case onnx::TensorProto::BFLOAT16: return b.getBF16Type();
  case onnx::TensorProto::DOUBLE: return b.getF64Type();
  case onnx::TensorProto::INT64: return b.getIntegerType(64);
  case onnx::TensorProto::INT32: return b.getIntegerType(32);
  case onnx::TensorProto::INT16: return b.getIntegerType(16);
  case onnx::TensorProto::INT8: return b.getIntegerType(8);
  case onnx::TensorProto::UINT8: return b.getIntegerType(8, /*isSigned=*/false);
  case onnx::TensorProto::UINT16: return b.getIntegerType(16, false);
  case onnx::TensorProto::UINT32: return b.getIntegerType(32, false);
  case onnx::TensorProto::UINT64: return b.getIntegerType(64, false);
  case onnx::TensorProto::BOOL: return b.getI1Type();
  default: return {};
  }
}

StringRef strait::onnximport::dataTypeName(int32_t t) {
  static const char *names[] = {"UNDEFINED", "FLOAT",  "UINT8",   "INT8",    "UINT16",
                                "INT16",     "INT32",  "INT64",   "STRING",  "BOOL",
                                "FLOAT16",   "DOUBLE", "UINT32",  "UINT64",  "COMPLEX64",
                                "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ",
                                "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1"};
  if (t >= 0 && t < (int32_t)std::size(names))
    return names[t];
  return "unknown";
}

FailureOr<RankedTensorType>
strait::onnximport::tensorTypeOf(MLIRContext *ctx, const onnx::TensorProto &tensor,
                                 function_ref<InFlightDiagnostic()> emitError) {
  Type elt = elementType(ctx, tensor.data_type());
  if (!elt)
    return emitError() << "tensor '" << tensor.name() << "' has unsupported data type "
                       << dataTypeName(tensor.data_type()) << " (" << tensor.data_type()
                       << ")";
  SmallVector<int64_t> dims;
  int64_t total = 1;
  for (int64_t d : tensor.dims()) {
    if (d < 0)
      return emitError() << "tensor '" << tensor.name() << "' has negative dimension " << d;
    if (d > 0 && total > kMaxElements / d)
      return emitError() << "tensor '" << tensor.name()
                         << "' has more than 2^48 elements";
    total *= d;
    dims.push_back(d);
  }
  return RankedTensorType::get(dims, elt);
}

/// Appends the little-endian bytes of `values` narrowed to `width` bytes.
template <typename T>
static void appendNarrowed(std::vector<char> &out, const T &values, unsigned width) {
  for (auto v : values) {
    uint64_t bits = static_cast<uint64_t>(v);
    for (unsigned i = 0; i < width; ++i)
      out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  }
}

FailureOr<DenseElementsAttr>
strait::onnximport::denseFromTensor(const onnx::TensorProto &tensor, RankedTensorType type,
                                    function_ref<InFlightDiagnostic()> emitError) {
  int64_t n = type.getNumElements();
  Type elt = type.getElementType();
  unsigned width = elt.isInteger(1) ? 1 : elt.getIntOrFloatBitWidth() / 8;
  std::vector<char> bytes;
  if (tensor.has_raw_data()) {
    const std::string &raw = tensor.raw_data();
    if ((int64_t)raw.size() != n * (int64_t)width)
      return emitError() << "tensor '" << tensor.name() << "' has " << raw.size()
                         << " bytes of raw_data, expected " << n * width << " for " << type;
    bytes.assign(raw.begin(), raw.end());
  } else {
    using TP = onnx::TensorProto;
    switch (tensor.data_type()) {
    case TP::FLOAT:
      bytes.resize(tensor.float_data_size() * 4);
      std::memcpy(bytes.data(), tensor.float_data().data(), bytes.size());
      break;
    case TP::DOUBLE:
      bytes.resize(tensor.double_data_size() * 8);
      std::memcpy(bytes.data(), tensor.double_data().data(), bytes.size());
      break;
    case TP::INT64:
      appendNarrowed(bytes, tensor.int64_data(), 8);
      break;
    case TP::UINT32:
    case TP::UINT64:
      appendNarrowed(bytes, tensor.uint64_data(), width);
      break;
    default: // int32, int16, int8, uint8, uint16, bool, float16, bfloat16
      appendNarrowed(bytes, tensor.int32_data(), width);
      break;
    }
    if ((int64_t)bytes.size() != n * (int64_t)width)
      return emitError() << "tensor '" << tensor.name() << "' holds "
                         << bytes.size() / std::max(width, 1u) << " values, expected "
                         << n << " for " << type;
  }
  if (elt.isInteger(1)) {
    SmallVector<bool> bits;
    bits.reserve(n);
    for (char c : bytes)
      bits.push_back(c != 0);
    return DenseElementsAttr::get(type, bits);
  }
  bool splat = false;
  if (!DenseElementsAttr::isValidRawBuffer(type, ArrayRef<char>(bytes), splat))
    return emitError() << "tensor '" << tensor.name() << "' has a malformed buffer";
  return DenseElementsAttr::getFromRawBuffer(type, ArrayRef<char>(bytes));
}

//===----------------------------------------------------------------------===//
// NodeImporter
//===----------------------------------------------------------------------===//

InFlightDiagnostic NodeImporter::error() {
  // The location names the node (its generated name when it has none).
  StringRef name = node.name();
  if (auto named = dyn_cast<NameLoc>(loc))
    name = named.getName();
  return emitError(loc) << node.op_type() << " node '" << name << "': ";
}

FailureOr<Value> NodeImporter::requiredInput(size_t i) {
  if (Value v = input(i))
    return v;
  return error() << "missing required input " << i;
}

TensorType NodeImporter::inputType(size_t i) const {
  Value v = input(i);
  return v ? cast<TensorType>(v.getType()) : TensorType();
}

FailureOr<DenseElementsAttr> NodeImporter::constantInput(size_t i, StringRef what) {
  Value v = input(i);
  if (!v)
    return error() << "missing input '" << what << "'";
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)))
    return error() << "input '" << what << "' (" << node.input(i)
                   << ") must be constant once shapes are static; fix dynamic "
                      "dimensions with --input-shape";
  return attr;
}

FailureOr<SmallVector<int64_t>> NodeImporter::constantInts(size_t i, StringRef what) {
  FailureOr<DenseElementsAttr> attr = constantInput(i, what);
  if (failed(attr))
    return failure();
  if (!isa<IntegerType>(attr->getElementType()))
    return error() << "input '" << what << "' must hold integers";
  SmallVector<int64_t> out;
  for (APInt v : attr->getValues<APInt>())
    out.push_back(v.getSExtValue());
  return out;
}

std::optional<SmallVector<int64_t>> NodeImporter::optionalConstantInts(size_t i) {
  Value v = input(i);
  DenseElementsAttr attr;
  if (!v || !matchPattern(v, m_Constant(&attr)) || !isa<IntegerType>(attr.getElementType()))
    return std::nullopt;
  SmallVector<int64_t> out;
  for (APInt x : attr.getValues<APInt>())
    out.push_back(x.getSExtValue());
  return out;
}

size_t NodeImporter::numUsedOutputs() const {
  size_t n = 0;
  for (const std::string &o : node.output())
    n += !o.empty();
  return n;
}

const onnx::AttributeProto *NodeImporter::attr(StringRef name) const {
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

/// Fails unless `a` has ONNX attribute type `type`.
static LogicalResult expectType(NodeImporter &n, const onnx::AttributeProto &a,
                                onnx::AttributeProto::AttributeType type,
                                StringRef typeName) {
  if (a.type() == type)
    return success();
  // Some old exporters leave the type unset; accept when the field is there.
  if (a.type() == onnx::AttributeProto::UNDEFINED)
    return success();
  return n.error() << "attribute '" << a.name() << "' must be " << typeName << ", got "
                   << onnx::AttributeProto::AttributeType_Name(a.type()) << " (type code "
                   << static_cast<int>(a.type()) << ")";
}

FailureOr<int64_t> NodeImporter::getInt(StringRef name, int64_t dflt) {
  FailureOr<std::optional<int64_t>> v = getOptionalInt(name);
  if (failed(v))
    return failure();
  return v->value_or(dflt);
}

FailureOr<std::optional<int64_t>> NodeImporter::getOptionalInt(StringRef name) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return std::optional<int64_t>();
  if (failed(expectType(*this, *a, onnx::AttributeProto::INT, "an int")))
    return failure();
  return std::optional<int64_t>(a->i());
}

FailureOr<float> NodeImporter::getFloat(StringRef name, float dflt) {
  FailureOr<std::optional<float>> v = getOptionalFloat(name);
  if (failed(v))
    return failure();
  return v->value_or(dflt);
}

FailureOr<std::optional<float>> NodeImporter::getOptionalFloat(StringRef name) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return std::optional<float>();
  if (failed(expectType(*this, *a, onnx::AttributeProto::FLOAT, "a float")))
    return failure();
  return std::optional<float>(a->f());
}

FailureOr<std::string> NodeImporter::getString(StringRef name, StringRef dflt) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return dflt.str();
  if (failed(expectType(*this, *a, onnx::AttributeProto::STRING, "a string")))
    return failure();
  return a->s();
}

FailureOr<SmallVector<int64_t>> NodeImporter::getInts(StringRef name,
                                                      ArrayRef<int64_t> dflt) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return SmallVector<int64_t>(dflt);
  if (failed(expectType(*this, *a, onnx::AttributeProto::INTS, "a list of ints")))
    return failure();
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

FailureOr<SmallVector<float>> NodeImporter::getFloats(StringRef name) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return SmallVector<float>();
  if (failed(expectType(*this, *a, onnx::AttributeProto::FLOATS, "a list of floats")))
    return failure();
  return SmallVector<float>(a->floats().begin(), a->floats().end());
}

FailureOr<DenseElementsAttr> NodeImporter::getTensor(StringRef name) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return DenseElementsAttr();
  if (failed(expectType(*this, *a, onnx::AttributeProto::TENSOR, "a tensor")))
    return failure();
  auto emit = [&] { return error(); };
  if (a->t().data_location() == onnx::TensorProto::EXTERNAL)
    return error() << "attribute '" << name << "' uses external data, not supported";
  FailureOr<RankedTensorType> type = tensorTypeOf(ctx(), a->t(), emit);
  if (failed(type))
    return failure();
  return denseFromTensor(a->t(), *type, emit);
}

LogicalResult NodeImporter::checkAttributes(ArrayRef<StringRef> known) {
  for (const onnx::AttributeProto &a : node.attribute())
    if (!llvm::is_contained(known, a.name()))
      return error() << "attribute '" << a.name() << "' is not supported";
  return success();
}

/// Fails unless every ranked type in `types` has at most kMaxElements.
static LogicalResult checkResultSizes(NodeImporter &n, TypeRange types) {
  for (auto [i, type] : llvm::enumerate(types)) {
    auto shaped = dyn_cast<ShapedType>(type);
    if (!shaped || !shaped.hasRank())
      continue;
    int64_t total = 1;
    for (int64_t d : shaped.getShape()) {
      if (d == ShapedType::kDynamic || d == 0)
        continue;
      if (d < 0 || total > kMaxElements / d)
        return n.error() << "result " << i << " would have more than 2^48 elements";
      total *= d;
    }
  }
  return success();
}

FailureOr<Values> NodeImporter::createNamed(StringRef opName, ValueRange operands,
                                                ArrayRef<NamedAttribute> attrs) {
  SmallVector<Value> present;
  for (Value v : operands)
    if (v)
      present.push_back(v);
  std::optional<RegisteredOperationName> name =
      RegisteredOperationName::lookup(opName, ctx());
  if (!name)
    return error() << "internal: op " << opName << " is not registered";
  auto *infer = name->getInterface<InferTypeOpInterface>();
  SmallVector<Type> types;
  // Operation::create fills in DefaultValuedAttrs, but inference runs before
  // the op exists and its adaptor getters do not apply defaults: do it here.
  NamedAttrList attrList(attrs);
  name->populateDefaultAttrs(attrList);
  DictionaryAttr dict = attrList.getDictionary(ctx());
  if (!infer || failed(infer->inferReturnTypes(ctx(), loc, present, dict, nullptr, {}, types)) ||
      failed(checkResultSizes(*this, types)))
    return failure();
  OperationState state(loc, *name);
  state.addOperands(present);
  state.addAttributes(dict.getValue());
  state.addTypes(types);
  Operation *op = builder.create(state);
  if (failed(mlir::verify(op, /*verifyRecursively=*/false))) {
    op->erase();
    return failure();
  }
  SmallVector<Value> folded;
  if (!op->hasTrait<OpTrait::ConstantLike>() && succeeded(builder.tryFold(op, folded)) &&
      !folded.empty()) {
    op->erase();
    return Values(folded.begin(), folded.end());
  }
  return Values(op->getResults().begin(), op->getResults().end());
}

Value NodeImporter::constant(ElementsAttr value) {
  return builder.create<graph::ConstantOp>(loc, value);
}

LogicalResult NodeImporter::setResults(ValueRange values) {
  // Outputs past `values` (a mask, saved statistics) stay unbound; using one
  // later is an error that names this node.
  outputs.assign(values.begin(), values.end());
  return success();
}

//===----------------------------------------------------------------------===//
// OpRegistry
//===----------------------------------------------------------------------===//

void OpRegistry::add(StringRef opType, int sinceVersion, ImportFn fn) {
  auto &entries = table[opType];
  entries.push_back({sinceVersion, fn});
  llvm::sort(entries, [](auto &a, auto &b) { return a.first < b.first; });
}

ImportFn OpRegistry::lookup(StringRef opType, int64_t opset) const {
  auto it = table.find(opType);
  if (it == table.end())
    return nullptr;
  ImportFn fn = nullptr;
  for (auto &[since, f] : it->second)
    if (since <= opset)
      fn = f;
  return fn;
}

SmallVector<StringRef> OpRegistry::opTypes() const {
  SmallVector<StringRef> out;
  for (auto &e : table)
    out.push_back(e.first());
  llvm::sort(out);
  return out;
}

const OpRegistry &strait::onnximport::opRegistry() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    registerElementwiseImporters(r);
    registerNNImporters(r);
    registerTensorImporters(r);
    registerReductionImporters(r);
    registerRecurrentImporters(r);
    registerSignalImporters(r);
    registerUnpoolImporters(r);
    registerQuantizedImporters(r);
    registerDataDependentImporters(r);
    registerAttentionImporters(r);
    registerOpset18Importers(r);
    return r;
  }();
  return registry;
}
