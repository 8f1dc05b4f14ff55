//===- DistDialect.cpp - Distribution dialect and its attributes ----------===//
//
// Registration, the attribute verifiers (constraints D1-D4 of
// docs/distribution-dialect.md) and the dialect attribute verifier for
// `dist.stage` on foreign ops and `dist.plan` on modules.
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Dist/DistDialect.h"
#include "strait/Dialect/Dist/DistOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace strait::dist;

#include "strait/Dialect/Dist/DistDialect.cpp.inc"
#include "strait/Dialect/Dist/DistEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "strait/Dialect/Dist/DistAttrs.cpp.inc"

void DistDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "strait/Dialect/Dist/DistAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "strait/Dialect/Dist/DistOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

LogicalResult StageAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                int64_t index) {
  if (index < 0)
    return emitError() << "D1: stage index must be non-negative, got " << index;
  return success();
}

LogicalResult PlacementAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                    int64_t stage, ArrayAttr devices,
                                    DenseI64ArrayAttr ranks) {
  if (stage < 0)
    return emitError() << "D2: stage index must be non-negative, got " << stage;
  if (!devices || !ranks)
    return emitError() << "D2: a placement needs devices and ranks";
  if (ranks.empty())
    return emitError() << "D2: stage " << stage << " has no ranks";
  if (devices.size() != static_cast<size_t>(ranks.size()))
    return emitError() << "D2: stage " << stage << " has " << devices.size()
                       << " devices but " << ranks.size() << " ranks";
  for (Attribute d : devices)
    if (!llvm::isa<StringAttr>(d))
      return emitError() << "D2: device names must be strings";
  llvm::DenseSet<int64_t> seen;
  for (int64_t r : ranks.asArrayRef())
    if (r < 0 || !seen.insert(r).second)
      return emitError() << "D2: stage " << stage << " lists rank " << r
                         << (r < 0 ? " (negative)" : " twice");
  return success();
}

LogicalResult PlanAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               Schedule, int64_t microBatches, ArrayAttr stages) {
  if (microBatches < 1)
    return emitError() << "D3: micro_batches must be at least 1, got " << microBatches;
  if (!stages || stages.empty())
    return emitError() << "D3: a plan needs at least one stage";
  llvm::DenseSet<int64_t> ranks;
  for (auto [i, a] : llvm::enumerate(stages)) {
    auto p = llvm::dyn_cast<PlacementAttr>(a);
    if (!p)
      return emitError() << "D3: stage " << i << " is not a #dist.placement";
    if (p.getStage() != static_cast<int64_t>(i))
      return emitError() << "D3: stages[" << i << "] is the placement of stage "
                         << p.getStage();
    for (int64_t r : p.getRanks().asArrayRef())
      if (!ranks.insert(r).second)
        return emitError() << "D4: rank " << r << " is used by more than one stage";
  }
  for (int64_t r = 0, e = ranks.size(); r < e; ++r)
    if (!ranks.contains(r))
      return emitError() << "D4: ranks must be 0.." << e - 1 << "; rank " << r
                         << " is missing";
  return success();
}

int64_t PlanAttr::getNumRanks() const {
  int64_t n = 0;
  for (Attribute a : getStages())
    n += llvm::cast<PlacementAttr>(a).getRanks().size();
  return n;
}

//===----------------------------------------------------------------------===//
// Dialect attributes on other ops
//===----------------------------------------------------------------------===//

