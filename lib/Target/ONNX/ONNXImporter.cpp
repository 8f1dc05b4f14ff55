//===- ONNXImporter.cpp - ONNX to graph dialect ---------------------------===//
//
// Walks the ONNX graph once in its (required) topological order: inputs become
// function arguments, float initializers graph.Variable symbols, other
// initializers constants, and each node goes through the op registry, which
// builds graph ops with inferred types and folds constant sub-graphs as it goes.
//
//===----------------------------------------------------------------------===//

#include "strait/Target/ONNX/ONNXImporter.h"

#include "ImportStructured.h"
#include "NodeImporter.h"
#include "TorchExport.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinDialect.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/text_format.h>

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

static constexpr int64_t kMinOpset = 1, kMaxOpset = 24;
/// Bounds on input shapes (the same as tensorTypeOf's for initializers), so
/// that element and byte counts never overflow int64_t.
static constexpr int64_t kMaxDim = int64_t(1) << 40, kMaxElements = int64_t(1) << 48;

std::string strait::parseInputShapes(StringRef spec,
                                     llvm::StringMap<SmallVector<int64_t>> &shapes) {
  SmallVector<StringRef> entries;
  spec.split(entries, ',', -1, /*KeepEmpty=*/false);
  for (StringRef entry : entries) {
    auto [name, dims] = entry.trim().split('=');
    if (name.empty() || dims.empty())
      return ("bad --input-shape entry '" + entry + "': expected NAME=DxD..., e.g. "
              "input_ids=8x128").str();
    SmallVector<int64_t> shape;
    if (dims != "scalar") {
      SmallVector<StringRef> parts;
      dims.split(parts, 'x');
      for (StringRef p : parts) {
        int64_t d;
        if (p.getAsInteger(10, d) || d < 0 || d > kMaxDim)
          return ("bad dimension '" + p + "' in --input-shape entry '" + entry + "'").str();
        shape.push_back(d);
      }
    }
    auto [it, inserted] = shapes.try_emplace(name, shape);
    if (!inserted && it->second != shape)
      return ("--input-shape gives '" + name + "' two shapes").str();
  }
  return "";
}

namespace {

class ModelImporter : public GraphImporter {
public:
  ModelImporter(MLIRContext *ctx, StringRef path, const ONNXImportOptions &opts)
      : ctx(ctx), path(path.str()), opts(opts), builder(ctx),
        fileLoc(FileLineColLoc::get(ctx, path, 0, 0)) {
    baseDir = llvm::sys::path::parent_path(path).str();
    if (baseDir.empty())
      baseDir = ".";
  }

  OwningOpRef<ModuleOp> run(const onnx::ModelProto &model);
  FailureOr<ImportedValues> importGraph(const onnx::GraphProto &graph,
                                        ArrayRef<ImportedValue> args,
                                        StringRef prefix) override;

private:
  InFlightDiagnostic error(Location loc) { return emitError(loc); }
  InFlightDiagnostic error() { return emitError(fileLoc); }

  LogicalResult readOpset(const onnx::ModelProto &model);
  FailureOr<Type> inputType(const onnx::ValueInfoProto &info);
  LogicalResult checkNumElements(ArrayRef<int64_t> shape, StringRef name);
  LogicalResult createFunction(const onnx::GraphProto &graph);
  LogicalResult declareInitializer(const onnx::TensorProto &tensor);
  FailureOr<ImportedValue> lookup(StringRef name, Location loc, StringRef user);
  LogicalResult declareSubgraphInitializer(const onnx::TensorProto &tensor);
  LogicalResult importNode(const onnx::NodeProto &node, size_t index);
  LogicalResult finish(const onnx::GraphProto &graph);
  FailureOr<AsmResourceBlob> externalBlob(const onnx::TensorProto &tensor);

