//===- KernelList.cpp - The distinct kernels of a training step -----------===//

#include "strait/Analysis/KernelList.h"
#include "strait/Analysis/IRCostGraph.h"

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Interfaces/CostOpInterface.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace strait;

static constexpr llvm::StringLiteral kKernelAttr = "graph.kernel";
static constexpr llvm::StringLiteral kFusedKernelsAttr = "graph.fused_kernels";

void strait::tagKernelSignatures(func::FuncOp func) {
  Builder b(func.getContext());
  for (Operation &op : func.getBody().front())
    if (!isa<graph::ConstantOp, graph::ReadVariableOp, func::ReturnOp>(op))
      op.setAttr(kKernelAttr, b.getStringAttr(kernelSignature(&op)));
}

llvm::Expected<OwningOpRef<ModuleOp>>
strait::buildKernelModule(func::FuncOp func, unsigned *numKernels, func::FuncOp fused) {
  llvm::Expected<IRCostGraph> costs = buildCostGraph(func);
  if (!costs)
    return costs.takeError();
  SmallVector<Operation *> kernels;
  SmallVector<std::string> names;
  for (Operation *op : costs->kernelOps)
    if (llvm::none_of(op->getAttrs(),
                      [](NamedAttribute a) { return isa<SymbolRefAttr>(a.getValue()); })) {
      kernels.push_back(op);
      names.push_back(kernelSignature(op));
    }
  if (fused) {
    // The bytes the cost model gives each signature: the members' shares.
    llvm::StringMap<double> bytes;
    for (Operation &op : func.getBody().front())
      if (auto cost = dyn_cast<CostOpInterface>(op))
        bytes.try_emplace(kernelSignature(&op), cost.getBytesRead() + cost.getBytesWritten());
    llvm::StringSet<> seen;
    for (Operation &op : fused.getBody().front()) {
      auto members = op.getAttrOfType<ArrayAttr>(kFusedKernelsAttr);
      if (!isa<graph::FusedElementwiseOp>(op) || !members || members.empty())
        continue;
      std::string name = kernelSignature(&op);
      if (!seen.insert(name).second)
        continue;
      double total = 0;
      for (auto m : members.getAsValueRange<StringAttr>())
        total += std::max(bytes.lookup(m), 1.0);
      for (auto m : members.getAsValueRange<StringAttr>())
        name += ("|" + m + "=" + llvm::formatv("{0:e6}", std::max(bytes.lookup(m), 1.0) / total).str())
                    .str();
      kernels.push_back(&op);
      names.push_back(name);
    }
  }
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
  for (auto [op, name] : llvm::zip(kernels, names)) {
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
    copy->setLoc(NameLoc::get(b.getStringAttr(name)));
  }
  b.create<func::ReturnOp>(func.getLoc());
  if (numKernels)
    *numKernels = kernels.size();
  return module;
}
