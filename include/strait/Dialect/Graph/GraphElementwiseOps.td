//===- GraphElementwiseOps.td - Elementwise graph ops ------*- tablegen -*-===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHELEMENTWISEOPS_TD
#define STRAIT_DIALECT_GRAPH_GRAPHELEMENTWISEOPS_TD

include "strait/Dialect/Graph/GraphBase.td"

//===----------------------------------------------------------------------===//
// Unary, no attributes.
//===----------------------------------------------------------------------===//

def Graph_AbsOp : Graph_UnaryOp<"Abs", "absolute value">;
def Graph_AcosOp : Graph_UnaryOp<"Acos", "arc cosine">;
def Graph_AcoshOp : Graph_UnaryOp<"Acosh", "inverse hyperbolic cosine">;
def Graph_AsinOp : Graph_UnaryOp<"Asin", "arc sine">;
def Graph_AsinhOp : Graph_UnaryOp<"Asinh", "inverse hyperbolic sine">;
def Graph_AtanOp : Graph_UnaryOp<"Atan", "arc tangent">;
def Graph_AtanhOp : Graph_UnaryOp<"Atanh", "inverse hyperbolic tangent">;
def Graph_CeilOp : Graph_UnaryOp<"Ceil", "round up"> {
  let hasFolder = 1;
}
def Graph_CosOp : Graph_UnaryOp<"Cos", "cosine">;
def Graph_CoshOp : Graph_UnaryOp<"Cosh", "hyperbolic cosine">;
def Graph_ErfOp : Graph_UnaryOp<"Erf", "Gauss error function">;
def Graph_ExpOp : Graph_UnaryOp<"Exp", "exponential">;
def Graph_FloorOp : Graph_UnaryOp<"Floor", "round down"> {
  let hasFolder = 1;
}
def Graph_HardSwishOp : Graph_UnaryOp<"HardSwish", "x * max(0, min(1, x/6 + 1/2))">;
def Graph_LogOp : Graph_UnaryOp<"Log", "natural logarithm">;
def Graph_MishOp : Graph_UnaryOp<"Mish", "x * tanh(softplus(x))">;
def Graph_NegOp : Graph_UnaryOp<"Neg", "negation"> {
  let hasFolder = 1;
}
def Graph_NotOp : Graph_UnaryOp<"Not", "logical not"> {
  let hasFolder = 1;
}
def Graph_ReciprocalOp : Graph_UnaryOp<"Reciprocal", "1 / x">;
def Graph_ReluOp : Graph_UnaryOp<"Relu", "max(x, 0)"> {
  let hasFolder = 1;
}
def Graph_RoundOp : Graph_UnaryOp<"Round", "round half to even">;
def Graph_SigmoidOp : Graph_UnaryOp<"Sigmoid", "logistic function">;
def Graph_SignOp : Graph_UnaryOp<"Sign", "sign of x">;
def Graph_SinOp : Graph_UnaryOp<"Sin", "sine">;
def Graph_SinhOp : Graph_UnaryOp<"Sinh", "hyperbolic sine">;
def Graph_SoftplusOp : Graph_UnaryOp<"Softplus", "log(exp(x) + 1)">;
def Graph_SoftsignOp : Graph_UnaryOp<"Softsign", "x / (1 + |x|)">;
def Graph_SqrtOp : Graph_UnaryOp<"Sqrt", "square root">;
def Graph_TanOp : Graph_UnaryOp<"Tan", "tangent">;
def Graph_TanhOp : Graph_UnaryOp<"Tanh", "hyperbolic tangent">;

//===----------------------------------------------------------------------===//
// Unary with attributes.
//===----------------------------------------------------------------------===//

