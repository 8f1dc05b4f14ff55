//===- ImportReduction.cpp - Reduce* and Arg* ONNX ops --------------------===//

#include "NodeImporter.h"

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

namespace {

/// Reduce ops: axes are an attribute before `axesInputSince` (13 for
/// ReduceSum, 18 for the rest) and an optional input from then on.
template <typename OpTy>
LogicalResult importReduce(NodeImporter &n) {
  if (failed(n.checkAttributes({"axes", "keepdims", "noop_with_empty_axes"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> keep = n.getInt("keepdims", 1), noop = n.getInt("noop_with_empty_axes", 0);
  FailureOr<SmallVector<int64_t>> axes =
      n.input(1) ? n.constantInts(1, "axes") : n.getInts("axes");
  if (failed(x) || failed(keep) || failed(noop) || failed(axes))
    return failure();
  if (auto t = dyn_cast<RankedTensorType>(n.inputType(0))) {
    for (int64_t &a : *axes) {
      FailureOr<int64_t> norm = graph::normalizeAxis(n.location(), a, t.getRank(), "axis");
      if (failed(norm))
        return failure();
      a = *norm;
    }
    llvm::sort(*axes);
  }
  FailureOr<Values> r = n.create<OpTy>(
      *x, {n.named("axes", n.i64s(*axes)), n.named("keepdims", n.i64(*keep)),
           n.named("noop_with_empty_axes", n.i64(*noop))});
  return failed(r) ? failure() : n.setResults(*r);
}

template <typename OpTy>
LogicalResult importArg(NodeImporter &n) {
  if (failed(n.checkAttributes({"axis", "keepdims", "select_last_index"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> axis = n.getInt("axis", 0), keep = n.getInt("keepdims", 1),
                     last = n.getInt("select_last_index", 0);
  if (failed(x) || failed(axis) || failed(keep) || failed(last))
    return failure();
  FailureOr<Values> r =
      n.create<OpTy>(*x, {n.named("axis", n.i64(*axis)), n.named("keepdims", n.i64(*keep)),
                          n.named("select_last_index", n.i64(*last))});
  return failed(r) ? failure() : n.setResults(*r);
}

} // namespace

void strait::onnximport::registerReductionImporters(OpRegistry &r) {
  using namespace graph;
  r.add("ReduceSum", 1, importReduce<ReduceSumOp>);
  r.add("ReduceMean", 1, importReduce<ReduceMeanOp>);
  r.add("ReduceMax", 1, importReduce<ReduceMaxOp>);
  r.add("ReduceMin", 1, importReduce<ReduceMinOp>);
  r.add("ReduceProd", 1, importReduce<ReduceProdOp>);
  r.add("ReduceL1", 1, importReduce<ReduceL1Op>);
  r.add("ReduceL2", 1, importReduce<ReduceL2Op>);
  r.add("ReduceLogSum", 1, importReduce<ReduceLogSumOp>);
  r.add("ReduceLogSumExp", 1, importReduce<ReduceLogSumExpOp>);
  r.add("ReduceSumSquare", 1, importReduce<ReduceSumSquareOp>);
  r.add("ArgMax", 1, importArg<ArgMaxOp>);
  r.add("ArgMin", 1, importArg<ArgMinOp>);
}
