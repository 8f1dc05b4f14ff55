//===- NodeImporter.h - Per-node import context -----------------*- C++ -*-===//
//
// Private to the importer: what one op-import function sees of its node
// (typed attribute reading with defaults, constant inputs, result binding)
// and the registry that maps (op type, since-version) to those functions.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_LIB_TARGET_ONNX_NODEIMPORTER_H
#define STRAIT_LIB_TARGET_ONNX_NODEIMPORTER_H

#include "strait/Dialect/Graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringMap.h"

#include "onnx/onnx_pb.h"

#include <optional>

namespace strait::onnximport {

/// Maps an ONNX TensorProto data type to an MLIR element type (null if not
/// supported) and its name for messages.
mlir::Type elementType(mlir::MLIRContext *ctx, int32_t onnxType);
llvm::StringRef dataTypeName(int32_t onnxType);

/// Converts a tensor held in the model (typed fields or raw_data) into a
/// dense attribute of `type`. External data is handled by the importer.
mlir::FailureOr<mlir::DenseElementsAttr>
denseFromTensor(const onnx::TensorProto &tensor, mlir::RankedTensorType type,
                llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

/// The tensor type of an initializer or Constant value; fails on negative
/// or overflowing dims and unsupported dtypes.
mlir::FailureOr<mlir::RankedTensorType>
tensorTypeOf(mlir::MLIRContext *ctx, const onnx::TensorProto &tensor,
             llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

using Values = llvm::SmallVector<mlir::Value, 2>;

class NodeImporter {
public:
  NodeImporter(mlir::OpBuilder &builder, const onnx::NodeProto &node,
               mlir::Location loc, int64_t opset, llvm::SmallVector<mlir::Value> inputs)
      : builder(builder), node(node), loc(loc), opset(opset),
        inputs(std::move(inputs)) {}

  mlir::OpBuilder &b() { return builder; }
  mlir::MLIRContext *ctx() { return builder.getContext(); }
  mlir::Location location() const { return loc; }
  int64_t opsetVersion() const { return opset; }
  const onnx::NodeProto &proto() const { return node; }

  /// An error at the node's location, prefixed with its op type.
  mlir::InFlightDiagnostic error();

  // Inputs. Absent optional inputs are null.
  size_t numInputs() const { return inputs.size(); }
  mlir::Value input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  mlir::FailureOr<mlir::Value> requiredInput(size_t i);
  mlir::TensorType inputType(size_t i) const;
  /// Constant value of input i (folded during import); fails with a message
  /// naming the input when it is not constant.
  mlir::FailureOr<mlir::DenseElementsAttr> constantInput(size_t i, llvm::StringRef what);
  mlir::FailureOr<llvm::SmallVector<int64_t>> constantInts(size_t i, llvm::StringRef what);
  std::optional<llvm::SmallVector<int64_t>> optionalConstantInts(size_t i);
  /// Number of outputs the node names (non-empty).
  size_t numUsedOutputs() const;

  // Typed attributes: a present attribute of the wrong type is an error.
  const onnx::AttributeProto *attr(llvm::StringRef name) const;
  mlir::FailureOr<int64_t> getInt(llvm::StringRef name, int64_t dflt);
  mlir::FailureOr<std::optional<int64_t>> getOptionalInt(llvm::StringRef name);
  mlir::FailureOr<float> getFloat(llvm::StringRef name, float dflt);
  mlir::FailureOr<std::optional<float>> getOptionalFloat(llvm::StringRef name);
  mlir::FailureOr<std::string> getString(llvm::StringRef name, llvm::StringRef dflt);
  mlir::FailureOr<llvm::SmallVector<int64_t>> getInts(llvm::StringRef name,
                                                      llvm::ArrayRef<int64_t> dflt = {});
  mlir::FailureOr<llvm::SmallVector<float>> getFloats(llvm::StringRef name);
  mlir::FailureOr<mlir::DenseElementsAttr> getTensor(llvm::StringRef name);
  /// Fails naming the first attribute not in `known` (catches typos and
  /// semantics this importer does not implement).
  mlir::LogicalResult checkAttributes(llvm::ArrayRef<llvm::StringRef> known);

  /// Creates op `OpTy` with result types inferred (a diagnostic on failure)
  /// and folds it if its operands are constant. Null operands are dropped.
  template <typename OpTy>
  mlir::FailureOr<Values> create(mlir::ValueRange operands,
                                           llvm::ArrayRef<mlir::NamedAttribute> attrs = {}) {
    return createNamed(OpTy::getOperationName(), operands, attrs);
  }
  mlir::FailureOr<Values> createNamed(llvm::StringRef opName,
                                                mlir::ValueRange operands,
                                                llvm::ArrayRef<mlir::NamedAttribute> attrs);
  /// Creates a graph.Constant holding `value`.
  mlir::Value constant(mlir::ElementsAttr value);

  /// Binds the node's outputs (in order) to `values`.
  mlir::LogicalResult setResults(mlir::ValueRange values);
  llvm::ArrayRef<mlir::Value> results() const { return outputs; }

  mlir::NamedAttribute named(llvm::StringRef name, mlir::Attribute value) {
    return builder.getNamedAttr(name, value);
  }
  mlir::Attribute i64(int64_t v) { return builder.getI64IntegerAttr(v); }
  mlir::Attribute f32(float v) { return builder.getF32FloatAttr(v); }
  mlir::Attribute i64s(llvm::ArrayRef<int64_t> v) { return builder.getDenseI64ArrayAttr(v); }

private:
  mlir::OpBuilder &builder;
  const onnx::NodeProto &node;
  mlir::Location loc;
  int64_t opset;
  llvm::SmallVector<mlir::Value> inputs;
  llvm::SmallVector<mlir::Value> outputs;
};

/// Creates OpTy (types inferred, folded) and binds its results as the node's.
template <typename OpTy>
mlir::LogicalResult emit(NodeImporter &n, mlir::ValueRange operands,
                         llvm::ArrayRef<mlir::NamedAttribute> attrs = {}) {
  mlir::FailureOr<Values> r = n.create<OpTy>(operands, attrs);
  return mlir::failed(r) ? mlir::failure() : n.setResults(*r);
}

using ImportFn = mlir::LogicalResult (*)(NodeImporter &);

/// (op type, since-version) -> import function; the entry with the largest
/// since-version not above the model's opset applies.
class OpRegistry {
public:
  void add(llvm::StringRef opType, int sinceVersion, ImportFn fn);
  /// The function for `opType` at `opset`, or null.
  ImportFn lookup(llvm::StringRef opType, int64_t opset) const;
  llvm::SmallVector<llvm::StringRef> opTypes() const;

private:
  llvm::StringMap<llvm::SmallVector<std::pair<int, ImportFn>, 2>> table;
};

void registerElementwiseImporters(OpRegistry &registry);
void registerNNImporters(OpRegistry &registry);
void registerTensorImporters(OpRegistry &registry);
void registerReductionImporters(OpRegistry &registry);
void registerRecurrentImporters(OpRegistry &registry);
void registerSignalImporters(OpRegistry &registry);
void registerUnpoolImporters(OpRegistry &registry);
void registerQuantizedImporters(OpRegistry &registry);
void registerDataDependentImporters(OpRegistry &registry);
void registerAttentionImporters(OpRegistry &registry);
void registerOpset18Importers(OpRegistry &registry);

/// The registry with every family registered (built once).
const OpRegistry &opRegistry();

} // namespace strait::onnximport

#endif // STRAIT_LIB_TARGET_ONNX_NODEIMPORTER_H