  MLIRContext *ctx;
  std::string path, baseDir;
  const ONNXImportOptions &opts;
  OpBuilder builder;
  Location fileLoc;
  int64_t opset = 0;
  OwningOpRef<ModuleOp> module;
  func::FuncOp func;
  /// Named values: the main graph's scope, then one per subgraph being
  /// imported (If branch, Loop/Scan iteration); lookups go innermost first,
  /// which is how a subgraph reads outer-scope values.
  SmallVector<llvm::StringMap<ImportedValue>, 4> scopes{1};
  /// Prepended to node names inside subgraphs ("loop/body@3/").
  std::string namePrefix;
  /// Float initializers: the variable, read lazily at first use.
  llvm::StringMap<graph::VariableOp> variables;
  /// A PyTorch export's float initializers that are not torch parameters ->
  /// the exporter's kind (torchNonParameters); their variables carry it as
  /// `graph.torch_kind`, which graph-build-training-step reads.
  llvm::StringMap<std::string> nonParameters;
  /// Outputs a node names but the importer does not produce -> the node.
  llvm::StringMap<std::string> unboundOutputs;
  llvm::StringMap<std::shared_ptr<llvm::MemoryBuffer>> externalFiles;
};

} // namespace

LogicalResult ModelImporter::readOpset(const onnx::ModelProto &model) {
  for (const onnx::OperatorSetIdProto &o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx")
      opset = o.version();
  if (opset == 0)
    return error() << "model has no opset_import for the default ONNX domain";
  if (opset < kMinOpset || opset > kMaxOpset)
    return error() << "opset " << opset << " is not supported (supported: " << kMinOpset
                   << " to " << kMaxOpset << ")";
  return success();
}

/// Whether a shape has at most kMaxElements (dynamic and zero dims count as 1).
static bool fitsElementLimit(ArrayRef<int64_t> shape) {
  int64_t total = 1;
  for (int64_t d : shape) {
    if (d == ShapedType::kDynamic || d == 0)
      continue;
    if (d < 0 || total > kMaxElements / d)
      return false;
    total *= d;
  }
  return true;
}

LogicalResult ModelImporter::checkNumElements(ArrayRef<int64_t> shape, StringRef name) {
  if (!fitsElementLimit(shape))
    return error() << "graph input '" << name << "' has more than 2^48 elements";
  return success();
}

FailureOr<Type> ModelImporter::inputType(const onnx::ValueInfoProto &info) {
  if (!info.type().has_tensor_type())
    return error() << "graph input '" << info.name()
                   << "' is not a tensor (sequences, maps and optionals are not supported)";
  const onnx::TypeProto::Tensor &t = info.type().tensor_type();
  Type elt = elementType(ctx, t.elem_type());
  if (!elt)
    return error() << "graph input '" << info.name() << "' has unsupported data type "
                   << dataTypeName(t.elem_type());
  auto given = opts.inputShapes.find(info.name());
  if (!t.has_shape() && given == opts.inputShapes.end()) {
    if (!opts.allowDynamic)
      return error() << "graph input '" << info.name()
                     << "' has no shape: give it with --input-shape " << info.name()
                     << "=DxD...";
    return Type(UnrankedTensorType::get(elt));
  }
  SmallVector<int64_t> shape;
  SmallVector<std::string> dynamicDims;
  for (auto [i, d] : llvm::enumerate(t.shape().dim())) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0 || d.dim_value() > kMaxDim)
        return error() << "graph input '" << info.name() << "' has dimension " << i
                       << " = " << d.dim_value() << ", outside [0, 2^40]";
      shape.push_back(d.dim_value());
    } else {
      shape.push_back(ShapedType::kDynamic);
      dynamicDims.push_back(std::to_string(i) +
                            (d.dim_param().empty() ? "" : " ('" + d.dim_param() + "')"));
    }
  }
  if (given != opts.inputShapes.end()) {
    if (t.has_shape() && given->second.size() != shape.size())
      return error() << "--input-shape gives " << given->second.size()
                     << " dimensions for input '" << info.name() << "' of rank "
                     << shape.size();
    for (auto [i, d] : llvm::enumerate(shape))
      if (t.has_shape() && d != ShapedType::kDynamic && d != given->second[i])
        return error() << "--input-shape sets dimension " << i << " of input '"
                       << info.name() << "' to " << given->second[i]
                       << " but the model fixes it to " << d;
    if (failed(checkNumElements(given->second, info.name())))
      return failure();
    return Type(RankedTensorType::get(given->second, elt));
  }
  if (failed(checkNumElements(shape, info.name())))
    return failure();
  if (!dynamicDims.empty() && !opts.allowDynamic) {
    auto diag = error() << "graph input '" << info.name() << "' has dynamic dimension";
    for (const std::string &d : dynamicDims)
      diag << " " << d;
    diag << ": give a static shape with --input-shape " << info.name() << "=";
    for (auto [i, d] : llvm::enumerate(shape))
      diag << (i ? "x" : "") << (d == ShapedType::kDynamic ? std::string("N")
                                                           : std::to_string(d));
    return failure();
  }
  return Type(RankedTensorType::get(shape, elt));
}

