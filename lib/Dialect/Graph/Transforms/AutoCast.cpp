//===- AutoCast.cpp - graph-autocast --------------------------------------===//
//
// Mixed precision on the forward graph: the GEMM-like ops (MatMul, Gemm,
// Conv, ConvTranspose, and FusedAttention's Q, Kt, V and Y) take bf16 (or
// f16) operands and produce a bf16 result that is cast back to f32 for
// everything else. Runs before
// graph-build-training-step, so the Cast gradient rule carries gradients
// back to f32 at each cast. See docs/training.md, "Mixed precision".
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHAUTOCAST
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;

namespace {

bool isF32Tensor(Type t) {
  auto tt = dyn_cast<TensorType>(t);
  return tt && tt.getElementType().isF32();
}

/// The operands cast to the low type: all but FusedAttention's bias.
unsigned numLowOperands(Operation *op) {
  return isa<FusedAttentionOp>(op) ? 3 : op->getNumOperands();
}

/// The ops the policy runs in low precision: their float operands are all
/// f32 (integer operands do not occur in these ops) and their one result is
/// f32. FusedAttention is a product too: Q, Kt, V and Y go low, its f32
/// statistic LSE and its additive bias stay f32 (see lowOperands).
bool isCandidate(Operation *op) {
  if (auto attention = dyn_cast<FusedAttentionOp>(op))
    return isF32Tensor(attention.getQ().getType()) && isF32Tensor(attention.getKt().getType()) &&
           isF32Tensor(attention.getV().getType()) && isF32Tensor(attention.getY().getType());
  if (!isa<MatMulOp, GemmOp, ConvOp, ConvTransposeOp>(op))
    return false;
  if (op->getNumResults() != 1 || !isF32Tensor(op->getResult(0).getType()))
    return false;
  return llvm::all_of(op->getOperands(),
                      [](Value v) { return isF32Tensor(v.getType()); });
}

struct GraphAutocastPass
    : strait::graph::impl::GraphAutocastBase<GraphAutocastPass> {
  using GraphAutocastBase::GraphAutocastBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    Type low;
    if (precision == "bf16")
      low = BFloat16Type::get(ctx);
    else if (precision == "f16")
      low = Float16Type::get(ctx);
    else {
      module.emitError("graph-autocast: precision must be bf16 or f16 (f32: no autocast), got '")
          << precision << "'";
      return signalPassFailure();
    }
    // The policy needs the forward graph: after the training step the
    // backward ops and the optimizer would be cast as well.
    WalkResult trained = module.walk([](AccumulateGradOp op) {
      op.emitError("graph-autocast runs on the forward graph, before "
                   "graph-build-training-step");
      return WalkResult::interrupt();
    });
    if (trained.wasInterrupted())
      return signalPassFailure();

    SmallVector<Operation *> ops;
    module.walk([&](Operation *op) {
      if (isCandidate(op))
        ops.push_back(op);
    });
    OpBuilder b(ctx);
    for (Operation *op : ops) {
      b.setInsertionPoint(op);
      // One cast per use: a value feeding several products (Q, K and V
      // projections) gets one gradient per cast, summed in f32.
      for (OpOperand &operand : op->getOpOperands().take_front(numLowOperands(op))) {
        Value cast = b.create<CastOp>(op->getLoc(), operand.get(), low);
        operand.set(cast);
        ++numCasts;
      }
      Value result = op->getResult(0);
      auto type = cast<TensorType>(result.getType());
      result.setType(type.clone(low));
      b.setInsertionPointAfter(op);
      auto back = b.create<CastOp>(op->getLoc(), result, type.getElementType());
      result.replaceAllUsesExcept(back.getResult(), back);
      ++numCasts;
      ++numOps;
    }
  }
};

} // namespace
