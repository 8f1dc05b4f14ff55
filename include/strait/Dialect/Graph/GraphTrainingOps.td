//===- GraphTrainingOps.td - Ops of the training step ------*- tablegen -*-===//
//
// Ops that graph-build-training-step adds to a forward graph: fused gradient
// ops (runtime kernels "<Op>Grad" in domain "strait"), batch-statistics
// normalization, the micro-batch gradient accumulator, gradient clipping,
// optimizer updates and variable assignment. Semantics: docs/training.md.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHTRAININGOPS_TD
#define STRAIT_DIALECT_GRAPH_GRAPHTRAININGOPS_TD

include "strait/Dialect/Graph/GraphBase.td"
include "mlir/IR/OpAsmInterface.td"

// Gradient op whose single result has the type of its first operand.
class Graph_SameAsFirstGradOp<string mnemonic, list<Trait> traits = []>
    : Graph_GenericOp<mnemonic, traits # [Pure]> {
  let extraClassDefinition = Graph_InferVia<"inferSameAsFirst">.inferDef;
}

//===----------------------------------------------------------------------===//
// Broadcast reduction.
//===----------------------------------------------------------------------===//

def Graph_ReduceToShapeOp : Graph_GenericOp<"ReduceToShape", [Pure]> {
  let summary = "sum a broadcast gradient back to an operand's shape";
  let description = [{
    The adjoint of numpy broadcasting: sums `input` over the leading
    dimensions that `shape` lacks and over the dimensions where `shape` is 1
    and `input` is not, then gives the result the rank of `shape`. `shape`
    must broadcast to the input's shape (constraint T1).

    ```mlir
    %db = graph.ReduceToShape %dy {shape = array<i64: 768>} : (tensor<8x128x768xf32>) -> tensor<768xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs AnyTensor:$output);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fused gradients of single ops.
//===----------------------------------------------------------------------===//

def Graph_SoftmaxGradOp : Graph_SameAsFirstGradOp<"SoftmaxGrad",
    [AllTypesMatch<["dY", "Y"]>]> {
  let summary = "gradient of Softmax from its output";
  let description = [{
    dX = Y * (dY - sum(dY * Y, axis)).

    ```mlir
    %dx = graph.SoftmaxGrad %dy, %y {axis = -1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$dY, AnyTensor:$Y,
                   DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs AnyTensor:$dX);
}

def Graph_LogSoftmaxGradOp : Graph_SameAsFirstGradOp<"LogSoftmaxGrad",
    [AllTypesMatch<["dY", "Y"]>]> {
  let summary = "gradient of LogSoftmax from its output";
  let description = [{
    dX = dY - exp(Y) * sum(dY, axis).

    ```mlir
    %dx = graph.LogSoftmaxGrad %dy, %y {axis = -1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$dY, AnyTensor:$Y,
                   DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs AnyTensor:$dX);
}

def Graph_GeluGradOp : Graph_SameAsFirstGradOp<"GeluGrad",
    [AllTypesMatch<["dY", "X"]>]> {
  let summary = "gradient of Gelu from its input";
  let description = [{
    dX = dY * Gelu'(X) for the exact (erf) or tanh approximation.

    ```mlir
    %dx = graph.GeluGrad %dy, %x {approximate = #graph.gelu_approx<tanh>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$dY, AnyTensor:$X,
      DefaultValuedAttr<Graph_GeluApproxAttr, "GeluApprox::none">:$approximate);
  let results = (outs AnyTensor:$dX);
}

def Graph_LayerNormalizationGradOp
    : Graph_GenericOp<"LayerNormalizationGrad", [Pure]> {
  let summary = "gradient of LayerNormalization";
  let description = [{
    Recomputes the mean and inverse standard deviation of X over the dims
    from `axis` and returns dX, dScale and dB (dX has X's type, dScale and dB
    Scale's; dB is returned even when the forward op had no bias). dY has X's
    type, or for an f32 X also X's shape in bf16 / f16: the kernels widen
    each element on load (exact), so the results are those of the f32 op on
    Cast(to f32)(dY).

    ```mlir
    %dx, %ds, %db = graph.LayerNormalizationGrad %dy, %x, %s {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<8x16xf32>, tensor<16xf32>, tensor<16xf32>)
    ```
  }];
  let arguments = (ins AnyTensor:$dY, AnyTensor:$X, AnyTensor:$Scale,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1e-5">:$epsilon);
  let results = (outs AnyTensor:$dX, AnyTensor:$dScale, AnyTensor:$dB);
  let hasVerifier = 1;
}

def Graph_RMSNormalizationGradOp
    : Graph_GenericOp<"RMSNormalizationGrad", [Pure]> {
  let summary = "gradient of RMSNormalization";
  let description = [{
    Recomputes the inverse root mean square r of X over the dims from `axis`
    and returns `dX = r * (dY * scale - Xhat * mean(dY * scale * Xhat))` with
    `Xhat = X * r` (the mean over the normalized dims) and
    `dScale = sum over rows of dY * Xhat`, of scale's type. dY has X's type,
    or for an f32 X also X's shape in bf16 / f16: the kernels widen each
    element on load (exact), so the results are those of the f32 op on
    Cast(to f32)(dY).

    ```mlir
    %dx, %ds = graph.RMSNormalizationGrad %dy, %x, %s {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<8x16xf32>, tensor<16xf32>)
    ```
  }];
  let arguments = (ins AnyTensor:$dY, AnyTensor:$X, AnyTensor:$scale,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1e-5">:$epsilon);
  let results = (outs AnyTensor:$dX, AnyTensor:$dScale);
  let hasVerifier = 1;
}

def Graph_FusedAttentionGradOp
    : Graph_GenericOp<"FusedAttentionGrad",
                      [Pure, DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "gradient of FusedAttention";
  let description = [{
    Recomputes the probabilities `P = exp(S - LSE)` (0 for masked keys and
    for rows with LSE = -inf) from Q, Kt, the optional Bias and the `scale` /
    `causal` of the forward op, then with `Drow = rowsum(dY * Y)`:
    `dV = P^T dY`, `dS = P * (dY V^T - Drow)`, `dQ = scale * dS Kt^T`,
    `dKt = scale * Q^T dS`. dQ, dKt and dV have the types of Q, Kt and V; dY
    has Y's type and LSE is FusedAttention's f32 statistic. No gradient for
    Bias (the gradient rule rejects a bias that would need one). The
    permutations `q_perm`, `kt_perm`, `v_perm` and `y_perm` are the forward
    op's: dY and Y are laid out by `y_perm`, and each gradient like its
    operand. So are `q_select`, `kt_select` and `v_select`: a selected
    operand is read as its slice, and its gradient has the slice's type (the
    operand's with `axis` removed).

    With `packed_grad = 1`, the op has one result instead of three: the
    gradient of the packed tensor Q, Kt and V are slices of (their selects
    take indices 0, 1, 2 of one axis of size 3, each once, of tensors of one
    type), of that type, each slice's gradient written in place (GPT-2's
    dQKV, without a Concat of dQ, dK and dV).

    ```mlir
    %dq, %dkt, %dv = graph.FusedAttentionGrad %dy, %q, %kt, %v, %y, %lse {causal = 1 : i64, scale = 2.500000e-01 : f32} : (tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16xf32>) -> (tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<2x16x8xf32>)
    // The gradient of a packed [B, T, 3, H, D] QKV in one result:
    %dqkv = graph.FusedAttentionGrad %dy2, %qkv, %qkv, %qkv, %y2, %lse2 {kt_perm = array<i64: 0, 2, 3, 1>, kt_select = array<i64: 2, 1>, packed_grad = 1 : i64, q_perm = array<i64: 0, 2, 1, 3>, q_select = array<i64: 2, 0>, scale = 2.500000e-01 : f32, v_perm = array<i64: 0, 2, 1, 3>, v_select = array<i64: 2, 2>, y_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x16xf32>, tensor<2x16x3x4x16xf32>, tensor<2x16x3x4x16xf32>, tensor<2x16x3x4x16xf32>, tensor<2x16x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x16x3x4x16xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$dY, AnyTensor:$Q, AnyTensor:$Kt, AnyTensor:$V,
                   AnyTensor:$Y, AnyTensor:$LSE, Optional<AnyTensor>:$Bias,
                   F32Attr:$scale,
                   DefaultValuedAttr<ConfinedAttr<I64Attr, [IntMinValue<0>, IntMaxValue<1>]>,
                                     "0">:$causal,
                   OptionalAttr<DenseI64ArrayAttr>:$q_perm,
                   OptionalAttr<DenseI64ArrayAttr>:$kt_perm,
                   OptionalAttr<DenseI64ArrayAttr>:$v_perm,
                   OptionalAttr<DenseI64ArrayAttr>:$y_perm,
                   OptionalAttr<DenseI64ArrayAttr>:$q_select,
                   OptionalAttr<DenseI64ArrayAttr>:$kt_select,
                   OptionalAttr<DenseI64ArrayAttr>:$v_select,
                   DefaultValuedAttr<ConfinedAttr<I64Attr, [IntMinValue<0>, IntMaxValue<1>]>,
                                     "0">:$packed_grad);
  // dQ, dKt, dV; or, with packed_grad, the packed tensor's gradient.
  let results = (outs Variadic<AnyTensor>:$grads);
  let hasVerifier = 1;
}

def Graph_BatchNormalizationTrainingOp
    : Graph_GenericOp<"BatchNormalizationTraining", [Pure]> {
  let summary = "batch normalization with batch statistics";
  let description = [{
    The training form of BatchNormalization: normalizes X with the mean and
    biased variance of the batch over all dims but 1, and returns Y, the batch
    mean, the inverse standard deviation (saved for the gradient), and the
    updated running statistics
    `running = momentum * running + (1 - momentum) * batch` (the variance
    update uses the unbiased batch variance, as PyTorch does).

    ```mlir
    %y, %m, %is, %rm, %rv = graph.BatchNormalizationTraining %x, %s, %b, %mean, %var {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
    ```
  }];
  let arguments = (ins AnyTensor:$X, AnyTensor:$scale, AnyTensor:$B,
                   AnyTensor:$input_mean, AnyTensor:$input_var,
                   DefaultValuedAttr<F32Attr, "1e-5">:$epsilon,
                   DefaultValuedAttr<F32Attr, "0.9">:$momentum);
  let results = (outs AnyTensor:$Y, AnyTensor:$saved_mean,
                      AnyTensor:$saved_inv_std, AnyTensor:$running_mean,
                      AnyTensor:$running_var);
  let hasVerifier = 1;
}

def Graph_BatchNormalizationGradOp
    : Graph_GenericOp<"BatchNormalizationGrad", [Pure]> {
  let summary = "gradient of BatchNormalizationTraining";
  let description = [{
    From dY, X, scale and the saved batch statistics: dX, dScale, dB.

    ```mlir
    %dx, %ds, %db = graph.BatchNormalizationGrad %dy, %x, %s, %m, %is : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>)
    ```
  }];
  let arguments = (ins AnyTensor:$dY, AnyTensor:$X, AnyTensor:$scale,
                   AnyTensor:$saved_mean, AnyTensor:$saved_inv_std);
  let results = (outs AnyTensor:$dX, AnyTensor:$dScale, AnyTensor:$dB);
  let hasVerifier = 1;
}

def Graph_SoftmaxCrossEntropyLossGradOp
    : Graph_GenericOp<"SoftmaxCrossEntropyLossGrad", [Pure]> {
  let summary = "gradient of SoftmaxCrossEntropyLoss with respect to scores";
  let description = [{
    dScores = dLoss * (softmax(scores) - onehot(labels)) * weight / denom,
    where denom is the (weighted) count of non-ignored labels for `mean`.
    dLoss has the loss's type (a scalar unless reduction is none; f32 for
    bf16 / f16 scores). dScores has the scores' type: for bf16 / f16 scores
    the kernels upcast each score, compute in f32 and round dScores once to
    nearest even, which is Cast(to T) of the f32 op on Cast(to f32) scores.

    ```mlir
    %ds = graph.SoftmaxCrossEntropyLossGrad %dl, %s, %y {reduction = #graph.loss_reduction<mean>} : (tensor<f32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$dLoss, AnyTensor:$scores, AnyTensor:$labels,
                   Optional<AnyTensor>:$weights,
                   DefaultValuedAttr<Graph_LossReductionAttr, "LossReduction::mean">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs AnyTensor:$dScores);
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(::mlir::MLIRContext *,
        std::optional<::mlir::Location>, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      types.push_back(adaptor.getScores().getType());
      return ::mlir::success();
    }
  }];
}

def Graph_SoftmaxCrossEntropyLossWithGradOp
    : Graph_GenericOp<"SoftmaxCrossEntropyLossWithGrad", [Pure]> {
  let summary = "SoftmaxCrossEntropyLoss and its gradient in one pass over the scores";
  let description = [{
    The loss of `SoftmaxCrossEntropyLoss(scores, labels[, weights])` and the
    dScores of `SoftmaxCrossEntropyLossGrad(dLoss, scores, labels[,
    weights])`, same attributes, from one read of the scores: each row's
    max and sum of exponentials serve both. The results are bit for bit the
    two ops' (the kernels share their row math). `graph-fuse-loss-grad`
    forms it when the gradient's dLoss is known before the loss (autodiff's
    seed, a constant): the op then runs in the forward, the scores die
    there, and dScores waits for the backward. Type rules are the two ops'
    (constraint T8 of docs/training.md): the loss has the scores' element
    type, f32 for bf16 / f16 scores, and is a scalar unless reduction is
    none (then the labels' shape); dLoss has the loss's type; dScores has
    the scores' type (for 16-bit scores the f32 gradient rounded once).

    ```mlir
    %l, %ds = graph.SoftmaxCrossEntropyLossWithGrad %dl, %s, %y {ignore_index = -100 : i64} : (tensor<f32>, tensor<4x10xbf16>, tensor<4xi64>) -> (tensor<f32>, tensor<4x10xbf16>)
    ```
  }];
  let arguments = (ins AnyTensor:$dLoss, AnyTensor:$scores, AnyTensor:$labels,
                   Optional<AnyTensor>:$weights,
                   DefaultValuedAttr<Graph_LossReductionAttr, "LossReduction::mean">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs AnyTensor:$loss, AnyTensor:$dScores);
  let hasVerifier = 1;
}

// Window attributes shared by the convolution gradients.
def Graph_ConvGradInputOp : Graph_GenericOp<"ConvGradInput", [Pure]> {
  let summary = "gradient of Conv with respect to its input";
  let description = [{
    A transposed convolution of dY with W giving a tensor of `input_shape`
    (the forward X's shape, which the output size alone does not determine).

    ```mlir
    %dx = graph.ConvGradInput %dy, %w {dilations = array<i64: 1, 1>, group = 1 : i64, input_shape = array<i64: 1, 3, 8, 8>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x3x8x8xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$dY, AnyTensor:$W,
                   DenseI64ArrayAttr:$dilations, DefaultValuedAttr<I64Attr, "1">:$group,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$input_shape);
  let results = (outs AnyTensor:$dX);
  let hasVerifier = 1;
}

def Graph_ConvGradWeightOp : Graph_GenericOp<"ConvGradWeight", [Pure]> {
  let summary = "gradient of Conv with respect to its weight";
  let description = [{
    The correlation of X with dY giving a tensor of `weight_shape`.

    ```mlir
    %dw = graph.ConvGradWeight %dy, %x {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, weight_shape = array<i64: 4, 3, 3, 3>} : (tensor<1x4x8x8xf32>, tensor<1x3x8x8xf32>) -> tensor<4x3x3x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$dY, AnyTensor:$X,
                   DenseI64ArrayAttr:$dilations, DefaultValuedAttr<I64Attr, "1">:$group,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$weight_shape);
  let results = (outs AnyTensor:$dW);
  let hasVerifier = 1;
}

def Graph_MaxPoolGradOp : Graph_Op<"MaxPoolGrad", [Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of MaxPool";
  let description = [{
    Routes each dY entry to the (first) maximal X entry of its window.

    ```mlir
    %dx = graph.MaxPoolGrad %dy, %x {ceil_mode = 0 : i64, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x8x2x2xf32>, tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$dY, AnyTensor:$X,
                   DenseI64ArrayAttr:$kernel_shape, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<I64Attr, "0">:$ceil_mode);
  let results = (outs AnyTensor:$dX);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(::mlir::MLIRContext *,
        std::optional<::mlir::Location>, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      types.push_back(adaptor.getX().getType());
      return ::mlir::success();
    }
  }];
}

def Graph_AveragePoolGradOp : Graph_GenericOp<"AveragePoolGrad", [Pure]> {
  let summary = "gradient of AveragePool";
  let description = [{
    Spreads each dY entry evenly over its window (divided as the forward op
    divides, per count_include_pad) into a tensor of `input_shape`.

    ```mlir
    %dx = graph.AveragePoolGrad %dy {ceil_mode = 0 : i64, count_include_pad = 0 : i64, dilations = array<i64: 1, 1>, input_shape = array<i64: 1, 8, 4, 4>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x8x2x2xf32>) -> tensor<1x8x4x4xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$dY, DenseI64ArrayAttr:$kernel_shape,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<I64Attr, "0">:$ceil_mode,
                   DefaultValuedAttr<I64Attr, "0">:$count_include_pad,
                   DenseI64ArrayAttr:$input_shape);
  let results = (outs AnyTensor:$dX);
}

def Graph_GatherGradOp : Graph_GenericOp<"GatherGrad", [Pure]> {
  let summary = "gradient of Gather: scatter-add into zeros";
  let description = [{
    A zero tensor of `data_shape` into which dY's slices are added at
    `indices` along `axis` (repeated indices accumulate; negative indices
    count from the end).

    ```mlir
    %dw = graph.GatherGrad %dy, %ids {axis = 0 : i64, data_shape = array<i64: 100, 16>} : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<100x16xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$dY, AnyTensor:$indices,
                   DefaultValuedAttr<I64Attr, "0">:$axis,
                   DenseI64ArrayAttr:$data_shape);
  let results = (outs AnyTensor:$dData);
  let hasVerifier = 1;
}

def Graph_SliceGradOp : Graph_GenericOp<"SliceGrad", [Pure]> {
  let summary = "gradient of Slice: dY written into zeros";
  let description = [{
    A zero tensor of `input_shape` whose sliced region (same starts, ends,
    axes and steps as the forward Slice) holds dY.

    ```mlir
    %dx = graph.SliceGrad %dy {axes = array<i64: 1>, ends = array<i64: 2>, input_shape = array<i64: 2, 3>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x2xf32>) -> tensor<2x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$dY, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$ends, DenseI64ArrayAttr:$axes,
                   DenseI64ArrayAttr:$steps, DenseI64ArrayAttr:$input_shape);
  let results = (outs AnyTensor:$dX);
  let hasVerifier = 1;
}

def Graph_ResizeGradOp : Graph_GenericOp<"ResizeGrad", [Pure]> {
  let summary = "gradient of Resize (nearest, linear): scatter-add";
  let description = [{
    A zero tensor of `input_shape` into which each dY entry is added at the
    input positions the forward Resize read for it, with its interpolation
    weights (same mode, coordinate transformation and nearest rounding; the
    scales are output / input per dimension, as the exported forward uses).
    (T7) mode is nearest or linear and `input_shape` has dY's rank.

    ```mlir
    %dx = graph.ResizeGrad %dy {input_shape = array<i64: 1, 2, 2, 2>, mode = #graph.resize_mode<linear>} : (tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$dY, DenseI64ArrayAttr:$input_shape,
      DefaultValuedAttr<Graph_ResizeModeAttr, "ResizeMode::nearest">:$mode,
      DefaultValuedAttr<Graph_CoordModeAttr, "CoordMode::half_pixel">:$coordinate_transformation_mode,
      DefaultValuedAttr<Graph_NearestModeAttr, "NearestMode::round_prefer_floor">:$nearest_mode);
  let results = (outs AnyTensor:$dX);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Micro-batches, clipping, optimizers and state.
//===----------------------------------------------------------------------===//

def Graph_AccumulateGradOp : Graph_Op<"AccumulateGrad", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "mean of a parameter's gradient over the micro-batches";
  let description = [{
    The boundary between the per-micro-batch part of a training step
    (forward, loss, backward) and its per-step part (clipping, optimizer,
    assignments). `grad` is the gradient of one micro-batch; `total` is the
    mean of `grad` over the `micro_batches` micro-batches of the step (the
    runtime keeps a persistent accumulator, zeroed at the start of a step).
    Data-parallel all-reduce of `total` is inserted after this op.

    `total` has grad's type, or for a bf16 / f16 grad also grad's shape in
    f32 (printed after `->`): the kernels widen each element on load
    (exact), so an f32 total accumulates exactly what it would from
    Cast(to f32)(grad) (graph-cast-motion folds that cast into the op).

    ```mlir
    %g = graph.AccumulateGrad %dw for @w {micro_batches = 4 : i64} : tensor<16x16xf32>
    %h = graph.AccumulateGrad %dv for @v {micro_batches = 1 : i64} : tensor<16x16xbf16> -> tensor<16x16xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$grad, FlatSymbolRefAttr:$variable,
                   ConfinedAttr<I64Attr, [IntPositive]>:$micro_batches);
  let results = (outs AnyTensor:$total);
  let assemblyFormat =
      "$grad `for` $variable attr-dict `:` custom<GradTotalTypes>(type($grad), type($total))";
  let builders = [
    // total of grad's type.
    OpBuilder<(ins "::mlir::Value":$grad, "::mlir::FlatSymbolRefAttr":$variable,
                   "::mlir::IntegerAttr":$micro_batches), [{
      build($_builder, $_state, grad.getType(), grad, variable, micro_batches);
    }]>
  ];
  let extraClassDeclaration = [{
    /// grad's type, then ` -> ` total's when it differs (found by the
    /// generated parse / print, which are members).
    static ::mlir::ParseResult parseGradTotalTypes(::mlir::OpAsmParser &parser,
                                                   ::mlir::Type &grad, ::mlir::Type &total);
    static void printGradTotalTypes(::mlir::OpAsmPrinter &printer, ::mlir::Operation *op,
                                    ::mlir::Type grad, ::mlir::Type total);
  }];
  let hasVerifier = 1;
}

def Graph_ClipByGlobalNormOp : Graph_Op<"ClipByGlobalNorm", [
    Pure, InferTypeOpAdaptor]> {
  let summary = "scale gradients so that their joint L2 norm is at most max_norm";
  let description = [{
    norm = sqrt(sum_i ||g_i||^2); every g_i is scaled by
    min(1, max_norm / (norm + 1e-6)) (PyTorch's clip_grad_norm_). The norm is
    the first result (f32 scalar), for logging.

    ```mlir
    %n, %a, %b = graph.ClipByGlobalNorm %ga, %gb {max_norm = 1.0 : f32} : (tensor<4xf32>, tensor<2x2xf32>) -> (tensor<f32>, tensor<4xf32>, tensor<2x2xf32>)
    ```
  }];
  let arguments = (ins Variadic<AnyTensor>:$grads, F32Attr:$max_norm);
  let results = (outs AnyTensor:$global_norm, Variadic<AnyTensor>:$clipped);
  let assemblyFormat = "$grads attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Graph_UnscaleGradientsOp : Graph_Op<"UnscaleGradients", [
    Pure, InferTypeOpAdaptor]> {
  let summary = "divide loss-scaled gradients by the scale and flag inf/nan";
  let description = [{
    Dynamic loss scaling (docs/training.md, "Loss scaling"): the backward was
    seeded with `scale` instead of 1, so every gradient is S times too large.
    Each g_i is multiplied by the f32 reciprocal 1/scale (PyTorch's
    GradScaler.unscale_); `found_inf` (f32 scalar) is 1 when any element of
    any gradient is inf or nan, else 0. The optimizers that read it skip
    their update when it is nonzero (T9).

    ```mlir
    %found, %a, %b = graph.UnscaleGradients %scale, %ga, %gb : (tensor<f32>, tensor<4xf32>, tensor<2x2xf32>) -> (tensor<f32>, tensor<4xf32>, tensor<2x2xf32>)
    ```
  }];
  let arguments = (ins AnyTensor:$scale, Variadic<AnyTensor>:$grads);
  let results = (outs AnyTensor:$found_inf, Variadic<AnyTensor>:$unscaled);
  let assemblyFormat = "$scale `,` $grads attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Graph_SGDOp : Graph_Op<"SGD", [Pure, InferTypeOpAdaptor,
    AllTypesMatch<["param", "grad", "velocity"]>]> {
  let summary = "SGD step with momentum and weight decay";
  let description = [{
    PyTorch's SGD (dampening 0): g' = grad + weight_decay * param;
    v' = momentum * velocity + g'; param' = param - lr * v' (nesterov:
    param - lr * (g' + momentum * v')). `lr` is a runtime f32 scalar.
    With the optional `found_inf` (UnscaleGradients' flag, T9) nonzero the
    step changes nothing: param' = param, v' = velocity.

    ```mlir
    %p, %v = graph.SGD %lr, %w, %g, %vel {momentum = 0.9 : f32, nesterov = 0 : i64, weight_decay = 0.0 : f32} : (tensor<f32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    ```
  }];
  let arguments = (ins AnyTensor:$lr, AnyTensor:$param, AnyTensor:$grad,
                   AnyTensor:$velocity, Optional<AnyTensor>:$found_inf,
                   DefaultValuedAttr<F32Attr, "0.0">:$momentum,
                   DefaultValuedAttr<F32Attr, "0.0">:$weight_decay,
                   DefaultValuedAttr<I64Attr, "0">:$nesterov);
  let results = (outs AnyTensor:$new_param, AnyTensor:$new_velocity);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(::mlir::MLIRContext *,
        std::optional<::mlir::Location>, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      types.append(2, adaptor.getParam().getType());
      return ::mlir::success();
    }
  }];
  let hasVerifier = 1;
}

def Graph_AdamWOp : Graph_Op<"AdamW", [Pure, InferTypeOpAdaptor,
    AllTypesMatch<["param", "grad", "m", "v"]>]> {
  let summary = "AdamW step: bias-corrected moments, decoupled weight decay";
  let description = [{
    Loshchilov & Hutter (PyTorch's AdamW): m' = beta1 m + (1-beta1) g,
    v' = beta2 v + (1-beta2) g^2, param' = param - lr * (weight_decay * param +
    (m'/(1-beta1^step)) / (sqrt(v'/(1-beta2^step)) + epsilon)). `lr` is an f32
    scalar and `step` an i64 scalar counting from 1, both runtime inputs.
    Operand order matches the runtime's AdamW kernel.
    With `freeze_variance_after` = N > 0 (compressed AdamW, docs/training.md),
    steps after N leave v as it is (v' = v) and divide by
    sqrt(v/(1-beta2^N)): Adam's preconditioner is frozen, the update linear in
    the gradient, as error-feedback compression of that gradient needs.
    With the optional `found_inf` (UnscaleGradients' flag, T9) nonzero the
    step is skipped: param, m and v come out unchanged (the launcher does
    not count it either: GradScaler skips optimizer.step()).

    ```mlir
    %p, %m2, %v2 = graph.AdamW %lr, %step, %w, %g, %m, %v {beta1 = 0.9 : f32, beta2 = 0.999 : f32, epsilon = 1.0e-08 : f32, weight_decay = 0.01 : f32} : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
    ```
  }];
  let arguments = (ins AnyTensor:$lr, AnyTensor:$step, AnyTensor:$param,
                   AnyTensor:$grad, AnyTensor:$m, AnyTensor:$v,
                   Optional<AnyTensor>:$found_inf,
                   DefaultValuedAttr<F32Attr, "0.9">:$beta1,
                   DefaultValuedAttr<F32Attr, "0.999">:$beta2,
                   DefaultValuedAttr<F32Attr, "1e-8">:$epsilon,
                   DefaultValuedAttr<F32Attr, "0.01">:$weight_decay,
                   DefaultValuedAttr<I64Attr, "0">:$freeze_variance_after);
  let results = (outs AnyTensor:$new_param, AnyTensor:$new_m, AnyTensor:$new_v);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(::mlir::MLIRContext *,
        std::optional<::mlir::Location>, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      types.append(3, adaptor.getParam().getType());
      return ::mlir::success();
    }
  }];
  let hasVerifier = 1;
}

def Graph_AssignVariableOp : Graph_Op<"AssignVariable", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemWrite]>]> {
  let summary = "store a new value into a variable";
  let description = [{
    Later steps' `graph.ReadVariable` of the variable see `value`; within one
    function, reads before the assignment see the old value. The value's
    type must be the variable's (constraint T2).

    ```mlir
    graph.AssignVariable @w = %new_w : tensor<16x16xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$variable, AnyTensor:$value);
  let assemblyFormat = "$variable `=` $value attr-dict `:` type($value)";
}

#endif // STRAIT_DIALECT_GRAPH_GRAPHTRAININGOPS_TD