LogicalResult ModelImporter::createFunction(const onnx::GraphProto &graph) {
  llvm::StringSet<> initNames;
  for (const onnx::TensorProto &t : graph.initializer())
    initNames.insert(t.name());
  // A misspelt --input-shape name first: the input it meant to fix would
  // otherwise fail as dynamic, naming the flag but not the typo.
  std::string inputList;
  for (const onnx::ValueInfoProto &in : graph.input())
    if (!initNames.contains(in.name()))
      inputList += (inputList.empty() ? "'" : ", '") + in.name() + "'";
  for (auto &entry : opts.inputShapes)
    if (!llvm::any_of(graph.input(), [&](const onnx::ValueInfoProto &in) {
          return in.name() == entry.first() && !initNames.contains(in.name());
        }))
      return error() << "--input-shape names '" << entry.first()
                     << "', which is not a graph input (inputs: " << inputList << ")";
  llvm::StringSet<> inputNames;
  SmallVector<Type> argTypes;
  SmallVector<std::string> argNames;
  for (const onnx::ValueInfoProto &in : graph.input()) {
    if (initNames.contains(in.name()))
      continue; // IR < 4: initializers are listed as inputs too.
    FailureOr<Type> type = inputType(in);
    if (failed(type))
      return failure();
    if (!inputNames.insert(in.name()).second)
      return error() << "graph input '" << in.name() << "' is declared twice";
    argTypes.push_back(*type);
    argNames.push_back(in.name());
  }
  builder.setInsertionPointToEnd(module->getBody());
  func = builder.create<func::FuncOp>(fileLoc, opts.functionName,
                                      builder.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  for (auto [i, name] : llvm::enumerate(argNames)) {
    func.setArgAttr(i, "graph.name", builder.getStringAttr(name));
    scopes.front()[name] = ImportedValue::ofTensor(entry->getArgument(i));
  }
  builder.setInsertionPointToEnd(entry);
  return success();
}

FailureOr<AsmResourceBlob> ModelImporter::externalBlob(const onnx::TensorProto &tensor) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const onnx::StringStringEntryProto &kv : tensor.external_data()) {
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset" && StringRef(kv.value()).getAsInteger(10, offset))
      return error() << "initializer '" << tensor.name() << "': bad external offset";
    else if (kv.key() == "length" && StringRef(kv.value()).getAsInteger(10, length))
      return error() << "initializer '" << tensor.name() << "': bad external length";
  }
  if (location.empty())
    return error() << "initializer '" << tensor.name() << "' has external data without a location";
  if (llvm::sys::path::is_absolute(location) || StringRef(location).contains(".."))
    return error() << "initializer '" << tensor.name() << "': external data path '"
                   << location << "' must stay inside the model's folder";
  SmallString<256> full(baseDir);
  llvm::sys::path::append(full, location);
  SmallString<256> realBase, realFull;
  if (llvm::sys::fs::real_path(baseDir, realBase) ||
      llvm::sys::fs::real_path(full, realFull))
    return error() << "initializer '" << tensor.name() << "': external data file '"
                   << full << "' cannot be opened (import with --shape-only to read "
                              "no weights)";
  if (!StringRef(realFull).starts_with(realBase.str().str() + "/"))
    return error() << "initializer '" << tensor.name() << "': external data path '"
                   << location << "' escapes the model's folder";
  auto &file = externalFiles[realFull];
  if (!file) {
    auto buf = llvm::MemoryBuffer::getFile(realFull, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
    if (!buf)
      return error() << "cannot read external data file '" << full
                     << "': " << buf.getError().message();
    file = std::shared_ptr<llvm::MemoryBuffer>(std::move(*buf));
  }
  int64_t size = file->getBufferSize();
  if (length < 0)
    length = size - offset;
  if (offset < 0 || length < 0 || offset > size || length > size - offset)
    return error() << "initializer '" << tensor.name() << "': external range (offset "
                   << offset << ", length " << length << ") lies outside '" << location
                   << "' (" << size << " bytes)";
  const char *data = file->getBufferStart() + offset;
  size_t align = 1;
  while (align < 64 && (reinterpret_cast<uintptr_t>(data) % (align * 2)) == 0)
    align *= 2;
  std::shared_ptr<llvm::MemoryBuffer> keep = file;
  return AsmResourceBlob(ArrayRef<char>(data, length), align,
                         [keep](void *, size_t, size_t) {}, /*dataIsMutable=*/false);
}

