//===- GraphNNOps.td - Neural-network ops ------------------*- tablegen -*-===//
//
// Linear algebra, convolution, pooling, normalization, softmax and losses.
// Window attributes are explicit: the importer resolves defaults and auto_pad.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHNNOPS_TD
#define STRAIT_DIALECT_GRAPH_GRAPHNNOPS_TD

include "strait/Dialect/Graph/GraphBase.td"

def Graph_MatMulOp : Graph_GenericOp<"MatMul", [Pure]> {
  let summary = "matrix product with numpy semantics";
  let description = [{
    Batch dimensions broadcast; a 1-D operand is promoted and the promoted
    dimension removed from the result.

    ```mlir
    %y = graph.MatMul %a, %b : (tensor<8x128x768xf32>, tensor<768x3072xf32>) -> tensor<8x128x3072xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$A, AnyTensor:$B);
  let results = (outs AnyTensor:$Y);
}

def Graph_GemmOp : Graph_GenericOp<"Gemm", [Pure]> {
  let summary = "alpha * op(A) * op(B) + beta * C";
  let description = [{
    ```mlir
    %y = graph.Gemm %a, %b, %c {transB = 1 : i64} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$A, AnyTensor:$B, Optional<AnyTensor>:$C,
                   DefaultValuedAttr<F32Attr, "1.0">:$alpha,
                   DefaultValuedAttr<F32Attr, "1.0">:$beta,
                   DefaultValuedAttr<I64Attr, "0">:$transA,
                   DefaultValuedAttr<I64Attr, "0">:$transB);
  let results = (outs AnyTensor:$Y);
}

def Graph_EinsumOp : Graph_GenericOp<"Einsum", [Pure]> {
  let summary = "Einstein summation";
  let description = [{
    The equation must be explicit (`->`) or implicit per ONNX; ellipses are
    supported.

    ```mlir
    %y = graph.Einsum %a, %b {equation = "bij,bjk->bik"} : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyTensor>:$Inputs, StrAttr:$equation);
  let results = (outs AnyTensor:$Output);
}

def Graph_ConvOp : Graph_GenericOp<"Conv", [Pure]> {
  let summary = "N-d convolution (cross-correlation)";
  let description = [{
    Layout NC[D]HW; W is M x C/group x k...; `pads` holds begins then ends.

    ```mlir
    %y = graph.Conv %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, AnyTensor:$W, Optional<AnyTensor>:$B,
                   DenseI64ArrayAttr:$dilations, DefaultValuedAttr<I64Attr, "1">:$group,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$strides);
  let results = (outs AnyTensor:$Y);
}

def Graph_ConvTransposeOp : Graph_GenericOp<"ConvTranspose", [Pure]> {
  let summary = "N-d transposed convolution";
  let description = [{
    W is C x M/group x k...; the output size is
    stride*(in-1) + output_padding + ((k-1)*dilation+1) - pad_begin - pad_end.

    ```mlir
    %y = graph.ConvTranspose %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, output_padding = array<i64: 0, 0>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x4x4x4xf32>, tensor<4x2x2x2xf32>) -> tensor<1x2x8x8xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, AnyTensor:$W, Optional<AnyTensor>:$B,
                   DenseI64ArrayAttr:$dilations, DefaultValuedAttr<I64Attr, "1">:$group,
                   DenseI64ArrayAttr:$output_padding, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$strides);
  let results = (outs AnyTensor:$Y);
}

def Graph_MaxPoolOp : Graph_GenericOp<"MaxPool", [Pure]> {
  let summary = "max pooling";
  let description = [{
    ```mlir
    %y = graph.MaxPool %x {ceil_mode = 0 : i64, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x64x112x112xf32>) -> tensor<1x64x56x56xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, DenseI64ArrayAttr:$kernel_shape,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<I64Attr, "0">:$ceil_mode);
  let results = (outs AnyTensor:$Y);
}

def Graph_AveragePoolOp : Graph_GenericOp<"AveragePool", [Pure]> {
  let summary = "average pooling";
  let description = [{
    ```mlir
    %y = graph.AveragePool %x {ceil_mode = 0 : i64, count_include_pad = 0 : i64, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x8x4x4xf32>) -> tensor<1x8x2x2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, DenseI64ArrayAttr:$kernel_shape,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<I64Attr, "0">:$ceil_mode,
                   DefaultValuedAttr<I64Attr, "0">:$count_include_pad);
  let results = (outs AnyTensor:$Y);
}

class Graph_GlobalPoolOp<string mnemonic, string summaryText>
    : Graph_GenericOp<mnemonic, [Pure]> {
  let summary = summaryText;
  let description = [{
    Pools every spatial dimension to 1.

    ```mlir
    %y = graph.}] # mnemonic # [{ %x : (tensor<1x2048x7x7xf32>) -> tensor<1x2048x1x1xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X);
  let results = (outs AnyTensor:$Y);
  let extraClassDefinition = Graph_InferVia<"inferGlobalPool">.inferDef;
}
def Graph_GlobalAveragePoolOp : Graph_GlobalPoolOp<"GlobalAveragePool", "mean over spatial dims">;
def Graph_GlobalMaxPoolOp : Graph_GlobalPoolOp<"GlobalMaxPool", "max over spatial dims">;

def Graph_BatchNormalizationOp : Graph_GenericOp<"BatchNormalization", [Pure]> {
  let summary = "batch normalization with running statistics";
  let description = [{
    Inference form: y = scale * (x - mean) / sqrt(var + epsilon) + B over
    channel dimension 1. The training-step builder turns it into batch
    statistics and running-average updates.

    ```mlir
    %y = graph.BatchNormalization %x, %s, %b, %m, %v {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<1x4x2x2xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x2x2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, AnyTensor:$scale, AnyTensor:$B,
                   AnyTensor:$input_mean, AnyTensor:$input_var,
                   DefaultValuedAttr<F32Attr, "1e-5">:$epsilon,
                   DefaultValuedAttr<F32Attr, "0.9">:$momentum);
  let results = (outs AnyTensor:$Y);
}

// Not a Graph_GenericOp: Y's element type is not a function of the operands
// (isCompatibleReturnTypes admits a 16-bit Y for an f32 X).
def Graph_LayerNormalizationOp : Graph_Op<"LayerNormalization", [
    Pure, InferTypeOpAdaptorWithIsCompatible]> {
  let summary = "normalization over the trailing dims from axis";
  let description = [{
    Only the first output (Y) of ONNX's op; Scale and B broadcast to the
    normalized dims. Y has X's type, or for an f32 X also bf16 / f16: the
    kernels compute Y in f32 and round it once to nearest even, which is
    Cast(to T) of the f32 Y (graph-cast-motion folds that cast into the op).

    ```mlir
    %y = graph.LayerNormalization %x, %s, %b {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
    %z = graph.LayerNormalization %x, %s, %b : (tensor<8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<8x16xbf16>
    ```
  }];
  let arguments = (ins AnyTensor:$X, AnyTensor:$Scale, Optional<AnyTensor>:$B,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1e-5">:$epsilon);
  let results = (outs AnyTensor:$Y);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

// Not a Graph_GenericOp, as LayerNormalization: Y's element type is not a
// function of the operands (isCompatibleReturnTypes admits a 16-bit Y for an
// f32 X).
def Graph_RMSNormalizationOp : Graph_Op<"RMSNormalization", [
    Pure, InferTypeOpAdaptorWithIsCompatible]> {
  let summary = "root-mean-square normalization over the trailing dims from axis";
  let description = [{
    ONNX opset-23 RMSNormalization:
    `Y = X / sqrt(mean(X^2 over the dims from axis) + epsilon) * scale`, with
    `scale` broadcast to the normalized dims. `stash_type` is kept for export;
    the kernels accumulate in f32 lanes combined in double whatever its value.
    graph-fuse-rmsnorm builds it from the decomposition of LLaMA exports.
    Y has X's type, or for an f32 X also bf16 / f16: the kernels compute Y in
    f32 and round it once to nearest even, which is Cast(to T) of the f32 Y
    (graph-cast-motion folds that cast into the op).

    ```mlir
    %y = graph.RMSNormalization %x, %s {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
    %z = graph.RMSNormalization %x, %s : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xbf16>
    ```
  }];
  let arguments = (ins AnyTensor:$X, AnyTensor:$scale,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1e-5">:$epsilon,
                   DefaultValuedAttr<I64Attr, "1">:$stash_type);
  let results = (outs AnyTensor:$Y);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Graph_FusedAttentionOp : Graph_GenericOp<"FusedAttention", [Pure]> {
  let summary = "scaled dot-product attention with an optional additive bias";
  let description = [{
    One kernel for the attention that exported transformers spell as
    `MatMul(Q, Kt) -> Mul(scale) -> Add(Bias) -> Softmax(last axis) ->
    MatMul(., V)` (graph-fuse-attention builds it; named "Fused..." because
    ONNX opset 23's `Attention` has another operand layout). With batch dims
    `b...` (zero or more, identical for Q, Kt and V):

    - Q `[b..., Tq, D]`, Kt `[b..., D, Tk]` (K already transposed), V
      `[b..., Tk, Dv]`, all f32, all bf16 or all f16;
    - Bias (optional, additive) broadcasts to `[b..., Tq, Tk]` without
      widening it, rank <= rank of Q, f32 or Q's element type;
    - `S = scale * Q Kt + Bias`; with `causal = 1` key j is also masked for
      query i when `j > i + (Tk - Tq)`;
    - Y `[b..., Tq, Dv]` (Q's element type) is `softmax(S) V` over the last
      axis; LSE `[b..., Tq]` (always f32) is `log(sum_j exp(S))` over the
      unmasked keys, saved for the gradient. A row with no finite score gives
      Y = 0 and LSE = -inf.

    The T x T scores never leave the kernel.

    Each of Q, Kt, V and Y may be a permuted tensor: with `q_perm` (a
    permutation of the rank), the logical Q above is `Transpose(Q, q_perm)`,
    i.e. its dimension i is Q's dimension `q_perm[i]`; `kt_perm`, `v_perm`
    likewise, and `y_perm` lays out the result (the logical Y is
    `Transpose(Y, y_perm)`). LSE is always `[b..., Tq]`. graph-fuse-attention
    folds the Transposes around the heads into these, so that GPT-2's Q, K,
    V and Y stay `[B, T, H, D]` (q/v/y_perm = [0, 2, 1, 3], kt_perm = [0, 2,
    3, 1]) and no Transpose runs in the forward or backward pass.

    Each of Q, Kt and V may also be one slice of a packed tensor: with
    `q_select = array<i64: axis, index>`, Q's tensor has one dimension more
    (`axis`) and the operand is its slice at `index` along `axis`, that
    dimension removed, before `q_perm` applies; `kt_select`, `v_select`
    likewise. graph-fold-transposes reads GPT-2's Q, K and V this way
    straight out of the packed projection `[B, T, 3, H, D]` (a Reshape, a
    view, of `[B, T, 3C]`) instead of splitting it. See
    docs/graph-dialect.md.

    ```mlir
    %y, %lse = graph.FusedAttention %q, %kt, %v, %mask {scale = 2.500000e-01 : f32} : (tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>, tensor<2x1x16x16xf32>) -> (tensor<2x4x16x16xf32>, tensor<2x4x16xf32>)
    // Heads as [B, T, H, D] tensors, K not transposed:
    %y2, %lse2 = graph.FusedAttention %q2, %k2, %v2 {causal = 1 : i64, kt_perm = array<i64: 0, 2, 3, 1>, q_perm = array<i64: 0, 2, 1, 3>, scale = 2.500000e-01 : f32, v_perm = array<i64: 0, 2, 1, 3>, y_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x16xf32>, tensor<2x16x4x16xf32>, tensor<2x16x4x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x4x16xf32>)
    // Q, K and V as slices 0, 1, 2 of one packed [B, T, 3, H, D] tensor:
    %y3, %lse3 = graph.FusedAttention %qkv, %qkv, %qkv {causal = 1 : i64, kt_perm = array<i64: 0, 2, 3, 1>, kt_select = array<i64: 2, 1>, q_perm = array<i64: 0, 2, 1, 3>, q_select = array<i64: 2, 0>, scale = 2.500000e-01 : f32, v_perm = array<i64: 0, 2, 1, 3>, v_select = array<i64: 2, 2>, y_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x3x4x16xf32>, tensor<2x16x3x4x16xf32>, tensor<2x16x3x4x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x4x16xf32>)
    ```
  }];
  let arguments = (ins AnyTensor:$Q, AnyTensor:$Kt, AnyTensor:$V,
                   Optional<AnyTensor>:$Bias,
                   F32Attr:$scale,
                   DefaultValuedAttr<ConfinedAttr<I64Attr, [IntMinValue<0>, IntMaxValue<1>]>,
                                     "0">:$causal,
                   OptionalAttr<DenseI64ArrayAttr>:$q_perm,
                   OptionalAttr<DenseI64ArrayAttr>:$kt_perm,
                   OptionalAttr<DenseI64ArrayAttr>:$v_perm,
                   OptionalAttr<DenseI64ArrayAttr>:$y_perm,
                   OptionalAttr<DenseI64ArrayAttr>:$q_select,
                   OptionalAttr<DenseI64ArrayAttr>:$kt_select,
                   OptionalAttr<DenseI64ArrayAttr>:$v_select);
  let results = (outs AnyTensor:$Y, AnyTensor:$LSE);
}

def Graph_FusedRotaryEmbeddingOp : Graph_GenericOp<"FusedRotaryEmbedding", [Pure]> {
  let summary = "rotary position embedding in the rotate-half form";
  let description = [{
    What LLaMA-style exports spell `X * Cos + Concat(-X[..., h:], X[..., :h])
    * Sin` (h = D / 2 of X's last dimension D) as one op (graph-fuse-rotary
    builds it). Along the last axis, with the partner p(i) = i + h for i < h
    and i - h otherwise, r(i) = -1 for i < h and +1 otherwise, and c, s
    the broadcast Cos, Sin:

    - `adjoint = 0`: `Y_i = X_i c_i + r(i) X_p(i) s_i`;
    - `adjoint = 1`, the transpose of the adjoint-0 map (its gradient rule):
      `Y_i = X_i c_i - r(i) X_p(i) s_p(i)`.

    X is f32, bf16 or f16 with an even, static last dimension; Cos and Sin
    are f32 or X's type and broadcast to X without widening it; Y has X's
    type. The kernels compute in f32 (f32 bit for bit the composed Mul,
    Neg, Concat, Mul, Add) and round once. Cos and Sin get no gradient.

    ```mlir
    %y = graph.FusedRotaryEmbedding %x, %cos, %sin : (tensor<2x4x16x64xf32>, tensor<1x1x16x64xf32>, tensor<1x1x16x64xf32>) -> tensor<2x4x16x64xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, AnyTensor:$Cos, AnyTensor:$Sin,
                   DefaultValuedAttr<ConfinedAttr<I64Attr, [IntMinValue<0>, IntMaxValue<1>]>,
                                     "0">:$adjoint);
  let results = (outs AnyTensor:$Y);
}

def Graph_InstanceNormalizationOp : Graph_GenericOp<"InstanceNormalization", [Pure]> {
  let summary = "per-sample, per-channel normalization";
  let description = [{
    ```mlir
    %y = graph.InstanceNormalization %x, %s, %b {epsilon = 1.0e-05 : f32} : (tensor<1x4x2x2xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x2x2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, AnyTensor:$scale, AnyTensor:$B,
                   DefaultValuedAttr<F32Attr, "1e-5">:$epsilon);
  let results = (outs AnyTensor:$output);
}

def Graph_GroupNormalizationOp : Graph_GenericOp<"GroupNormalization", [Pure]> {
  let summary = "normalization over groups of channels";
  let description = [{
    scale and bias hold one value per channel (opset 21 semantics; the
    importer expands opset-18 per-group parameters).

    ```mlir
    %y = graph.GroupNormalization %x, %s, %b {epsilon = 1.0e-05 : f32, num_groups = 2 : i64} : (tensor<1x4x2x2xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x2x2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, AnyTensor:$scale, AnyTensor:$bias,
                   DefaultValuedAttr<F32Attr, "1e-5">:$epsilon, I64Attr:$num_groups);
  let results = (outs AnyTensor:$Y);
}

def Graph_LRNOp : Graph_GenericOp<"LRN", [Pure]> {
  let summary = "local response normalization across channels";
  let description = [{
    ```mlir
    %y = graph.LRN %x {alpha = 1.0e-04 : f32, beta = 7.500000e-01 : f32, bias = 1.0 : f32, size = 3 : i64} : (tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, DefaultValuedAttr<F32Attr, "1e-4">:$alpha,
                   DefaultValuedAttr<F32Attr, "0.75">:$beta,
                   DefaultValuedAttr<F32Attr, "1.0">:$bias, I64Attr:$size);
  let results = (outs AnyTensor:$Y);
  let extraClassDefinition = Graph_InferVia<"inferSameAsFirst">.inferDef;
}

def Graph_DetOp : Graph_GenericOp<"Det", [Pure]> {
  let summary = "determinant of square matrices";
  let description = [{
    X `[b..., M, M]` (f32 or f64) gives Y `[b...]`, each the determinant of
    one matrix (LU with partial pivoting, in f64). No gradient.

    ```mlir
    %y = graph.Det %x : (tensor<2x3x3xf32>) -> tensor<2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X);
  let results = (outs AnyTensor:$Y);
}

def Graph_RoiAlignOp : Graph_GenericOp<"RoiAlign", [Pure]> {
  let summary = "region-of-interest pooling by bilinear sampling";
  let description = [{
    ONNX `RoiAlign` (opset 16): X `[N, C, H, W]`, rois `[R, 4]` (x1, y1,
    x2, y2), batch_indices `[R]` (i64) give Y `[R, C, output_height,
    output_width]`: each bin the average (`max_mode = 0`) or maximum of
    bilinear samples on a `sampling_ratio` grid (adaptive when 0);
    `half_pixel = 1` shifts coordinates by -0.5 (opset 16's default). No
    gradient.

    ```mlir
    %y = graph.RoiAlign %x, %rois, %idx {output_height = 2 : i64, output_width = 2 : i64} : (tensor<1x1x8x8xf32>, tensor<3x4xf32>, tensor<3xi64>) -> tensor<3x1x2x2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, AnyTensor:$rois, AnyTensor:$batch_indices,
                   DefaultValuedAttr<I64Attr, "0">:$max_mode,
                   DefaultValuedAttr<I64Attr, "1">:$half_pixel,
                   DefaultValuedAttr<I64Attr, "1">:$output_height,
                   DefaultValuedAttr<I64Attr, "1">:$output_width,
                   DefaultValuedAttr<I64Attr, "0">:$sampling_ratio,
                   DefaultValuedAttr<F32Attr, "1.0">:$spatial_scale);
  let results = (outs AnyTensor:$Y);
}

def Graph_LpNormalizationOp : Graph_GenericOp<"LpNormalization", [Pure]> {
  let summary = "x / ||x||_p along axis";
  let description = [{
    ```mlir
    %y = graph.LpNormalization %x {axis = -1 : i64, p = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<I64Attr, "2">:$p);
  let results = (outs AnyTensor:$output);
  let extraClassDefinition = Graph_InferVia<"inferSameAsFirst">.inferDef;
}

def Graph_MeanVarianceNormalizationOp
    : Graph_GenericOp<"MeanVarianceNormalization", [Pure]> {
  let summary = "(x - mean) / std over axes";
  let description = [{
    ```mlir
    %y = graph.MeanVarianceNormalization %x {axes = array<i64: 0, 2, 3>} : (tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, DenseI64ArrayAttr:$axes);
  let results = (outs AnyTensor:$Y);
  let extraClassDefinition = Graph_InferVia<"inferSameAsFirst">.inferDef;
}

class Graph_SoftmaxLikeOp<string mnemonic, string summaryText>
    : Graph_GenericOp<mnemonic, [Pure]> {
  let summary = summaryText;
  let description = [{
    Opset-13 semantics along one axis (the importer rewrites the older
    flatten-to-2-D form).

    ```mlir
    %y = graph.}] # mnemonic # [{ %x {axis = -1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs AnyTensor:$output);
  let extraClassDefinition = Graph_InferVia<"inferSoftmaxLike">.inferDef;
}
def Graph_SoftmaxOp : Graph_SoftmaxLikeOp<"Softmax", "softmax along axis">;
def Graph_LogSoftmaxOp : Graph_SoftmaxLikeOp<"LogSoftmax", "log of softmax along axis">;
def Graph_HardmaxOp : Graph_SoftmaxLikeOp<"Hardmax", "one-hot of the maximum along axis">;

def Graph_SoftmaxCrossEntropyLossOp
    : Graph_GenericOp<"SoftmaxCrossEntropyLoss", [Pure]> {
  let summary = "softmax cross-entropy of scores against integer labels";
  let description = [{
    scores are N x C x D1...; labels N x D1... (int). With ignore_index set, those labels contribute
    nothing (and are not counted by mean). The loss has the scores' type, except for bf16 / f16
    scores, whose loss is f32: the kernels upcast each score on load and compute in f32, exactly
    as on Cast(to f32) scores. (ONNX's optional log_prob output is imported as a LogSoftmax.)

    ```mlir
    %l = graph.SoftmaxCrossEntropyLoss %s, %y {reduction = #graph.loss_reduction<mean>} : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
    ```
  }];
  let arguments = (ins AnyTensor:$scores, AnyTensor:$labels, Optional<AnyTensor>:$weights,
                   DefaultValuedAttr<Graph_LossReductionAttr, "LossReduction::mean">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs AnyTensor:$output);
}

def Graph_NegativeLogLikelihoodLossOp
    : Graph_GenericOp<"NegativeLogLikelihoodLoss", [Pure]> {
  let summary = "negative log-likelihood of log-probabilities";
  let description = [{
    Same shapes and reduction codes as SoftmaxCrossEntropyLoss.

    ```mlir
    %l = graph.NegativeLogLikelihoodLoss %p, %y {reduction = #graph.loss_reduction<mean>} : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, AnyTensor:$target, Optional<AnyTensor>:$weight,
                   DefaultValuedAttr<Graph_LossReductionAttr, "LossReduction::mean">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs AnyTensor:$loss);
}

#endif // STRAIT_DIALECT_GRAPH_GRAPHNNOPS_TD