def Graph_CeluOp : Graph_UnaryOp<"Celu", "continuously differentiable ELU"> {
  let arguments = (ins AnyTensor:$X, DefaultValuedAttr<F32Attr, "1.0">:$alpha);
}
def Graph_EluOp : Graph_UnaryOp<"Elu", "exponential linear unit"> {
  let arguments = (ins AnyTensor:$X, DefaultValuedAttr<F32Attr, "1.0">:$alpha);
}
def Graph_GeluOp : Graph_UnaryOp<"Gelu", "Gaussian error linear unit"> {
  let arguments = (ins AnyTensor:$X,
      DefaultValuedAttr<Graph_GeluApproxAttr, "GeluApprox::none">:$approximate);
}
def Graph_HardSigmoidOp : Graph_UnaryOp<"HardSigmoid", "max(0, min(1, alpha*x + beta))"> {
  let arguments = (ins AnyTensor:$X, DefaultValuedAttr<F32Attr, "0.2">:$alpha,
                   DefaultValuedAttr<F32Attr, "0.5">:$beta);
}
def Graph_LeakyReluOp : Graph_UnaryOp<"LeakyRelu", "x >= 0 ? x : alpha * x"> {
  let arguments = (ins AnyTensor:$X, DefaultValuedAttr<F32Attr, "0.01">:$alpha);
}
def Graph_SeluOp : Graph_UnaryOp<"Selu", "scaled exponential linear unit"> {
  let arguments = (ins AnyTensor:$X,
                   DefaultValuedAttr<F32Attr, "1.67326319217681884765625">:$alpha,
                   DefaultValuedAttr<F32Attr, "1.05070102214813232421875">:$gamma);
}
def Graph_ThresholdedReluOp : Graph_UnaryOp<"ThresholdedRelu", "x > alpha ? x : 0"> {
  let arguments = (ins AnyTensor:$X, DefaultValuedAttr<F32Attr, "1.0">:$alpha);
}
def Graph_ShrinkOp : Graph_UnaryOp<"Shrink", "x < -lambd ? x + bias : x > lambd ? x - bias : 0"> {
  let arguments = (ins AnyTensor:$X, DefaultValuedAttr<F32Attr, "0.5">:$lambd,
                   DefaultValuedAttr<F32Attr, "0.0">:$bias);
}
def Graph_ClipOp : Graph_UnaryOp<"Clip", "clamp to [min, max]"> {
  let description = [{
    ONNX `Clip`; the bounds (inputs since opset 11) are folded to attributes.
    A missing bound does not clamp.

    ```mlir
    %y = graph.Clip %x {max = 6.0 : f32, min = 0.0 : f32} : tensor<4xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, OptionalAttr<F64Attr>:$min,
                   OptionalAttr<F64Attr>:$max);
}
def Graph_DropoutOp : Graph_UnaryOp<"Dropout", "random zeroing in training"> {
  let description = [{
    ONNX `Dropout` (the mask output is not supported). Identity at inference;
    the training-step builder decides whether it drops.

    ```mlir
    %y = graph.Dropout %x {ratio = 1.0e-01 : f32} : tensor<4xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, DefaultValuedAttr<F32Attr, "0.5">:$ratio);
}

def Graph_IsNaNOp : Graph_GenericOp<"IsNaN", [Pure]> {
  let summary = "true where x is NaN";
  let description = [{
    ```mlir
    %b = graph.IsNaN %x : (tensor<3xf32>) -> tensor<3xi1>
    ```
  }];
  let arguments = (ins AnyTensor:$X);
  let results = (outs AnyTensor:$Y);
}
def Graph_IsInfOp : Graph_GenericOp<"IsInf", [Pure]> {
  let summary = "true where x is infinite";
  let description = [{
    ```mlir
    %b = graph.IsInf %x {detect_negative = 1, detect_positive = 1} : (tensor<3xf32>) -> tensor<3xi1>
    ```
  }];
  let arguments = (ins AnyTensor:$X, DefaultValuedAttr<I64Attr, "1">:$detect_negative,
                   DefaultValuedAttr<I64Attr, "1">:$detect_positive);
  let results = (outs AnyTensor:$Y);
}
def Graph_CastOp : Graph_GenericOp<"Cast", [Pure]> {
  let summary = "element type conversion";
  let description = [{
    ONNX `Cast` (and `CastLike`, which the importer turns into `Cast`).

    ```mlir
    %y = graph.Cast %x {to = f16} : (tensor<3xf32>) -> tensor<3xf16>
    ```
  }];
  let arguments = (ins AnyTensor:$input, TypeAttr:$to);
  let results = (outs AnyTensor:$output);
  let hasFolder = 1;
}

def Graph_QuantizeLinearOp : Graph_GenericOp<"QuantizeLinear", [Pure]> {
  let summary = "saturate(round(x / scale) + zero_point)";
  let description = [{
    Per-tensor (scalar scale) or per-axis (1-D scale along `axis`)
    quantization; the result element type is `to` (the zero point's type,
    uint8 by default).

    ```mlir
    %q = graph.QuantizeLinear %x, %s, %z {axis = 1 : i64, to = ui8} : (tensor<2x3xf32>, tensor<f32>, tensor<ui8>) -> tensor<2x3xui8>
    ```
  }];
  let arguments = (ins AnyTensor:$x, AnyTensor:$y_scale, Optional<AnyTensor>:$y_zero_point,
                   DefaultValuedAttr<I64Attr, "1">:$axis, TypeAttr:$to);
  let results = (outs AnyTensor:$y);
}
def Graph_DequantizeLinearOp : Graph_GenericOp<"DequantizeLinear", [Pure]> {
  let summary = "(x - zero_point) * scale";
  let description = [{
    The result has x's shape and the scale's element type.

    ```mlir
    %y = graph.DequantizeLinear %q, %s, %z {axis = 1 : i64} : (tensor<2x3xui8>, tensor<f32>, tensor<ui8>) -> tensor<2x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$x, AnyTensor:$x_scale, Optional<AnyTensor>:$x_zero_point,
                   DefaultValuedAttr<I64Attr, "1">:$axis);
  let results = (outs AnyTensor:$y);
}

//===----------------------------------------------------------------------===//
// Random tensors (the seed, when given, makes them reproducible).
//===----------------------------------------------------------------------===//

def Graph_RandomUniformLikeOp : Graph_GenericOp<"RandomUniformLike", []> {
  let summary = "uniform samples in [low, high) of the input's shape";
  let description = [{
    ONNX `RandomUniformLike`, and `RandomUniform` whose shape the importer
    turns into a constant input. The result element type is `dtype`.

    ```mlir
    %r = graph.RandomUniformLike %x {dtype = f32, high = 1.0 : f32, low = 0.0 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, TypeAttr:$dtype,
                   DefaultValuedAttr<F32Attr, "1.0">:$high,
                   DefaultValuedAttr<F32Attr, "0.0">:$low, OptionalAttr<F32Attr>:$seed);
  let results = (outs AnyTensor:$output);
}
def Graph_RandomNormalLikeOp : Graph_GenericOp<"RandomNormalLike", []> {
  let summary = "normal samples of the input's shape";
  let description = [{
    ONNX `RandomNormalLike` (and `RandomNormal`, as for RandomUniformLike).

    ```mlir
    %r = graph.RandomNormalLike %x {dtype = f32, mean = 0.0 : f32, scale = 1.0 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, TypeAttr:$dtype,
                   DefaultValuedAttr<F32Attr, "0.0">:$mean,
                   DefaultValuedAttr<F32Attr, "1.0">:$scale, OptionalAttr<F32Attr>:$seed);
  let results = (outs AnyTensor:$output);
}
def Graph_BernoulliOp : Graph_GenericOp<"Bernoulli", []> {
  let summary = "1 with probability input[i], else 0";
  let description = [{
    ```mlir
    %r = graph.Bernoulli %p {dtype = f32} : (tensor<4xf32>) -> tensor<4xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, TypeAttr:$dtype, OptionalAttr<F32Attr>:$seed);
  let results = (outs AnyTensor:$output);
}

//===----------------------------------------------------------------------===//
// Binary with broadcasting.
//===----------------------------------------------------------------------===//

def Graph_AddOp : Graph_BroadcastOp<"Add", "addition", "inferBroadcastSame", [Commutative]> {
  let hasFolder = 1;
}
def Graph_SubOp : Graph_BroadcastOp<"Sub", "subtraction", "inferBroadcastSame"> {
  let hasFolder = 1;
}
def Graph_MulOp : Graph_BroadcastOp<"Mul", "multiplication", "inferBroadcastSame", [Commutative]> {
  let hasFolder = 1;
}
def Graph_DivOp : Graph_BroadcastOp<"Div", "division (integer: truncation)", "inferBroadcastSame"> {
  let hasFolder = 1;
}
def Graph_PowOp : Graph_BroadcastOp<"Pow", "A to the power B", "inferBroadcastSame"> {
  let hasFolder = 1;
}
def Graph_ModOp : Graph_BroadcastOp<"Mod", "remainder", "inferBroadcastSame"> {
  let arguments = (ins AnyTensor:$A, AnyTensor:$B, DefaultValuedAttr<I64Attr, "0">:$fmod);
  let hasFolder = 1;
}
def Graph_PReluOp : Graph_BroadcastOp<"PRelu", "x >= 0 ? x : slope * x", "inferBroadcastSame"> {
  let arguments = (ins AnyTensor:$A, AnyTensor:$B);
}
def Graph_BitShiftOp : Graph_BroadcastOp<"BitShift", "unsigned shift of A by B bits",
                                         "inferBroadcastSame"> {
  let arguments = (ins AnyTensor:$A, AnyTensor:$B,
                   Graph_ShiftDirectionAttr:$direction);
}
def Graph_AndOp : Graph_BroadcastOp<"And", "logical and", "inferBroadcastSame", [Commutative]> {
  let hasFolder = 1;
}
def Graph_OrOp : Graph_BroadcastOp<"Or", "logical or", "inferBroadcastSame", [Commutative]> {
  let hasFolder = 1;
}
def Graph_XorOp : Graph_BroadcastOp<"Xor", "logical xor", "inferBroadcastSame", [Commutative]> {
  let hasFolder = 1;
}
def Graph_BitwiseAndOp : Graph_BroadcastOp<"BitwiseAnd", "bitwise and of integers (bool: logical)",
                                           "inferBroadcastSame", [Commutative]>;
def Graph_BitwiseOrOp : Graph_BroadcastOp<"BitwiseOr", "bitwise or of integers (bool: logical)",
                                          "inferBroadcastSame", [Commutative]>;
def Graph_BitwiseXorOp : Graph_BroadcastOp<"BitwiseXor", "bitwise xor of integers (bool: logical)",
                                           "inferBroadcastSame", [Commutative]>;
def Graph_BitwiseNotOp : Graph_UnaryOp<"BitwiseNot", "bitwise complement of integers (bool: logical not)">;
def Graph_EqualOp : Graph_BroadcastOp<"Equal", "A == B", "inferBroadcastBool", [Commutative]> {
  let hasFolder = 1;
}
def Graph_LessOp : Graph_BroadcastOp<"Less", "A < B", "inferBroadcastBool"> {
  let hasFolder = 1;
}
def Graph_LessOrEqualOp : Graph_BroadcastOp<"LessOrEqual", "A <= B", "inferBroadcastBool"> {
  let hasFolder = 1;
}
def Graph_GreaterOp : Graph_BroadcastOp<"Greater", "A > B", "inferBroadcastBool"> {
  let hasFolder = 1;
}
def Graph_GreaterOrEqualOp : Graph_BroadcastOp<"GreaterOrEqual", "A >= B", "inferBroadcastBool"> {
  let hasFolder = 1;
}

def Graph_WhereOp : Graph_GenericOp<"Where", [Pure]> {
  let summary = "select X where condition, else Y";
  let description = [{
    ```mlir
    %r = graph.Where %c, %x, %y : (tensor<4xi1>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$condition, AnyTensor:$X, AnyTensor:$Y);
  let results = (outs AnyTensor:$output);
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Variadic with broadcasting.
//===----------------------------------------------------------------------===//

class Graph_VariadicOp<string mnemonic, string summaryText>
    : Graph_Op<mnemonic, [Pure, InferTypeOpAdaptor]> {
  let summary = summaryText;
  let description = [{
    ONNX `}] # mnemonic # [{` over one or more operands broadcast together.

    ```mlir
    %r = graph.}] # mnemonic # [{ %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyTensor>:$data_0);
  let results = (outs AnyTensor:$result);
  let assemblyFormat = "$data_0 attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = Graph_InferVia<"inferVariadicBroadcast">.inferDef;
}
def Graph_MaxOp : Graph_VariadicOp<"Max", "elementwise maximum">;
def Graph_MinOp : Graph_VariadicOp<"Min", "elementwise minimum">;
def Graph_MeanOp : Graph_VariadicOp<"Mean", "elementwise mean">;
def Graph_SumOp : Graph_VariadicOp<"Sum", "elementwise sum">;

#endif // STRAIT_DIALECT_GRAPH_GRAPHELEMENTWISEOPS_TD
