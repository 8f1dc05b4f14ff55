//===- DistAttrs.td - Distribution dialect attributes ------*- tablegen -*-===//

#ifndef STRAIT_DIALECT_DIST_DISTATTRS_TD
#define STRAIT_DIALECT_DIST_DISTATTRS_TD

include "strait/Dialect/Dist/DistDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/EnumAttr.td"

class Dist_I32Enum<string name, string summary, list<I32EnumAttrCase> cases>
    : I32EnumAttr<name, summary, cases> {
  let cppNamespace = "::strait::dist";
  let genSpecializedAttr = 0;
}

class Dist_EnumAttr<EnumAttrInfo info, string mnemonic>
    : EnumAttr<Dist_Dialect, info, mnemonic> {
  let assemblyFormat = "`<` $value `>`";
}

def Dist_Schedule : Dist_I32Enum<"Schedule", "pipeline schedule", [
  I32EnumAttrCase<"gpipe", 0>, I32EnumAttrCase<"one_f_one_b", 1>]>;
def Dist_ScheduleAttr : Dist_EnumAttr<Dist_Schedule, "schedule">;

def Dist_Reduction : Dist_I32Enum<"Reduction", "reduction of an all-reduce", [
  I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"mean", 1>]>;
def Dist_ReductionAttr : Dist_EnumAttr<Dist_Reduction, "reduction">;

def Dist_Codec : Dist_I32Enum<"Codec", "compression of a transfer", [
  I32EnumAttrCase<"topk", 0>, I32EnumAttrCase<"int8", 1>,
  I32EnumAttrCase<"int4", 2>, I32EnumAttrCase<"fp16", 3>,
  I32EnumAttrCase<"bf16", 4>, I32EnumAttrCase<"topk_int8", 5>,
  I32EnumAttrCase<"topk_int4", 6>, I32EnumAttrCase<"int2", 7>,
  I32EnumAttrCase<"int3", 8>, I32EnumAttrCase<"aqsgd_int2", 9>,
  I32EnumAttrCase<"aqsgd_int3", 10>, I32EnumAttrCase<"aqsgd_int4", 11>]>;
def Dist_CodecAttr : Dist_EnumAttr<Dist_Codec, "codec">;

class Dist_Attr<string name, string attrMnemonic> : AttrDef<Dist_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def Dist_StageAttr : Dist_Attr<"Stage", "stage"> {
  let summary = "The pipeline stage an op (or a stage function) belongs to";
  let description = [{
    Put on ops as the discardable attribute `dist.stage` by
    `dist-assign-stages` and on the functions `dist-split-stages` creates.
    The index is below the number of stages of the module's plan (D1).

    ```mlir
    %y = graph.Relu %x {dist.stage = #dist.stage<1>} : tensor<2x4xf32>
    ```
  }];
  let parameters = (ins "int64_t":$index);
  let assemblyFormat = "`<` $index `>`";
  let genVerifyDecl = 1;
}

def Dist_PlacementAttr : Dist_Attr<"Placement", "placement"> {
  let summary = "One stage of a plan: its devices (data-parallel replicas) and ranks";
  let description = [{
    `devices[r]` is the cluster device of replica `r`, `ranks[r]` the rank
    that runs it in the exported job. Ranks are distinct, non-negative, and
    there is one per device (D2).

    ```mlir
    #dist.placement<stage = 0, devices = ["rank0", "rank1"], ranks = [0, 1]>
    ```
  }];
  let parameters = (ins "int64_t":$stage, "::mlir::ArrayAttr":$devices,
                        "::mlir::DenseI64ArrayAttr":$ranks);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Dist_PlanAttr : Dist_Attr<"Plan", "plan"> {
  let summary = "The module's distribution plan";
  let description = [{
    Stages in order (`stages[i]` is a `#dist.placement` with `stage = i`,
    D3), every rank used once across the stages (D4), the micro-batch count
    (>= 1) and the pipeline schedule.

    ```mlir
    module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1,
        stages = [#dist.placement<stage = 0, devices = ["rank0"], ranks = [0]>,
                  #dist.placement<stage = 1, devices = ["rank1"], ranks = [1]>]>}
    ```
  }];
  let parameters = (ins EnumParameter<Dist_Schedule>:$schedule,
                        "int64_t":$micro_batches, "::mlir::ArrayAttr":$stages);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The placement of stage `index` (the verifier guarantees the order).
    PlacementAttr getStage(int64_t index) const {
      return ::llvm::cast<PlacementAttr>(getStages()[index]);
    }
    int64_t getNumStages() const { return getStages().size(); }
    /// Total number of ranks over all stages.
    int64_t getNumRanks() const;
  }];
}

#endif // STRAIT_DIALECT_DIST_DISTATTRS_TD
