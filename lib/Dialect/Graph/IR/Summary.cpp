//===- Summary.cpp - Human-readable summary of an imported model ----------===//

#include "strait/Dialect/Graph/Summary.h"
#include "strait/Dialect/Graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Format.h"

using namespace mlir;
using namespace strait::graph;

ModelSummary strait::graph::summarize(ModuleOp module) {
  ModelSummary s;
  for (auto var : module.getOps<VariableOp>()) {
    auto type = cast<RankedTensorType>(var.getType());
    ++s.numVariables;
    s.numParameters += type.getNumElements();
    s.parameterBytes += type.getNumElements() *
                        ((type.getElementType().getIntOrFloatBitWidth() + 7) / 8);
  }
  module.walk([&](Operation *op) {
    if (!isa<GraphDialect>(op->getDialect()) || isa<VariableOp>(op))
      return;
    for (Type t : op->getResultTypes())
      if (auto st = dyn_cast<ShapedType>(t); !st || !st.hasStaticShape())
        s.allStatic = false;
    if (isa<ConstantOp>(op)) {
      ++s.numConstants;
      return;
    }
    if (isa<ReadVariableOp>(op))
      return;
    ++s.numOps;
    ++s.opHistogram[op->getName().stripDialect()];
  });
  return s;
}

static void printValues(llvm::raw_ostream &os, StringRef what, TypeRange types,
                        function_ref<StringAttr(unsigned)> nameOf) {
  for (auto [i, t] : llvm::enumerate(types)) {
    StringAttr name = nameOf(i);
    os << "  " << what << " " << (name ? name.getValue() : StringRef("?")) << ": " << t
       << "\n";
  }
}

void strait::graph::printSummary(ModuleOp module, const ModelSummary &s,
                                 llvm::raw_ostream &os) {
  for (auto func : module.getOps<func::FuncOp>()) {
    os << "function @" << func.getName() << "\n";
    printValues(os, "input ", func.getArgumentTypes(), [&](unsigned i) {
      return func.getArgAttrOfType<StringAttr>(i, "graph.name");
    });
    printValues(os, "output", func.getResultTypes(), [&](unsigned i) {
      return func.getResultAttrOfType<StringAttr>(i, "graph.name");
    });
  }
  os << "ops: " << s.numOps << " (" << s.opHistogram.size() << " types), constants: "
     << s.numConstants << ", shapes: " << (s.allStatic ? "all static" : "some dynamic")
     << "\n";
  os << "parameters: " << s.numParameters << " in " << s.numVariables << " variables, "
     << llvm::format("%.1f", s.parameterBytes / 1048576.0) << " MiB\n";
  SmallVector<std::pair<int64_t, StringRef>> hist;
  for (auto &e : s.opHistogram)
    hist.push_back({e.second, e.first()});
  llvm::sort(hist, [](auto &a, auto &b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  os << "op histogram:\n";
  for (auto &[count, name] : hist)
    os << llvm::format("  %-28s %6lld\n", name.str().c_str(), (long long)count);
}
