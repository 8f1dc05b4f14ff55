//===- GradientInterface.td - Reverse-mode gradient rules --*- tablegen -*-===//
//
// The op interface through which graph-build-training-step differentiates an
// op. Rules are attached to the graph dialect's ops as external models (one
// file per op family under lib/Dialect/Graph/Transforms/Gradients*.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_INTERFACES_GRADIENTINTERFACE_TD
#define STRAIT_INTERFACES_GRADIENTINTERFACE_TD

include "mlir/IR/OpBase.td"

def GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let description = [{
    The reverse-mode (vector-Jacobian product) rule of an op. Given the
    gradients of the loss with respect to each result (never null: the
    builder passes zeros for results that do not reach the loss), the rule
    builds, at the builder's insertion point, ops computing the gradient with
    respect to each operand. It fills `operandGrads` (one entry per operand,
    already sized; null = no gradient, e.g. indices or shapes). Forward values
    a rule needs (activations) are referenced directly as SSA values; the
    training-step builder tags every op a rule creates with the forward op's
    id. A rule returns failure after a diagnostic at the op when it cannot
    differentiate a configuration (e.g. a dynamic shape).
  }];
  let cppNamespace = "::strait";
  let methods = [
    InterfaceMethod<"Builds the gradients of the operands.",
      "::llvm::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$resultGrads,
           "::llvm::MutableArrayRef<::mlir::Value>":$operandGrads)>,
    InterfaceMethod<[{Whether a gradient can flow into operand `index`
      (default: floating-point tensors). Integer indices, shapes and masks
      are not differentiable, so they never make an op active.}],
      "bool", "isDifferentiableOperand", (ins "unsigned":$index), [{}], [{
        return ::strait::detail::isFloatTensor(
            $_op->getOperand(index).getType());
      }]>,
  ];
}

#endif // STRAIT_INTERFACES_GRADIENTINTERFACE_TD