LogicalResult DistDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  if (attr.getName() == kStageAttrName) {
    auto stage = dyn_cast<StageAttr>(attr.getValue());
    if (!stage)
      return op->emitError() << "D1: '" << kStageAttrName
                             << "' must be a #dist.stage attribute";
    auto module = op->getParentOfType<ModuleOp>();
    if (PlanAttr plan = module ? getPlan(module) : PlanAttr())
      if (stage.getIndex() >= plan.getNumStages())
        return op->emitError() << "D1: stage " << stage.getIndex()
                               << " is not in the plan, which has "
                               << plan.getNumStages() << " stages";
    return success();
  }
  if (attr.getName() == kPlanAttrName) {
    if (!isa<PlanAttr>(attr.getValue()))
      return op->emitError() << "'" << kPlanAttrName << "' must be a #dist.plan attribute";
    if (!isa<ModuleOp>(op))
      return op->emitError() << "'" << kPlanAttrName << "' belongs on a module";
    return success();
  }
  // Marks a transfer of a backward value (dist-insert-comm): the exporter
  // orders every rank's forwards before its backwards.
  if (attr.getName() == "dist.backward") {
    if (!isa<UnitAttr>(attr.getValue()) || !isa<SendOp, RecvOp>(op))
      return op->emitError()
             << "'dist.backward' is a unit attribute of dist.send and dist.recv";
    return success();
  }
  // Marks a transfer of a per-step value (an accumulated gradient; a tied
  // variable's partial gradient, dist-insert-comm): the exporter runs it
  // once per step, after the last micro-batch.
  if (attr.getName() == "dist.per_step") {
    if (!isa<UnitAttr>(attr.getValue()) || !isa<SendOp, RecvOp>(op))
      return op->emitError()
             << "'dist.per_step' is a unit attribute of dist.send and dist.recv";
    return success();
  }
  // The planner's 1F1B warm-up forwards per stage (dist-assign-stages), for
  // the exporter's order.
  if (attr.getName() == "dist.warmup") {
    auto warmup = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!warmup || !isa<ModuleOp>(op) ||
        llvm::any_of(warmup.asArrayRef(), [](int64_t w) { return w < 0; }))
      return op->emitError()
             << "'dist.warmup' is an array<i64> of non-negative counts on a module";
    return success();
  }
  // Bytes each stage's devices have left beside the planner's peak memory
  // (dist-assign-stages; negative where a stage does not fit), for the
  // error-feedback residuals dist-insert-compression adds.
  if (attr.getName() == kMemoryLeftAttrName) {
    auto left = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    PlanAttr plan = isa<ModuleOp>(op) ? getPlan(cast<ModuleOp>(op)) : PlanAttr();
    if (!left || !isa<ModuleOp>(op))
      return op->emitError() << "'" << kMemoryLeftAttrName
                             << "' is an array<i64> of bytes per stage on a module";
    if (plan && left.size() != plan.getNumStages())
      return op->emitError() << "'" << kMemoryLeftAttrName << "' has " << left.size()
                             << " entries, not one per stage of the plan (" << plan.getNumStages()
                             << ")";
    return success();
  }
  // Adaptive top-k bounds of a transfer (dist-insert-compression
  // adaptive-topk): the runtime adapts the ratio within [min, max].
  if (attr.getName() == "dist.topk_adapt") {
    auto bounds = dyn_cast<DenseF64ArrayAttr>(attr.getValue());
    auto compress = dyn_cast<CompressOp>(op);
    if (!bounds || bounds.size() != 2 || !compress || compress.getCodec() != Codec::topk)
      return op->emitError()
             << "'dist.topk_adapt' is an array<f64: MIN, MAX> on a top-k dist.compress";
    double lo = bounds[0], hi = bounds[1];
    FloatAttr ratio = compress.getRatioAttr();
    double r = ratio ? ratio.getValueAsDouble() : -1;
    if (!(lo > 0 && lo <= r && r <= hi && hi <= 1))
      return op->emitError() << "'dist.topk_adapt' needs 0 < MIN <= ratio <= MAX <= 1, got ["
                             << lo << ", " << hi << "] around ratio " << r;
    return success();
  }
  // Compressed AdamW (dist-insert-compression): the all-reduce that reads
  // this dist.compress reduces exact values for its first N iterations.
  // Compressed AdamW's warm-up codec (dist-insert-compression warmup-codec):
  // a dense codec on a dist.compress that has dist.exact_steps.
  if (attr.getName() == "dist.warmup_codec") {
    auto codec = dyn_cast<CodecAttr>(attr.getValue());
    bool dense = codec && (codec.getValue() == Codec::fp16 || codec.getValue() == Codec::bf16 ||
                           codec.getValue() == Codec::int8 || codec.getValue() == Codec::int4 ||
                           codec.getValue() == Codec::int3 || codec.getValue() == Codec::int2);
    if (!dense || !isa<CompressOp>(op) || !op->hasAttr("dist.exact_steps"))
      return op->emitError() << "'dist.warmup_codec' is a dense codec (fp16, bf16, int8, int4, "
                                "int3, int2) on a dist.compress with 'dist.exact_steps'";
    return success();
  }
  if (attr.getName() == "dist.exact_steps") {
    auto steps = dyn_cast<IntegerAttr>(attr.getValue());
    if (!steps || steps.getInt() < 1 || !isa<CompressOp>(op) ||
        !llvm::all_of(op->getUsers(), [](Operation *u) { return isa<AllReduceOp>(u); }))
      return op->emitError() << "'dist.exact_steps' is a step count >= 1 on a dist.compress "
                                "that only dist.all_reduce reads";
    return success();
  }
  return op->emitError() << "unknown distribution attribute '"
                         << attr.getName().getValue() << "'";
}

std::optional<int64_t> strait::dist::getStage(Operation *op) {
  if (auto s = op->getAttrOfType<StageAttr>(DistDialect::kStageAttrName))
    return s.getIndex();
  return std::nullopt;
}

void strait::dist::setStage(Operation *op, int64_t stage) {
  op->setAttr(DistDialect::kStageAttrName, StageAttr::get(op->getContext(), stage));
}

PlanAttr strait::dist::getPlan(Operation *module) {
  return module->getAttrOfType<PlanAttr>(DistDialect::kPlanAttrName);
}
