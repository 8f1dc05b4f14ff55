//===- GraphExpertOps.td - Mixture-of-experts products ----*- tablegen -*-===//
//
// The routed (grouped) expert products of mixture-of-experts layers, which
// graph-rewrite-expert-matmuls builds from the gathered-weight form of
// static-shape exports. Constraints X1, X2: docs/graph-dialect.md,
// "Expert matmuls".
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHEXPERTOPS_TD
#define STRAIT_DIALECT_GRAPH_GRAPHEXPERTOPS_TD

include "strait/Dialect/Graph/GraphBase.td"

def Graph_GroupedMatMulOp : Graph_GenericOp<"GroupedMatMul", [Pure]> {
  let summary = "each row times the weight matrix of its own expert";
  let description = [{
    `Y[s, :] = X[s, :] @ op(W[idx[s]])` for every slot (row) s: X is
    [S, I], W holds E experts, idx [S] names each row's expert (an index in
    [-E, E), a negative one counting from the end, as Gather's), Y is
    [S, O]. With `transB = 1` W is [E, O, I] (a Linear layer's layout, the
    gathered experts of transformers' `batched_mm` exports) and op(W[e]) =
    W[e]^T; with `transB = 0` W is [E, I, O] (transposed experts) and op is
    the identity. The FLOPs of the routed products only, 2 * S * I * O: the
    kernels sort the rows by expert and run one GEMM per expert over its
    contiguous rows (docs/runtime.md, "Grouped expert products"). X and W
    are f32, bf16 or f16 of one type (X1); idx is i32 or i64 and gets no
    gradient. dX is a GroupedMatMul of dY with the other `transB`, dW a
    GroupedMatMulGradWeight.

    ```mlir
    %y = graph.GroupedMatMul %x, %w, %idx {transB = 1 : i64} : (tensor<256x64xf32>, tensor<8x128x64xf32>, tensor<256xi64>) -> tensor<256x128xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, AnyTensor:$W, AnyTensor:$indices,
                   ConfinedAttr<I64Attr, [IntMinValue<0>, IntMaxValue<1>]>:$transB);
  let results = (outs AnyTensor:$Y);
}

def Graph_GroupedMatMulGradWeightOp : Graph_GenericOp<"GroupedMatMulGradWeight", [Pure]> {
  let summary = "the weight gradient of GroupedMatMul: per-expert sums of outer products";
  let description = [{
    `dW[e] = sum over the rows s with idx[s] = e of op(X[s]^T dY[s])` for
    e in [0, num_experts): X [S, I], dY [S, O], idx [S] (negative indices
    count from the end). With `transB = 1` dW is [E, O, I] and each term
    dY[s]^T X[s]; with `transB = 0` dW is [E, I, O] and each term
    X[s]^T dY[s]: the layout of the forward's W. An expert no row routes to
    gets zeros. X and dY are f32, bf16 or f16 of one type; dW has their
    type (X2).

    ```mlir
    %dw = graph.GroupedMatMulGradWeight %x, %dy, %idx {num_experts = 8 : i64, transB = 1 : i64} : (tensor<256x64xf32>, tensor<256x128xf32>, tensor<256xi64>) -> tensor<8x128x64xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, AnyTensor:$dY, AnyTensor:$indices,
                   ConfinedAttr<I64Attr, [IntMinValue<1>]>:$num_experts,
                   ConfinedAttr<I64Attr, [IntMinValue<0>, IntMaxValue<1>]>:$transB);
  let results = (outs AnyTensor:$dW);
}

#endif // STRAIT_DIALECT_GRAPH_GRAPHEXPERTOPS_TD