LogicalResult ModelImporter::declareInitializer(const onnx::TensorProto &tensor) {
  auto emit = [&] { return error() << "initializer '" << tensor.name() << "': "; };
  if (tensor.name().empty())
    return error() << "an initializer has no name";
  if (scopes.front().count(tensor.name()) || variables.count(tensor.name()))
    return error() << "initializer '" << tensor.name() << "' is defined twice";
  FailureOr<RankedTensorType> type = tensorTypeOf(ctx, tensor, emit);
  if (failed(type))
    return failure();
  bool external = tensor.data_location() == onnx::TensorProto::EXTERNAL;
  // Integer and bool initializers are data (shapes, indices, masks); so are
  // inline float scalars, which exporters emit for constants like 1/sqrt(d).
  bool inlineScalar = !external && type->getNumElements() == 1;
  if (!isa<FloatType>(type->getElementType()) || inlineScalar) {
    DenseElementsAttr value;
    if (external) {
      FailureOr<AsmResourceBlob> blob = externalBlob(tensor);
      if (failed(blob))
        return failure();
      onnx::TensorProto copy = tensor;
      copy.clear_external_data();
      copy.set_data_location(onnx::TensorProto::DEFAULT);
      copy.set_raw_data(std::string(blob->getData().data(), blob->getData().size()));
      FailureOr<DenseElementsAttr> v = denseFromTensor(copy, *type, emit);
      if (failed(v))
        return failure();
      value = *v;
    } else {
      FailureOr<DenseElementsAttr> v = denseFromTensor(tensor, *type, emit);
      if (failed(v))
        return failure();
      value = *v;
    }
    OpBuilder::InsertionGuard g(builder);
    builder.setInsertionPointToStart(&func.getBody().front());
    scopes.front()[tensor.name()] = ImportedValue::ofTensor(builder.create<graph::ConstantOp>(
        NameLoc::get(builder.getStringAttr(tensor.name()), fileLoc), value));
    return success();
  }
  ElementsAttr value;
  if (!opts.shapeOnly) {
    if (external || tensor.has_raw_data()) {
      AsmResourceBlob blob;
      if (external) {
        FailureOr<AsmResourceBlob> b = externalBlob(tensor);
        if (failed(b))
          return failure();
        blob = std::move(*b);
      } else {
        const std::string &raw = tensor.raw_data();
        blob = HeapAsmResourceBlob::allocateAndCopyWithAlign(
            ArrayRef<char>(raw.data(), raw.size()), 16);
      }
      int64_t expected = type->getNumElements() *
                         (type->getElementType().getIntOrFloatBitWidth() / 8);
      if ((int64_t)blob.getData().size() != expected)
        return emit() << "holds " << blob.getData().size() << " bytes, expected "
                      << expected << " for " << *type;
      // Resource keys must be identifiers: "0.weight" -> "w_0_weight".
      std::string key = llvm::isAlpha(tensor.name().front()) ? "" : "w_";
      for (char c : tensor.name())
        key += llvm::isAlnum(c) ? c : '_';
      value = DenseResourceElementsAttr::get(*type, key, std::move(blob));
    } else {
      FailureOr<DenseElementsAttr> v = denseFromTensor(tensor, *type, emit);
      if (failed(v))
        return failure();
      value = *v;
    }
  }
  OpBuilder::InsertionGuard g(builder);
  builder.setInsertionPoint(func);
  auto var = builder.create<graph::VariableOp>(
      NameLoc::get(builder.getStringAttr(tensor.name()), fileLoc),
      builder.getStringAttr(tensor.name()), TypeAttr::get(*type), value,
      /*frozen=*/nullptr);
  if (auto kind = nonParameters.find(tensor.name()); kind != nonParameters.end())
    var->setAttr("graph.torch_kind", builder.getStringAttr(kind->second));
  variables[tensor.name()] = var;
  return success();
}

