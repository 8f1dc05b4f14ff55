//===- ImportStructured.h - Control flow, sequences, optionals --*- C++ -*-===//
//
// Private to the importer. Graph tensors have static shapes and the graph
// dialect has no control flow, so If, Loop, Scan and SequenceMap are resolved
// while importing (the taken branch, unrolled iterations), and ONNX sequences
// and optionals exist only here: a value of the importer (ImportedValue) is a
// tensor, a static-length list of tensors, or an optional that is present or
// not. None of them reaches the IR.
//
// Ops that read or produce such values, or own subgraphs, are "structured":
// their import functions see ImportedValues and can import a subgraph given
// values for its inputs (GraphImporter::importGraph, the one place that does).
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_LIB_TARGET_ONNX_IMPORTSTRUCTURED_H
#define STRAIT_LIB_TARGET_ONNX_IMPORTSTRUCTURED_H

#include "NodeImporter.h"

#include <memory>

namespace strait::onnximport {

/// A value while importing: a tensor, a sequence or an optional.
struct ImportedValue {
  enum class Kind { Tensor, Sequence, Optional };
  Kind kind = Kind::Tensor;
  /// Kind::Tensor.
  mlir::Value tensor;
  /// Kind::Sequence: the elements, in order.
  llvm::SmallVector<mlir::Value> elements;
  /// Kind::Optional: the contained value, null when the optional is empty.
  std::shared_ptr<ImportedValue> contained;

  static ImportedValue ofTensor(mlir::Value v) {
    ImportedValue r;
    r.tensor = v;
    return r;
  }
  static ImportedValue ofSequence(llvm::ArrayRef<mlir::Value> elements) {
    ImportedValue r;
    r.kind = Kind::Sequence;
    r.elements.assign(elements.begin(), elements.end());
    return r;
  }
  static ImportedValue ofOptional(const ImportedValue *v) {
    ImportedValue r;
    r.kind = Kind::Optional;
    if (v)
      r.contained = std::make_shared<ImportedValue>(*v);
    return r;
  }
  bool isTensor() const { return kind == Kind::Tensor; }
  /// "tensor", "sequence" or "optional" for messages.
  llvm::StringRef kindName() const;
};

using ImportedValues = llvm::SmallVector<ImportedValue, 2>;

/// Imports a (sub)graph into the current function: binds its formal inputs to
/// `args`, reads outer-scope names through the enclosing scopes, and returns
/// the values of its outputs. `prefix` starts the location names of its nodes
/// ("loop/body@3/") so that diagnostics name the iteration.
class GraphImporter {
public:
  virtual ~GraphImporter() = default;
  virtual mlir::FailureOr<ImportedValues> importGraph(const onnx::GraphProto &graph,
                                                      llvm::ArrayRef<ImportedValue> args,
                                                      llvm::StringRef prefix) = 0;
};

/// What a structured import function sees: the node (typed attributes,
/// error(), op creation through NodeImporter, whose tensor inputs are those
/// inputs that are tensors), its ImportedValue inputs and the graph importer.
class StructuredNode {
public:
  StructuredNode(NodeImporter &n, llvm::ArrayRef<ImportedValue> inputs,
                 GraphImporter &graphs)
      : n(n), inputs(inputs), graphs(graphs) {}

  NodeImporter &n;
  /// Input i, null when absent.
  const ImportedValue *input(size_t i) const {
    return i < inputs.size() && (inputs[i].tensor || !inputs[i].isTensor()) ? &inputs[i]
                                                                            : nullptr;
  }
  size_t numInputs() const { return inputs.size(); }
  /// Input i as a sequence, or an error naming it.
  mlir::FailureOr<llvm::ArrayRef<mlir::Value>> sequenceInput(size_t i, llvm::StringRef what);
  /// The graph attribute `name`, or an error.
  mlir::FailureOr<const onnx::GraphProto *> graphAttr(llvm::StringRef name);
  /// The node's location name ("loop"), the prefix of its subgraphs' nodes.
  std::string name() const;

  mlir::FailureOr<ImportedValues> importGraph(const onnx::GraphProto &graph,
                                              llvm::ArrayRef<ImportedValue> args,
                                              llvm::StringRef prefix) {
    return graphs.importGraph(graph, args, prefix);
  }

  mlir::LogicalResult setResults(llvm::ArrayRef<ImportedValue> values) {
    results.assign(values.begin(), values.end());
    return mlir::success();
  }
  ImportedValues results;

private:
  llvm::ArrayRef<ImportedValue> inputs;
  GraphImporter &graphs;
};

using StructuredImportFn = mlir::LogicalResult (*)(StructuredNode &);

/// (op type, since-version) -> structured import function, looked up before
/// the tensor registry (opRegistry).
class StructuredRegistry {
public:
  void add(llvm::StringRef opType, int sinceVersion, StructuredImportFn fn);
  StructuredImportFn lookup(llvm::StringRef opType, int64_t opset) const;
  llvm::SmallVector<llvm::StringRef> opTypes() const;

private:
  llvm::StringMap<llvm::SmallVector<std::pair<int, StructuredImportFn>, 2>> table;
};

void registerControlFlowImporters(StructuredRegistry &registry);
void registerSequenceImporters(StructuredRegistry &registry);

const StructuredRegistry &structuredRegistry();

/// The most iterations Loop, Scan and SequenceMap unroll (the graph grows
/// with each).
constexpr int64_t kMaxUnrolledIterations = 4096;

/// Stacks `parts` (equal types) along a new axis `axis` (in [0, rank]).
mlir::FailureOr<mlir::Value> stackTensors(NodeImporter &n, llvm::ArrayRef<mlir::Value> parts,
                                          int64_t axis);

} // namespace strait::onnximport

#endif // STRAIT_LIB_TARGET_ONNX_IMPORTSTRUCTURED_H
