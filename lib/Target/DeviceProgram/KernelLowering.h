//===- KernelLowering.h - Graph ops to runtime kernels ----------*- C++ -*-===//

#ifndef STRAIT_LIB_TARGET_DEVICEPROGRAM_KERNELLOWERING_H
#define STRAIT_LIB_TARGET_DEVICEPROGRAM_KERNELLOWERING_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseMap.h"

#include "strait_program.pb.h"

namespace strait::exporter {

inline constexpr uint32_t kAbsentValue = 0xFFFFFFFF;

/// The runtime dtype of an element type (DTYPE_UNSPECIFIED if none).
program::DType dtypeOf(mlir::Type elementType);

/// Fills `data` with the elements of `attr` (splats expanded).
mlir::LogicalResult fillTensorData(mlir::ElementsAttr attr, program::TensorData &data);

/// Value table of one program under construction.
class ValueTable {
public:
  explicit ValueTable(program::Program &p) : program(p) {}
  /// The id of `v`, adding it with `role` if new.
  uint32_t get(mlir::Value v, program::ValueRole role, llvm::StringRef name = "");
  std::optional<uint32_t> lookup(mlir::Value v) const;
  /// Makes `v` another name of value `id` (an in-place result).
  void alias(mlir::Value v, uint32_t id) { ids[v] = id; }
  /// Forgets `v` (the next get() makes a new value for it).
  void erase(mlir::Value v) { ids.erase(v); }
  /// A constant value holding `attr`.
  uint32_t constant(mlir::ElementsAttr attr, llvm::StringRef name);
  /// An int64 constant of shape [n] (or a scalar when `scalar`).
  uint32_t constInts(llvm::ArrayRef<int64_t> v, bool scalar = false);
  /// A scalar constant of element type `elt` holding `v`.
  uint32_t constScalar(mlir::Type elt, double v);
  program::Value &at(uint32_t id) { return *program.mutable_values(id); }

private:
  program::Program &program;
  llvm::DenseMap<mlir::Value, uint32_t> ids;
};

/// Fills `kernel` (op, inputs, outputs, attributes in the ONNX opset-18 form
/// the runtime reads) from graph op `op`.
mlir::LogicalResult lowerToKernel(mlir::Operation *op, ValueTable &values,
                                  program::Kernel &kernel);

} // namespace strait::exporter

#endif // STRAIT_LIB_TARGET_DEVICEPROGRAM_KERNELLOWERING_H