/// The value named `name`; `user` (a node or "graph output") names the
/// reader in the error.
FailureOr<ImportedValue> ModelImporter::lookup(StringRef name, Location loc,
                                               StringRef user) {
  for (auto &scope : llvm::reverse(scopes)) {
    auto it = scope.find(name);
    if (it != scope.end())
      return it->second;
  }
  if (graph::VariableOp var = variables.lookup(name)) {
    OpBuilder::InsertionGuard g(builder);
    builder.setInsertionPointToStart(&func.getBody().front());
    Value read = builder.create<graph::ReadVariableOp>(
        var.getLoc(), var.getType(), FlatSymbolRefAttr::get(var.getSymNameAttr()));
    scopes.front()[name] = ImportedValue::ofTensor(read);
    return ImportedValue::ofTensor(read);
  }
  auto it = unboundOutputs.find(name);
  if (it != unboundOutputs.end())
    return error(loc) << user << ": value '" << name << "' is an output of " << it->second
                      << " that the importer does not produce";
  return error(loc) << user << ": value '" << name
                    << "' is not defined by an earlier node, an initializer or a graph "
                       "input (dangling name, cycle, or nodes out of topological order)";
}

/// Runs `fn`, prefixing the errors that shape inference and verifiers emit
/// (which know the op, not the ONNX node) with `what`, the node's name.
static LogicalResult importWithNodeName(function_ref<LogicalResult()> fn,
                                        NodeImporter &importer, StringRef what) {
  MLIRContext *ctx = importer.ctx();
  std::string prefix = importer.proto().op_type() + " node '";
  bool reemitting = false;
  ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &diag) -> LogicalResult {
    if (reemitting || diag.getSeverity() != DiagnosticSeverity::Error)
      return failure();
    std::string msg = diag.str();
    // Already names this node, or a node of a subgraph it imports ("Add node
    // 'loop/body@3/add': ..."): pass it on unchanged.
    auto [head, rest] = StringRef(msg).split(" node '");
    if (StringRef(msg).starts_with(prefix) ||
        (!rest.empty() && !head.empty() && llvm::all_of(head, llvm::isAlnum)))
      return failure();
    reemitting = true;
    InFlightDiagnostic named = emitError(diag.getLocation()) << what << ": " << msg;
    for (Diagnostic &note : diag.getNotes())
      named.attachNote(note.getLocation()) << note.str();
    named.report();
    reemitting = false;
    return success();
  });
  return fn();
}

