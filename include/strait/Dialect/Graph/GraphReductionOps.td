//===- GraphReductionOps.td - Reductions -------------------*- tablegen -*-===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHREDUCTIONOPS_TD
#define STRAIT_DIALECT_GRAPH_GRAPHREDUCTIONOPS_TD

include "strait/Dialect/Graph/GraphBase.td"

def Graph_ReduceSumOp : Graph_ReduceOp<"ReduceSum", "sum over axes">;
def Graph_ReduceMeanOp : Graph_ReduceOp<"ReduceMean", "mean over axes">;
def Graph_ReduceMaxOp : Graph_ReduceOp<"ReduceMax", "maximum over axes">;
def Graph_ReduceMinOp : Graph_ReduceOp<"ReduceMin", "minimum over axes">;
def Graph_ReduceProdOp : Graph_ReduceOp<"ReduceProd", "product over axes">;
def Graph_ReduceL1Op : Graph_ReduceOp<"ReduceL1", "sum of |x| over axes">;
def Graph_ReduceL2Op : Graph_ReduceOp<"ReduceL2", "sqrt of the sum of x^2 over axes">;
def Graph_ReduceLogSumOp : Graph_ReduceOp<"ReduceLogSum", "log of the sum over axes">;
def Graph_ReduceLogSumExpOp : Graph_ReduceOp<"ReduceLogSumExp", "log-sum-exp over axes">;
def Graph_ReduceSumSquareOp : Graph_ReduceOp<"ReduceSumSquare", "sum of x^2 over axes">;

class Graph_ArgOp<string mnemonic, string summaryText>
    : Graph_GenericOp<mnemonic, [Pure]> {
  let summary = summaryText;
  let description = [{
    ONNX `}] # mnemonic # [{`; the result holds int64 indices.

    ```mlir
    %i = graph.}] # mnemonic # [{ %x {axis = 1 : i64, keepdims = 0 : i64} : (tensor<2x3xf32>) -> tensor<2xi64>
    ```
  }];
  let arguments = (ins AnyTensor:$data, DefaultValuedAttr<I64Attr, "0">:$axis,
                   DefaultValuedAttr<I64Attr, "1">:$keepdims,
                   DefaultValuedAttr<I64Attr, "0">:$select_last_index);
  let results = (outs AnyTensor:$reduced);
  let extraClassDefinition = Graph_InferVia<"inferArgReduce">.inferDef;
}
def Graph_ArgMaxOp : Graph_ArgOp<"ArgMax", "index of the maximum along axis">;
def Graph_ArgMinOp : Graph_ArgOp<"ArgMin", "index of the minimum along axis">;

#endif // STRAIT_DIALECT_GRAPH_GRAPHREDUCTIONOPS_TD
