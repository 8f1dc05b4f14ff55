//===- KernelList.cpp - The distinct kernels of a training step -----------===//

#include "strait/Analysis/KernelList.h"
#include "strait/Analysis/IRCostGraph.h"

#include "strait/Dialect/Graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using namespace strait;

llvm::Expected<OwningOpRef<ModuleOp>> strait::buildKernelModule(func::FuncOp func,
                                                                unsigned *numKernels) {
  llvm::Expected<IRCostGraph> costs = buildCostGraph(func);
  if (!costs)
    return costs.takeError();
  SmallVector<Operation *> kernels;
  for (Operation *op : costs->kernelOps)
    if (llvm::none_of(op->getAttrs(),
                      [](NamedAttribute a) { return isa<SymbolRefAttr>(a.getValue()); }))
      kernels.push_back(op);
  // Every distinct non-constant operand of a kernel is an argument of its own.
  SmallVector<Type> argTypes;
  for (Operation *op : kernels) {
    llvm::SmallPtrSet<void *, 4> seen; // x * x reads one argument twice
    for (Value v : op->getOperands())
      if (!v.getDefiningOp<graph::ConstantOp>() && seen.insert(v.getAsOpaquePointer()).second)
        argTypes.push_back(v.getType());
  }
  MLIRContext *ctx = func.getContext();
  OpBuilder b(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(func.getLoc());
  b.setInsertionPointToEnd(module->getBody());
  auto main = b.create<func::FuncOp>(func.getLoc(), "main", b.getFunctionType(argTypes, {}));
  Block *body = main.addEntryBlock();
  b.setInsertionPointToEnd(body);
  unsigned arg = 0;
  for (Operation *op : kernels) {
    IRMapping map;
    for (Value v : op->getOperands()) {
      if (map.contains(v))
        continue;
      if (auto c = v.getDefiningOp<graph::ConstantOp>())
        map.map(v, b.clone(*c)->getResult(0));
      else
        map.map(v, body->getArgument(arg++));
    }
    Operation *copy = b.clone(*op, map);
    copy->setLoc(NameLoc::get(b.getStringAttr(kernelSignature(op))));
  }
  b.create<func::ReturnOp>(func.getLoc());
  if (numKernels)
    *numKernels = kernels.size();
  return module;
}
