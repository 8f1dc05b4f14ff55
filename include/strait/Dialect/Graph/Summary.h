//===- Summary.h - Human-readable summary of an imported model --*- C++ -*-===//

#ifndef STRAIT_DIALECT_GRAPH_SUMMARY_H
#define STRAIT_DIALECT_GRAPH_SUMMARY_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

namespace strait::graph {

struct ModelSummary {
  int64_t numOps = 0;               ///< graph ops in functions (no constants)
  int64_t numConstants = 0;
  int64_t numVariables = 0;
  int64_t numParameters = 0;        ///< elements of all variables
  int64_t parameterBytes = 0;
  bool allStatic = true;            ///< every value has a static shape
  llvm::StringMap<int64_t> opHistogram;
};

/// Counts the ops, variables and parameters of `module`.
ModelSummary summarize(mlir::ModuleOp module);

/// Prints the summary with the entry function's signature.
void printSummary(mlir::ModuleOp module, const ModelSummary &summary,
                  llvm::raw_ostream &os);

} // namespace strait::graph

#endif // STRAIT_DIALECT_GRAPH_SUMMARY_H
