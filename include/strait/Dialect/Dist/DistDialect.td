//===- DistDialect.td - Strait distribution dialect --------*- tablegen -*-===//
//
// The distribution dialect says where the computation runs: the pipeline
// stage of every op, the module's plan (stages -> devices and ranks,
// micro-batches, schedule) and the communication between stages and
// replicas. See docs/distribution-dialect.md (constraints D1-D10).
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_DIALECT_DIST_DISTDIALECT_TD
#define STRAIT_DIALECT_DIST_DISTDIALECT_TD

include "mlir/IR/OpBase.td"

def Dist_Dialect : Dialect {
  let name = "dist";
  let cppNamespace = "::strait::dist";
  let summary = "Placement, pipeline stages and communication of a model";
  let description = [{
    `dist-assign-stages` puts a `dist.stage = #dist.stage<N>` attribute on
    every op of `@main` and the plan `dist.plan = #dist.plan<...>` on the
    module; `dist-insert-comm` adds `dist.send`/`dist.recv` where a value
    crosses stages and `dist.all_reduce` for gradients of replicated
    parameters (hierarchical over bandwidth islands); `dist-insert-compression`
    puts `dist.compress`/`dist.decompress` around the transfers of slow links;
    `dist-split-stages` makes one function per stage, which the
    DeviceProgram exporter turns into one program per rank (codecs folded
    into the transfers).
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let dependentDialects = ["::mlir::func::FuncDialect"];
  let extraClassDeclaration = [{
    /// Name of the discardable stage attribute on ops and stage functions.
    static constexpr ::llvm::StringLiteral kStageAttrName = "dist.stage";
    /// Name of the plan attribute on the module.
    static constexpr ::llvm::StringLiteral kPlanAttrName = "dist.plan";
    /// Name of the module attribute with the bytes each stage's devices
    /// have left beside the planner's peak memory (dist-assign-stages).
    static constexpr ::llvm::StringLiteral kMemoryLeftAttrName = "dist.memory_left";
  }];
}

#endif // STRAIT_DIALECT_DIST_DISTDIALECT_TD
