//===- SplitStages.cpp - One function per pipeline stage ------------------===//

#include "strait/Dialect/Dist/DistOps.h"
#include "strait/Dialect/Dist/DistPasses.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace strait::dist {
#define GEN_PASS_DEF_DISTSPLITSTAGES
#include "strait/Dialect/Dist/DistPasses.h.inc"
} // namespace strait::dist

using namespace mlir;
using namespace strait;
using namespace strait::dist;

namespace {

constexpr llvm::StringLiteral kNameAttr = "graph.name";

struct SplitStagesPass : public dist::impl::DistSplitStagesBase<SplitStagesPass> {
  void runOnOperation() override;
  LogicalResult buildStage(func::FuncOp main, int64_t stage, OpBuilder &builder);
};

} // namespace

LogicalResult SplitStagesPass::buildStage(func::FuncOp main, int64_t stage,
                                          OpBuilder &builder) {
  SmallVector<Operation *> ops;
  llvm::SetVector<BlockArgument> args;
  for (Operation &op : main.getBody().front()) {
    if (isa<func::ReturnOp>(op))
      continue;
    std::optional<int64_t> s = getStage(&op);
    if (!s)
      return op.emitError("op has no dist.stage; run dist-assign-stages first");
    if (*s != stage)
      continue;
    ops.push_back(&op);
    for (Value v : op.getOperands()) {
      if (auto arg = dyn_cast<BlockArgument>(v)) {
        args.insert(arg);
        continue;
      }
      std::optional<int64_t> from = getStage(v.getDefiningOp());
      if (from != stage)
        return op.emitError() << "operand crosses from stage " << from.value_or(-1)
                              << " to stage " << stage
                              << " without dist.recv; run dist-insert-comm first";
    }
  }
  // Results: the outputs of @main this stage produces, in order.
  auto ret = cast<func::ReturnOp>(main.getBody().front().getTerminator());
  SmallVector<unsigned> resultIdx;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    if (isa<BlockArgument>(v))
      return ret.emitError() << "result " << i
                             << " of @main is an argument; a stage cannot output its input";
    if (getStage(v.getDefiningOp()) == stage)
      resultIdx.push_back(i);
  }
  SmallVector<BlockArgument> argList(args.begin(), args.end());
  llvm::sort(argList, [](BlockArgument a, BlockArgument b) {
    return a.getArgNumber() < b.getArgNumber();
  });
  SmallVector<Type> argTypes, resultTypes;
  for (BlockArgument a : argList)
    argTypes.push_back(a.getType());
  for (unsigned i : resultIdx)
    resultTypes.push_back(ret.getOperand(i).getType());

  auto func = builder.create<func::FuncOp>(
      main.getLoc(), ("stage" + llvm::Twine(stage)).str(),
      builder.getFunctionType(argTypes, resultTypes));
  for (NamedAttribute a : main->getDiscardableAttrs())
    func->setAttr(a.getName(), a.getValue());
  setStage(func, stage);
  for (auto [i, a] : llvm::enumerate(argList))
    if (auto name = main.getArgAttr(a.getArgNumber(), kNameAttr))
      func.setArgAttr(i, kNameAttr, name);
  for (auto [i, r] : llvm::enumerate(resultIdx))
    if (auto name = main.getResultAttr(r, kNameAttr))
      func.setResultAttr(i, kNameAttr, name);

  Block *body = func.addEntryBlock();
  IRMapping mapping;
  for (auto [i, a] : llvm::enumerate(argList))
    mapping.map(a, body->getArgument(i));
  OpBuilder inner = OpBuilder::atBlockEnd(body);
  for (Operation *op : ops)
    inner.clone(*op, mapping);
  SmallVector<Value> results;
  for (unsigned i : resultIdx)
    results.push_back(mapping.lookup(ret.getOperand(i)));
  inner.create<func::ReturnOp>(ret.getLoc(), results);
  return success();
}

void SplitStagesPass::runOnOperation() {
  ModuleOp module = getOperation();
  PlanAttr plan = getPlan(module);
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!plan || !main || main.isExternal()) {
    module.emitError("dist-split-stages needs a dist.plan and a function @main; run "
                     "dist-assign-stages first");
    return signalPassFailure();
  }
  OpBuilder builder(main);
  for (int64_t s = 0, e = plan.getNumStages(); s < e; ++s) {
    if (module.lookupSymbol(("stage" + llvm::Twine(s)).str())) {
      module.emitError() << "a symbol @stage" << s << " exists already";
      return signalPassFailure();
    }
    builder.setInsertionPoint(main);
    if (failed(buildStage(main, s, builder)))
      return signalPassFailure();
  }
  main.erase();
}