LogicalResult ModelImporter::importNode(const onnx::NodeProto &node, size_t index) {
  std::string nodeName = namePrefix + (node.name().empty()
                                          ? node.op_type() + "_" + std::to_string(index)
                                          : node.name());
  Location loc = NameLoc::get(builder.getStringAttr(nodeName), fileLoc);
  std::string what = node.op_type() + " node '" + nodeName + "'";
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    return error(loc) << what << ": domain '" << node.domain() << "' is not supported";
  StringRef op = node.op_type();
  // Ops with subgraphs or sequence/optional values first (ImportStructured.h).
  StructuredImportFn structured = structuredRegistry().lookup(op, opset);
  ImportFn fn = structured ? nullptr : opRegistry().lookup(op, opset);
  if (!fn && !structured)
    return error(loc) << what << ": op '" << op << "' (opset " << opset
                      << ") is not supported";
  ImportedValues inputs;
  SmallVector<Value> tensors;
  for (const std::string &in : node.input()) {
    if (in.empty()) {
      inputs.emplace_back();
      tensors.push_back(nullptr);
      continue;
    }
    FailureOr<ImportedValue> v = lookup(in, loc, what);
    if (failed(v))
      return failure();
    if (!v->isTensor() && !structured)
      return error(loc) << what << ": input '" << in << "' is a " << v->kindName()
                        << ", but " << op << " takes tensors";
    inputs.push_back(*v);
    tensors.push_back(v->tensor);
  }
  NodeImporter importer(builder, node, loc, opset, std::move(tensors));
  ImportedValues results;
  if (structured) {
    StructuredNode snode(importer, inputs, *this);
    if (failed(importWithNodeName([&] { return structured(snode); }, importer, what)))
      return failure();
    results = std::move(snode.results);
  } else {
    if (failed(importWithNodeName([&] { return fn(importer); }, importer, what)))
      return failure();
    for (Value v : importer.results())
      results.push_back(ImportedValue::ofTensor(v));
  }
  for (auto [i, v] : llvm::enumerate(results)) {
    auto type = v.isTensor() ? dyn_cast<RankedTensorType>(v.tensor.getType()) : nullptr;
    if (type && !fitsElementLimit(type.getShape()))
      return error(loc) << what << ": output " << i << " would have more than 2^48 elements";
  }
  for (auto [i, out] : llvm::enumerate(node.output())) {
    if (out.empty())
      continue;
    if (scopes.back().count(out) || (scopes.size() == 1 && variables.count(out)))
      return error(loc) << what << ": output '" << out << "' is already defined";
    if (i < results.size())
      scopes.back()[out] = results[i];
    else
      unboundOutputs[out] = what + " (output " + std::to_string(i) + ")";
  }
  return success();
}

LogicalResult ModelImporter::finish(const onnx::GraphProto &graph) {
  SmallVector<Value> results;
  for (const onnx::ValueInfoProto &out : graph.output()) {
    FailureOr<ImportedValue> v = lookup(out.name(), fileLoc, "graph output");
    if (failed(v))
      return failure();
    if (!v->isTensor())
      return error() << "graph output '" << out.name() << "' is a " << v->kindName()
                     << ": a static program returns tensors";
    results.push_back(v->tensor);
  }
  if (results.empty())
    return error() << "graph has no outputs";
  builder.setInsertionPointToEnd(&func.getBody().front());
  builder.create<func::ReturnOp>(fileLoc, results);
  SmallVector<Type> types;
  for (Value v : results)
    types.push_back(v.getType());
  func.setType(builder.getFunctionType(func.getArgumentTypes(), types));
  for (auto [i, out] : llvm::enumerate(graph.output()))
    func.setResultAttr(i, "graph.name", builder.getStringAttr(out.name()));
  return success();
}

LogicalResult ModelImporter::declareSubgraphInitializer(const onnx::TensorProto &tensor) {
  auto emit = [&] { return error() << "subgraph initializer '" << tensor.name() << "': "; };
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL)
    return emit() << "external data is not supported in subgraphs";
  FailureOr<RankedTensorType> type = tensorTypeOf(ctx, tensor, emit);
  if (failed(type))
    return failure();
  FailureOr<DenseElementsAttr> value = denseFromTensor(tensor, *type, emit);
  if (failed(value))
    return failure();
  scopes.back()[tensor.name()] = ImportedValue::ofTensor(builder.create<graph::ConstantOp>(
      NameLoc::get(builder.getStringAttr(namePrefix + tensor.name()), fileLoc), *value));
  return success();
}

FailureOr<ImportedValues> ModelImporter::importGraph(const onnx::GraphProto &graph,
                                                     ArrayRef<ImportedValue> args,
                                                     StringRef prefix) {
  if ((size_t)graph.input_size() != args.size())
    return error() << "subgraph '" << prefix << "' declares " << graph.input_size()
                   << " inputs, " << args.size() << " are given";
  scopes.emplace_back();
  std::string outerPrefix = std::exchange(namePrefix, prefix.str());
  auto restore = llvm::make_scope_exit([&] {
    scopes.pop_back();
    namePrefix = outerPrefix;
  });
  for (auto [in, arg] : llvm::zip(graph.input(), args))
    scopes.back()[in.name()] = arg;
  for (const onnx::TensorProto &t : graph.initializer())
    if (failed(declareSubgraphInitializer(t)))
      return failure();
  for (auto [i, node] : llvm::enumerate(graph.node()))
    if (failed(importNode(node, i)))
      return failure();
  ImportedValues outputs;
  for (const onnx::ValueInfoProto &out : graph.output()) {
    FailureOr<ImportedValue> v = lookup(out.name(), fileLoc, "subgraph output");
    if (failed(v))
      return failure();
    outputs.push_back(*v);
  }
  return outputs;
}

