//===- InferShapes.cpp - Refine types and fold shape arithmetic -----------===//

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHINFERSHAPES
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;

/// `inferred` with the element type of `current`. Refinement is about
/// shapes: an op infers its results' element types from its operands, but some
/// ops also accept another one that a pass chose on purpose (graph-cast-motion
/// makes LayerNormalization write a 16-bit Y from an f32 X, and keeps
/// AccumulateGrad's f32 total over a 16-bit gradient), which their verifiers
/// admit (isCompatibleReturnTypes). Never changing an element type keeps every
/// element-type relation the verifier accepted; at import the two always agree,
/// since each op was built with its inferred types.
static Type withElementTypeOf(Type current, Type inferred) {
  auto cur = dyn_cast<ShapedType>(current);
  auto inf = dyn_cast<ShapedType>(inferred);
  if (!cur || !inf || cur.getElementType() == inf.getElementType())
    return inferred;
  return inf.clone(cur.getElementType());
}

LogicalResult strait::graph::refineFunction(func::FuncOp func, int64_t *numFolded,
                                            int64_t *numRefined) {
  MLIRContext *ctx = func.getContext();
  OpBuilder builder(ctx);
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) {
    if (op != func)
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
      SmallVector<Type> types;
      if (failed(infer.inferReturnTypes(ctx, op->getLoc(), op->getOperands(),
                                        op->getAttrDictionary(),
                                        op->getPropertiesStorage(),
                                        op->getRegions(), types)))
        return failure();
      for (auto [result, type] : llvm::zip(op->getResults(), types)) {
        Type refined = withElementTypeOf(result.getType(), type);
        if (result.getType() == refined)
          continue;
        if (numRefined)
          ++*numRefined;
        result.setType(refined);
      }
    }
    if (op->hasTrait<OpTrait::ConstantLike>() || op->getNumResults() == 0)
      continue;
    builder.setInsertionPoint(op);
    SmallVector<Value> folded;
    if (succeeded(builder.tryFold(op, folded)) && !folded.empty()) {
      op->replaceAllUsesWith(folded);
      op->erase();
      if (numFolded)
        ++*numFolded;
    }
  }
  // Folding leaves the constants of the folded chains unused.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(func.getBody().front())))
    if (op.use_empty() && isPure(&op) && !op.hasTrait<OpTrait::IsTerminator>())
      op.erase();
  auto ret = cast<func::ReturnOp>(func.getBody().back().getTerminator());
  func.setType(FunctionType::get(ctx, func.getBody().getArgumentTypes(),
                                 ret.getOperandTypes()));
  return success();
}

namespace {

/// Parses "NAME=8x128" into the name and dimensions.
FailureOr<std::pair<std::string, SmallVector<int64_t>>> parseShapeSpec(StringRef spec) {
  auto [name, dims] = spec.split('=');
  if (name.empty() || dims.empty())
    return failure();
  SmallVector<int64_t> shape;
  SmallVector<StringRef> parts;
  dims.split(parts, 'x');
  for (StringRef p : parts) {
    int64_t d;
    if (p.getAsInteger(10, d) || d < 0)
      return failure();
    shape.push_back(d);
  }
  if (dims == "scalar")
    shape.clear();
  return std::make_pair(name.str(), shape);
}

struct GraphInferShapesPass
    : public strait::graph::impl::GraphInferShapesBase<GraphInferShapesPass> {
  using GraphInferShapesBase::GraphInferShapesBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      int64_t folded = 0, refined = 0;
      if (failed(applyInputShapes(func)) || failed(refineFunction(func, &folded, &refined)))
        return signalPassFailure();
      numFolded += folded;
      numRefined += refined;
    }
  }

  LogicalResult applyInputShapes(func::FuncOp func) {
    for (const std::string &spec : inputShapes) {
      auto parsed = parseShapeSpec(spec);
      if (failed(parsed))
        return func.emitError("bad input-shapes entry '")
               << spec << "': expected NAME=DxDx..., e.g. input_ids=8x128";
      bool found = false;
      for (BlockArgument arg : func.getArguments()) {
        auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "graph.name");
        std::string argName = name ? name.str() : "arg" + std::to_string(arg.getArgNumber());
        if (argName != parsed->first)
          continue;
        auto t = cast<TensorType>(arg.getType());
        if (t.hasRank() && t.getRank() != (int64_t)parsed->second.size())
          return func.emitError("input '") << argName << "' has rank " << t.getRank()
                                           << " but the shape given has "
                                           << parsed->second.size() << " dimensions";
        arg.setType(RankedTensorType::get(parsed->second, t.getElementType()));
        found = true;
      }
      if (!found)
        return func.emitError("no input named '") << parsed->first << "'";
    }
    return success();
  }
};

} // namespace
