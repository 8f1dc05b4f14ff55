//===- GradientUtils.h - Helpers shared by the gradient rules ---*- C++ -*-===//
//
// Gradient rules are external models of GradientOpInterface, one file per op
// family (Gradients<Family>.cpp). Each rule is a free function
//   LogicalResult rule(OpT op, GradBuilder &g, ValueRange dy,
//                      MutableArrayRef<Value> dx)
// attached with attachRule<OpT, rule>(ctx).
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_LIB_DIALECT_GRAPH_TRANSFORMS_GRADIENTUTILS_H
#define STRAIT_LIB_DIALECT_GRAPH_TRANSFORMS_GRADIENTUTILS_H

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Interfaces/GradientInterface.h"

namespace strait::graph::grad {

/// Builds the ops of one rule at the builder's insertion point.
struct GradBuilder {
  mlir::OpBuilder &b;
  mlir::Location loc;

  /// A rank-0 constant `v` with `like`'s element type (broadcasts).
  mlir::Value scalar(double v, mlir::Value like);
  /// A zero tensor of `type`.
  mlir::Value zeros(mlir::Type type);
  mlir::Value add(mlir::Value a, mlir::Value c);
  mlir::Value sub(mlir::Value a, mlir::Value c);
  mlir::Value mul(mlir::Value a, mlir::Value c);
  mlir::Value div(mlir::Value a, mlir::Value c);
  mlir::Value neg(mlir::Value a);
  mlir::Value mulScalar(mlir::Value a, double v) { return mul(a, scalar(v, a)); }
  /// Sums the broadcast dimensions of `grad` so that it gets `target`'s type.
  mlir::Value reduceTo(mlir::Value grad, mlir::Value target);
  /// Reshapes `grad` to `target`'s (static) shape.
  mlir::Value reshapeTo(mlir::Value grad, mlir::Value target);
  /// Swaps the last two dimensions.
  mlir::Value transposeLast2(mlir::Value a);

  template <typename OpT, typename... Args>
  OpT create(Args &&...args) {
    return b.create<OpT>(loc, std::forward<Args>(args)...);
  }
  template <typename OpT, typename... Args>
  mlir::Value make(Args &&...args) {
    return b.create<OpT>(loc, std::forward<Args>(args)...)->getResult(0);
  }
};

/// The static shape of a ranked tensor value.
llvm::ArrayRef<int64_t> shapeOf(mlir::Value v);

template <typename OpT>
using RuleFn = mlir::LogicalResult (*)(OpT, GradBuilder &, mlir::ValueRange,
                                       llvm::MutableArrayRef<mlir::Value>);

template <typename OpT, RuleFn<OpT> Rule>
struct RuleModel
    : GradientOpInterface::ExternalModel<RuleModel<OpT, Rule>, OpT> {
  mlir::LogicalResult buildGradients(mlir::Operation *op, mlir::OpBuilder &b,
                                     mlir::ValueRange dy,
                                     llvm::MutableArrayRef<mlir::Value> dx) const {
    GradBuilder g{b, op->getLoc()};
    return Rule(llvm::cast<OpT>(op), g, dy, dx);
  }
};

template <typename OpT, RuleFn<OpT> Rule>
void attachRule(mlir::MLIRContext *ctx) {
  OpT::template attachInterface<RuleModel<OpT, Rule>>(*ctx);
}

// One registration function per op family.
void registerAttentionGradients(mlir::MLIRContext *ctx);
void registerElementwiseGradients(mlir::MLIRContext *ctx);
void registerLinalgGradients(mlir::MLIRContext *ctx);
void registerNormalizationGradients(mlir::MLIRContext *ctx);
void registerReductionGradients(mlir::MLIRContext *ctx);
void registerConvGradients(mlir::MLIRContext *ctx);
void registerTensorGradients(mlir::MLIRContext *ctx);

} // namespace strait::graph::grad

#endif // STRAIT_LIB_DIALECT_GRAPH_TRANSFORMS_GRADIENTUTILS_H