OwningOpRef<ModuleOp> ModelImporter::run(const onnx::ModelProto &model) {
  if (!model.has_graph()) {
    error() << "model has no graph";
    return nullptr;
  }
  if (failed(readOpset(model)))
    return nullptr;
  checkTorchExportParameters(model, fileLoc);
  nonParameters = torchNonParameters(model);
  const onnx::GraphProto &graph = model.graph();
  if (graph.sparse_initializer_size() > 0) {
    error() << "sparse initializers are not supported";
    return nullptr;
  }
  module = ModuleOp::create(fileLoc);
  module->getOperation()->setAttr("graph.opset", builder.getI64IntegerAttr(opset));
  if (!graph.name().empty())
    module->setSymName(graph.name());
  if (failed(createFunction(graph)))
    return nullptr;
  for (const onnx::TensorProto &t : graph.initializer())
    if (failed(declareInitializer(t)))
      return nullptr;
  for (auto [i, node] : llvm::enumerate(graph.node()))
    if (failed(importNode(node, i)))
      return nullptr;
  if (failed(finish(graph)) || failed(graph::refineFunction(func)) ||
      failed(mlir::verify(*module)))
    return nullptr;
  return std::move(module);
}

static bool isTextPath(StringRef path) {
  return path.ends_with(".pbtxt") || path.ends_with(".textproto") ||
         path.ends_with(".onnxtxt") || path.ends_with(".txt");
}

OwningOpRef<ModuleOp> strait::importONNXBuffer(StringRef buffer, StringRef path,
                                               MLIRContext *ctx,
                                               const ONNXImportOptions &opts) {
  ctx->loadDialect<graph::GraphDialect, func::FuncDialect>();
  Location fileLoc = FileLineColLoc::get(ctx, path, 0, 0);
  onnx::ModelProto model;
  if (buffer.empty()) {
    emitError(fileLoc) << "'" << path << "' is empty";
    return nullptr;
  }
  if (opts.textFormat || isTextPath(path)) {
    if (!google::protobuf::TextFormat::ParseFromString(std::string(buffer), &model)) {
      emitError(fileLoc) << "'" << path << "' is not a valid text-format ONNX model";
      return nullptr;
    }
  } else {
    if (buffer.size() > (size_t)INT32_MAX) {
      emitError(fileLoc) << "'" << path
                         << "' is over 2 GiB: store the weights as external data";
      return nullptr;
    }
    google::protobuf::io::CodedInputStream stream(
        reinterpret_cast<const uint8_t *>(buffer.data()), (int)buffer.size());
    stream.SetTotalBytesLimit(INT32_MAX);
    stream.SetRecursionLimit(64);
    if (!model.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage()) {
      emitError(fileLoc) << "'" << path
                         << "' is not a valid ONNX model (truncated or corrupted protobuf)";
      return nullptr;
    }
  }
  ModelImporter importer(ctx, path, opts);
  return importer.run(model);
}

OwningOpRef<ModuleOp> strait::importONNXFile(StringRef path, MLIRContext *ctx,
                                             const ONNXImportOptions &opts) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf) {
    emitError(FileLineColLoc::get(ctx, path, 0, 0))
        << "cannot read '" << path << "': " << buf.getError().message();
    return nullptr;
  }
  return importONNXBuffer((*buf)->getBuffer(), path, ctx, opts);
}

SmallVector<StringRef> strait::supportedONNXOps() {
  SmallVector<StringRef> ops = opRegistry().opTypes();
  for (StringRef op : structuredRegistry().opTypes())
    if (!llvm::is_contained(ops, op))
      ops.push_back(op);
  llvm::sort(ops);
  return ops;
}
