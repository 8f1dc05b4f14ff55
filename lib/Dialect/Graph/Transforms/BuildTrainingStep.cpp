//===- BuildTrainingStep.cpp - Forward graph to training step -------------===//
//
// graph-build-training-step: selects the trainable variables, switches
// BatchNormalization to batch statistics, tags forward ops, appends the loss,
// differentiates (Autodiff.cpp, rules from GradientOpInterface), and appends
// the per-step part: AccumulateGrad, clipping, optimizer, AssignVariable.
// The IR design is documented in docs/training.md.
//
//===----------------------------------------------------------------------===//

#include "Autodiff.h"

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"
#include "strait/Interfaces/GradientInterface.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/Support/GlobPattern.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <string>

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHBUILDTRAININGSTEP
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;

namespace {

constexpr StringLiteral kNameAttr = "graph.name";
constexpr StringLiteral kStateOfAttr = "graph.optimizer_state_of";
/// On a float variable of a PyTorch export that the exporter does not mark as
/// a parameter: its kind (BUFFER, CONSTANT_TENSOR, unmarked); set by the
/// ONNX importer (lib/Target/ONNX/TorchExport.cpp).
constexpr StringLiteral kTorchKindAttr = "graph.torch_kind";
/// The key of a dropping Dropout (lib/Target/DeviceProgram/KernelLowering.cpp).
constexpr StringLiteral kDropoutKeyAttr = "graph.dropout_key";

/// A trainable variable, the reads of it in the step, and its gradient.
struct Param {
  VariableOp var;
  SmallVector<Value> reads;
  Value grad;
};

DictionaryAttr nameAttr(Builder &b, StringRef name) {
  return b.getDictionaryAttr(b.getNamedAttr(kNameAttr, b.getStringAttr(name)));
}

Value addArgument(func::FuncOp func, Type type, StringRef name) {
  unsigned index = func.getNumArguments();
  Builder b(func.getContext());
  func.insertArgument(index, type, nameAttr(b, name), func.getLoc());
  return func.getArgument(index);
}

/// True when every use of every read of `var` is a BatchNormalization's
/// running mean or variance: such variables are updated, not trained.
bool feedsOnlyRunningStats(VariableOp var, func::FuncOp func) {
  bool any = false, onlyStats = true;
  func.walk([&](ReadVariableOp read) {
    if (read.getVariable() != var.getSymName())
      return;
    for (OpOperand &use : read->getUses()) {
      any = true;
      onlyStats &= isa<BatchNormalizationOp, BatchNormalizationTrainingOp>(use.getOwner()) &&
                   use.getOperandNumber() >= 3;
    }
  });
  return any && onlyStats;
}

/// Whether every value computed from `var` reaches the loss only as the Cos
/// or Sin table of a FusedRotaryEmbedding: a position-encoding buffer (the
/// `inv_freq` of HF's rotary embeddings, a non-trainable buffer in PyTorch
/// that exports as an initializer like any weight).
bool feedsOnlyRotaryTables(VariableOp var, func::FuncOp func) {
  bool any = false, onlyTables = true;
  SmallVector<Value> work;
  DenseSet<Value> seen;
  func.walk([&](ReadVariableOp read) {
    if (read.getVariable() == var.getSymName())
      work.push_back(read.getValue());
  });
  while (!work.empty() && onlyTables) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (isa<FusedRotaryEmbeddingOp>(user) && use.getOperandNumber() > 0) {
        any = true;
        continue;
      }
      if (isa<FusedRotaryEmbeddingOp, func::ReturnOp>(user) || user->getNumResults() == 0) {
        onlyTables = false;
        break;
      }
      llvm::append_range(work, user->getResults());
    }
  }
  return any && onlyTables;
}

class BuildTrainingStep
    : public strait::graph::impl::GraphBuildTrainingStepBase<BuildTrainingStep> {
public:
  using Base::Base;
  void runOnOperation() override;

private:
  LogicalResult checkOptions();
  FailureOr<func::FuncOp> findStep();
  LogicalResult selectTrainable(func::FuncOp func, SmallVectorImpl<Param> &params);
  LogicalResult checkStatisticsNotTrained(ModuleOp module, ArrayRef<Param> params);
  void convertBatchNorms(func::FuncOp func);
  void assignOpIds(func::FuncOp func);
  FailureOr<unsigned> findOutput(func::FuncOp func);
  FailureOr<Value> buildLoss(func::FuncOp func);
  FailureOr<Value> crossEntropy(func::FuncOp func, OpBuilder &b, Value logits);
  Value paddedScores(OpBuilder &b, Value logits);
  LogicalResult buildUpdates(func::FuncOp func, MutableArrayRef<Param> params);
  Value stateVariable(OpBuilder &b, VariableOp var, StringRef suffix);
  void applyOptimizer(OpBuilder &b, Param &p, Value grad, Value lr, Value step);
  void eraseDeadOps(func::FuncOp func);
  void recordSchedule(func::FuncOp func);
  LogicalResult checkLossScale();

  std::optional<SymbolTable> symbols;
  /// Loss scaling: the fixed or initial scale (0: off), the `loss_scale`
  /// argument that seeds the backward and the found_inf flag that
  /// UnscaleGradients computes and the optimizers read.
  double initialScale = 0;
  Value scaleArg, foundInf;
};

} // namespace

LogicalResult BuildTrainingStep::checkOptions() {
  ModuleOp module = getOperation();
  if (loss != "cross-entropy" && loss != "mse" && loss != "output")
    return module.emitError("graph-build-training-step: unknown loss '")
           << loss << "' (expected cross-entropy, mse or output)";
  if (optimizer != "sgd" && optimizer != "adamw" && optimizer != "none")
    return module.emitError("graph-build-training-step: unknown optimizer '")
           << optimizer << "' (expected sgd, adamw or none)";
  if (stepOutputs != "loss" && stepOutputs != "all")
    return module.emitError("graph-build-training-step: unknown step-outputs '")
           << stepOutputs << "' (straitc --step-outputs): expected loss or all";
  if (microBatches < 1)
    return module.emitError("graph-build-training-step: micro-batches must be >= 1");
  // Each message names the option as straitc spells its flag (--NAME).
  auto bad = [&](StringRef name, double value, StringRef expected) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", value);
    return module.emitError("graph-build-training-step: invalid ")
           << name << "=" << text << " (straitc --" << name << "): expected "
           << expected;
  };
  // !(x >= 0) also rejects NaN.
  if (!(lr > 0) || !std::isfinite(lr))
    return bad("lr", lr, "a finite value > 0");
  if (!(minLr >= 0) || minLr > lr)
    return bad("min-lr", minLr, "a value in [0, lr]");
  if (!(momentum >= 0) || momentum >= 1)
    return bad("momentum", momentum, "a value in [0, 1)");
  if (!(beta1 >= 0) || beta1 >= 1)
    return bad("beta1", beta1, "a value in [0, 1)");
  if (!(beta2 >= 0) || beta2 >= 1)
    return bad("beta2", beta2, "a value in [0, 1)");
  if (!(epsilon > 0))
    return bad("eps", epsilon, "a value > 0");
  if (!(weightDecay >= 0) || !std::isfinite(weightDecay))
    return bad("weight-decay", weightDecay, "a finite value >= 0");
  if (!(clipNorm >= 0) || !std::isfinite(clipNorm))
    return bad("clip-norm", clipNorm, "a finite value >= 0 (0: no clipping)");
  if (warmupSteps < 0)
    return bad("warmup-steps", warmupSteps, "a value >= 0");
  if (totalSteps < 0 || (totalSteps > 0 && totalSteps <= warmupSteps))
    return bad("total-steps", totalSteps,
               "0 (no decay) or a value > warmup-steps");
  if (padClasses < 0 || padClasses > (int64_t(1) << 20))
    return bad("pad-classes", static_cast<double>(padClasses),
               "0 (never) or a multiple in [1, 2^20]");
  if (freezeVarianceAfter < 0)
    return module.emitError("graph-build-training-step: invalid freeze-variance-after=")
           << static_cast<int64_t>(freezeVarianceAfter)
           << " (straitc --compressed-adam): expected 0 (never) or a "
           << "step count >= 1";
  if (freezeVarianceAfter > 0 && optimizer != "adamw")
    return module.emitError("graph-build-training-step: freeze-variance-after (straitc "
                            "--compressed-adam) needs optimizer=adamw, not '")
           << optimizer << "'";
  if (nesterov && (optimizer != "sgd" || momentum == 0))
    return module.emitError("graph-build-training-step: nesterov (straitc --nesterov) "
                            "needs optimizer=sgd and momentum > 0");
  return checkLossScale();
}

/// loss-scale: none, dynamic (the initial scale loss-scale-init, changed by
/// the launcher) or a fixed finite scale > 0.
LogicalResult BuildTrainingStep::checkLossScale() {
  ModuleOp module = getOperation();
  auto err = [&]() {
    return module.emitError("graph-build-training-step: ");
  };
  auto num = [](double v) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", v);
    return std::string(text);
  };
  if (lossScale == "none")
    return success();
  bool dynamic = lossScale == "dynamic";
  double fixed = 0;
  // The launcher keeps S in f32 (as GradScaler does): at most FLT_MAX.
  const double maxScale = 3.4028234663852886e38;
  if (!dynamic && (StringRef(lossScale).getAsDouble(fixed) || !(fixed > 0) ||
                   !(fixed <= maxScale)))
    return err() << "invalid loss-scale='" << lossScale
                 << "' (straitc --loss-scale): expected none, dynamic or a value in (0, 3.4e38]";
  initialScale = dynamic ? lossScaleInit.getValue() : fixed;
  if (!(initialScale > 0) || !(initialScale <= maxScale))
    return err() << "invalid loss-scale-init=" << num(lossScaleInit)
                 << " (straitc --loss-scale-init): expected a value in (0, 3.4e38]";
  if (!(lossScaleGrowth > 1) || !std::isfinite(lossScaleGrowth.getValue()))
    return err() << "invalid loss-scale-growth=" << num(lossScaleGrowth)
                 << " (straitc --loss-scale-growth): expected a finite value > 1";
  if (!(lossScaleBackoff > 0) || !(lossScaleBackoff < 1))
    return err() << "invalid loss-scale-backoff=" << num(lossScaleBackoff)
                 << " (straitc --loss-scale-backoff): expected a value in (0, 1)";
  if (lossScaleInterval < 1)
    return err() << "invalid loss-scale-interval=" << static_cast<int64_t>(lossScaleInterval)
                 << " (straitc --loss-scale-interval): expected a step count >= 1";
  if (optimizer == "none" || returnGradients)
    return err() << "loss-scale=" << lossScale << " (straitc --loss-scale) needs an optimizer "
                 << "and no return-gradients (the gradients would come out scaled)";
  return success();
}

FailureOr<func::FuncOp> BuildTrainingStep::findStep() {
  ModuleOp module = getOperation();
  if (auto main = module.lookupSymbol<func::FuncOp>("main"))
    return main;
  auto funcs = llvm::to_vector(module.getOps<func::FuncOp>());
  if (funcs.size() != 1)
    return module.emitError("graph-build-training-step: expected @main or a "
                            "single function, found ")
           << funcs.size() << " functions";
  return funcs.front();
}

/// Compiles glob patterns; an invalid one is a diagnostic.
static FailureOr<SmallVector<llvm::GlobPattern>>
compileGlobs(ModuleOp module, ArrayRef<std::string> patterns) {
  SmallVector<llvm::GlobPattern> globs;
  for (const std::string &p : patterns) {
    llvm::Expected<llvm::GlobPattern> glob = llvm::GlobPattern::create(p);
    if (!glob)
      return module.emitError("invalid variable pattern '")
             << p << "': " << llvm::toString(glob.takeError());
    globs.push_back(std::move(*glob));
  }
  return globs;
}

static bool matchesAny(ArrayRef<llvm::GlobPattern> globs, StringRef name) {
  return llvm::any_of(globs, [&](const llvm::GlobPattern &g) { return g.match(name); });
}

/// One remark for the float variables left untrained because their PyTorch
/// export does not mark them as parameters: how many of each kind, the first
/// few names, and the override.
static void remarkConstants(ModuleOp module, ArrayRef<VariableOp> constants) {
  std::map<std::string, int64_t> perKind;
  for (VariableOp var : constants)
    ++perKind[var->getAttrOfType<StringAttr>(kTorchKindAttr).str()];
  std::string kinds, names;
  for (const auto &[kind, n] : perKind)
    kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
  constexpr size_t kShown = 6;
  for (size_t i = 0; i < constants.size() && i < kShown; ++i) {
    VariableOp var = constants[i];
    std::string shape;
    llvm::raw_string_ostream os(shape);
    llvm::interleave(cast<ShapedType>(var.getType()).getShape(), os, "x");
    names += (i ? ", " : "") + var.getSymName().str() + " [" + shape + "]";
  }
  if (constants.size() > kShown)
    names += ", ... (" + std::to_string(constants.size() - kShown) + " more)";
  bool one = constants.size() == 1;
  mlir::emitRemark(module.getLoc(), "graph-build-training-step: ")
      << constants.size()
      << (one ? " float variable is not a parameter" : " float variables are not parameters")
      << " of the PyTorch export and " << (one ? "stays" : "stay") << " constant ("
      << kinds << "): " << names << ". --trainable GLOB (the pass's trainable=) chooses the "
      << "set instead: --trainable '*' trains every float variable";
}

LogicalResult BuildTrainingStep::selectTrainable(func::FuncOp func,
                                                 SmallVectorImpl<Param> &params) {
  ModuleOp module = getOperation();
  auto train = compileGlobs(module, trainable);
  auto freeze = compileGlobs(module, frozen);
  if (failed(train) || failed(freeze))
    return failure();
  llvm::StringMap<size_t> index;
  SmallVector<VariableOp> constants; // not torch parameters (graph.torch_kind)
  for (auto var : module.getOps<VariableOp>()) {
    if (!strait::detail::isFloatTensor(var.getType()) || var.getFrozen())
      continue;
    StringRef name = var.getSymName();
    bool selected = (train->empty() || matchesAny(*train, name)) &&
                    !matchesAny(*freeze, name);
    if (!selected) {
      var.setFrozen(true);
      continue;
    }
    if (feedsOnlyRunningStats(var, func))
      continue;
    if (feedsOnlyRotaryTables(var, func)) {
      var.setFrozen(true);
      continue;
    }
    // The importer marks the float initializers of a PyTorch export that
    // the exporter does not list as parameters (buffers, its own constants):
    // torch does not train them, and neither does the default set.
    if (train->empty() && var->getAttrOfType<StringAttr>(kTorchKindAttr)) {
      var.setFrozen(true);
      constants.push_back(var);
      continue;
    }
    index[name] = params.size();
    params.push_back(Param{var, {}, Value()});
  }
  if (!constants.empty())
    remarkConstants(module, constants);
  func.walk([&](ReadVariableOp read) {
    auto it = index.find(read.getVariable());
    if (it != index.end())
      params[it->second].reads.push_back(read.getValue());
  });
  numTrainable = params.size();
  return checkStatisticsNotTrained(module, params);
}

/// A trainable variable that is also a BatchNormalization's running mean or
/// variance: an exporter merged a buffer into a parameter of equal value. The
/// optimizer and the running average would both assign it.
LogicalResult BuildTrainingStep::checkStatisticsNotTrained(ModuleOp module,
                                                           ArrayRef<Param> params) {
  if (optimizer == "none")
    return success(); // nothing is assigned
  auto isStatistic = [](OpOperand &use) {
    return isa<BatchNormalizationOp, BatchNormalizationTrainingOp>(use.getOwner()) &&
           use.getOperandNumber() >= 3;
  };
  std::string names;
  for (const Param &p : params)
    if (llvm::any_of(p.reads, [&](Value r) { return llvm::any_of(r.getUses(), isStatistic); }))
      names += (names.empty() ? "" : ", ") + VariableOp(p.var).getSymName().str();
  if (names.empty())
    return success();
  return mlir::emitError(module.getLoc(), "graph-build-training-step: trainable variables ")
         << "that are also BatchNormalization running statistics: " << names
         << ". The exporter merged a buffer into a parameter of equal value (torch.onnx."
         << "export merges a fresh BatchNorm's running_var into its weight and running_mean "
         << "into its bias, all ones and zeros: the dynamo exporter with its default "
         << "optimize=True, the TorchScript one (dynamo=False) in eval mode); the optimizer "
         << "and the running average would both assign it. Export with optimize=False "
         << "(dynamo), or with training=torch.onnx.TrainingMode.TRAINING (TorchScript) "
         << "(docs/models.md, \"Exporting your own model\")";
}

/// BatchNormalization uses batch statistics in training; the running
/// statistics it read from variables are updated with AssignVariable. A
/// BatchNormalizationTraining the importer made (training_mode = 1) has its
/// running statistics stored the same way. Each Dropout of ratio > 0 gets
/// a graph.dropout_key: it drops in the training step (docs/training.md).
void BuildTrainingStep::convertBatchNorms(func::FuncOp func) {
  auto store = [&](OpBuilder &b, Location loc, Value stat, Value updated) {
    if (optimizer == "none")
      return;
    if (auto read = stat.getDefiningOp<ReadVariableOp>())
      b.create<AssignVariableOp>(loc, read.getVariableAttr(), updated);
  };
  SmallVector<BatchNormalizationTrainingOp> imported(
      func.getOps<BatchNormalizationTrainingOp>());
  for (BatchNormalizationTrainingOp bn : imported) {
    OpBuilder b(bn);
    b.setInsertionPointAfter(bn);
    store(b, bn.getLoc(), bn.getInputMean(), bn.getRunningMean());
    store(b, bn.getLoc(), bn.getInputVar(), bn.getRunningVar());
  }
  SmallVector<BatchNormalizationOp> bns(func.getOps<BatchNormalizationOp>());
  for (BatchNormalizationOp bn : bns) {
    OpBuilder b(bn);
    auto train = b.create<BatchNormalizationTrainingOp>(
        bn.getLoc(), bn.getX(), bn.getScale(), bn.getB(), bn.getInputMean(),
        bn.getInputVar(), bn.getEpsilonAttr(), bn.getMomentumAttr());
    store(b, bn.getLoc(), bn.getInputMean(), train.getRunningMean());
    store(b, bn.getLoc(), bn.getInputVar(), train.getRunningVar());
    bn.getY().replaceAllUsesWith(train.getY());
    bn.erase();
  }
  // A Dropout with a ratio > 0 drops in the training step: it gets a key,
  // its index among the step's dropouts, from which the runtime derives the
  // mask with the job seed, iteration, micro-batch and replica (the
  // DropoutTraining kernel). Its gradient and a recomputed clone carry the
  // same key, so they regenerate the same mask. Ratio 0 stays the identity.
  int64_t key = 0;
  func.walk([&](DropoutOp d) {
    if (d.getRatio().convertToFloat() > 0)
      d->setAttr(kDropoutKeyAttr, IntegerAttr::get(IntegerType::get(d.getContext(), 64), key++));
  });
}

void BuildTrainingStep::assignOpIds(func::FuncOp func) {
  int64_t next = 0;
  Block &block = func.getBody().front();
  for (Operation &op : block.without_terminator())
    if (auto id = op.getAttrOfType<IntegerAttr>(kOpIdAttr))
      next = std::max(next, id.getInt() + 1);
  Builder b(func.getContext());
  for (Operation &op : block.without_terminator())
    if (!op.hasAttr(kOpIdAttr))
      op.setAttr(kOpIdAttr, b.getI64IntegerAttr(next++));
}

FailureOr<unsigned> BuildTrainingStep::findOutput(func::FuncOp func) {
  if (func.getNumResults() == 0)
    return func.emitOpError("has no output to build a loss from");
  if (output.empty())
    return 0u;
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i)
    if (auto name = func.getResultAttrOfType<StringAttr>(i, kNameAttr);
        name && name.getValue() == output)
      return i;
  return func.emitOpError("has no output named '") << output << "'";
}

/// Softmax cross-entropy of logits [..., V] against i64 labels [...]
/// (flattened to [N, V] and [N]), mean over non-ignored labels.
FailureOr<Value> BuildTrainingStep::crossEntropy(func::FuncOp func, OpBuilder &b,
                                                 Value logits) {
  auto type = dyn_cast<RankedTensorType>(logits.getType());
  if (!type || !type.hasStaticShape() || type.getRank() < 2 ||
      !isa<FloatType>(type.getElementType()))
    return func.emitOpError("cross-entropy needs static float logits of rank "
                            ">= 2, got ")
           << logits.getType();
  ArrayRef<int64_t> shape = type.getShape();
  auto labelType = RankedTensorType::get(shape.drop_back(), b.getI64Type());
  Value labels = addArgument(func, labelType, labelName);
  int64_t rows = type.getNumElements() / shape.back();
  Value scores = paddedScores(b, logits);
  if (!scores)
    scores = type.getRank() > 2 ? b.create<ReshapeOp>(func.getLoc(), logits,
                                                      ArrayRef<int64_t>{rows, shape.back()}, 0)
                                        .getResult()
                                : logits;
  if (type.getRank() > 2)
    labels = b.create<ReshapeOp>(func.getLoc(), labels, ArrayRef<int64_t>{rows}, 0);
  return b
      .create<SoftmaxCrossEntropyLossOp>(func.getLoc(), scores, labels, Value(),
                                         LossReduction::mean,
                                         b.getI64IntegerAttr(ignoreIndex))
      .getResult();
}

/// pad-classes: the scores [rows, Vp] of logits = [Cast](MatMul(A [..., K],
/// B [K, V])) [+ bias [V]] (or of Gemm(A, W [V, K], transB)) recomputed with
/// the classes padded to Vp, a multiple of padClasses: Gemm(A as [rows, K],
/// Concat(B, zeros [K, Vp - V]), mask) (W's rows padded instead) with a mask of 0 for the V classes and -inf for the padding, then
/// the same Cast, then the model's bias padded with zeros (-inf + b = -inf).
/// The padded classes get probability exp(-inf) = 0, so the loss and every
/// gradient are those of the V classes (the padded gradient columns are 0,
/// the padded weight and bias entries' gradients are dropped by Concat's
/// Split); the 16-bit rows of the logits, their gradient and the weights are
/// then 16-byte aligned, which GPU tensor-core GEMMs need (GPT-2's 50257
/// classes become 50304, BERT's 30522 30528). Only when the model outputs are
/// dropped (step-outputs=loss: the unpadded logits become dead code) and the
/// product is at least padClassesMinWork; null otherwise.
Value BuildTrainingStep::paddedScores(OpBuilder &b, Value logits) {
  if (padClasses <= 0 || stepOutputs != "loss")
    return {};
  // An output bias (BERT's masked-LM head: Add(MatMul, bias [V])) is padded
  // with zeros and added after the padded product, in its own type.
  Value classBias, core = logits;
  if (auto add = logits.getDefiningOp<AddOp>()) {
    for (int i = 0; i < 2; ++i) {
      auto t = dyn_cast<RankedTensorType>(add->getOperand(i).getType());
      auto other = add->getOperand(1 - i);
      if (t && t.hasStaticShape() && t.getRank() == 1 && other.hasOneUse() &&
          t.getElementType() == cast<ShapedType>(logits.getType()).getElementType() &&
          t.getDimSize(0) == cast<ShapedType>(logits.getType()).getShape().back()) {
        classBias = add->getOperand(i);
        core = other;
        break;
      }
    }
    if (!classBias)
      return {};
  }
  // The product: MatMul(A [..., K], B [K, V]), or graph-fold-transposes'
  // Gemm(A [rows, K], W [V, K], transB = 1) of a MatMul by Transpose(W)
  // (GPT-2's tied LM head) reshaped to [..., V]; under autocast with the
  // Cast to f32 between them.
  auto inner = [](Value v) {
    auto r = v.getDefiningOp<ReshapeOp>();
    return r && r->getOperand(0).hasOneUse() ? r->getOperand(0) : v;
  };
  Value unshaped = inner(core);
  auto widen = unshaped.getDefiningOp<CastOp>();
  Value product = widen ? widen.getInput() : unshaped;
  if (widen && !product.hasOneUse())
    return {};
  Value a, w;
  bool transB = false;
  Location loc = product.getLoc();
  if (auto mm = product.getDefiningOp<MatMulOp>()) {
    a = mm.getA();
    w = mm.getB();
  } else {
    auto gemm = inner(product).getDefiningOp<GemmOp>();
    if (!gemm || gemm.getC() || gemm.getTransA() || !gemm.getAlpha().isExactlyValue(1.0))
      return {};
    a = gemm.getA();
    w = gemm.getB();
    transB = gemm.getTransB() != 0;
  }
  auto at = dyn_cast<RankedTensorType>(a.getType());
  auto bt = dyn_cast<RankedTensorType>(w.getType());
  if (!at || !bt || !at.hasStaticShape() || !bt.hasStaticShape() || bt.getRank() != 2 ||
      at.getRank() < 2 || at.getElementType() != bt.getElementType() ||
      !isa<FloatType>(bt.getElementType()))
    return {};
  int64_t k = bt.getDimSize(transB ? 1 : 0), v = bt.getDimSize(transB ? 0 : 1),
          rows = at.getNumElements() / k;
  if (v % padClasses == 0 || double(rows) * double(v) * double(k) < double(padClassesMinWork))
    return {};
  int64_t vp = (v + padClasses - 1) / padClasses * padClasses;
  auto et = cast<FloatType>(bt.getElementType());
  if (at.getRank() != 2)
    a = b.create<ReshapeOp>(loc, a, ArrayRef<int64_t>{rows, k}, 0);
  APFloat zero = APFloat::getZero(et.getFloatSemantics());
  // Zero classes after the V: columns of B [K, V], rows of W [V, K].
  auto zerosType = transB ? RankedTensorType::get({vp - v, k}, et)
                          : RankedTensorType::get({k, vp - v}, et);
  Value zeros = b.create<ConstantOp>(
      loc, cast<ElementsAttr>(DenseElementsAttr::get(zerosType, zero)));
  Value weights =
      b.create<ConcatOp>(loc, ValueRange{w, zeros}, b.getI64IntegerAttr(transB ? 0 : 1));
  SmallVector<APFloat> bias(v, zero);
  bias.resize(vp, APFloat::getInf(et.getFloatSemantics(), /*Negative=*/true));
  Value mask = b.create<ConstantOp>(
      loc, cast<ElementsAttr>(DenseElementsAttr::get(RankedTensorType::get({vp}, et), bias)));
  APFloat one(1.0f);
  Value scores = b.create<GemmOp>(loc, a, weights, mask, one, one, false, transB)->getResult(0);
  if (widen)
    scores = b.create<CastOp>(loc, scores, widen.getType().getElementType());
  if (classBias) {
    auto bt1 = cast<RankedTensorType>(classBias.getType());
    auto bet = cast<FloatType>(bt1.getElementType());
    Value pad = b.create<ConstantOp>(
        loc, cast<ElementsAttr>(DenseElementsAttr::get(
                 RankedTensorType::get({vp - v}, bet), APFloat::getZero(bet.getFloatSemantics()))));
    Value padded = b.create<ConcatOp>(loc, ValueRange{classBias, pad}, b.getI64IntegerAttr(0));
    scores = b.create<AddOp>(loc, scores, padded);
  }
  return scores;
}

FailureOr<Value> BuildTrainingStep::buildLoss(func::FuncOp func) {
  FailureOr<unsigned> index = findOutput(func);
  if (failed(index))
    return failure();
  Operation *ret = func.getBody().front().getTerminator();
  Value out = ret->getOperand(*index);
  OpBuilder b(ret);
  Location loc = func.getLoc();
  if (loss == "cross-entropy")
    return crossEntropy(func, b, out);
  auto type = dyn_cast<RankedTensorType>(out.getType());
  if (!type || !type.hasStaticShape() || !isa<FloatType>(type.getElementType()))
    return func.emitOpError("the loss needs a static float output, got ")
           << out.getType();
  if (loss == "output") {
    if (type.getNumElements() != 1)
      return func.emitOpError("loss=output needs a one-element output, got ") << type;
    if (type.getRank() == 0)
      return out;
    return b.create<ReshapeOp>(loc, out, ArrayRef<int64_t>{}, 0).getResult();
  }
  Value target = addArgument(func, type, labelName);
  Value diff = b.create<SubOp>(loc, out, target);
  Value sq = b.create<MulOp>(loc, diff, diff);
  auto axes = llvm::to_vector(llvm::seq<int64_t>(0, type.getRank()));
  return b.create<ReduceMeanOp>(loc, sq, ArrayRef<int64_t>(axes), 0).getResult();
}

/// A zero-initialized, frozen variable holding optimizer state of `var`.
Value BuildTrainingStep::stateVariable(OpBuilder &b, VariableOp var,
                                       StringRef suffix) {
  auto type = cast<RankedTensorType>(var.getType());
  // After the variable and its earlier state variables.
  Operation *after = var;
  auto stateOf = FlatSymbolRefAttr::get(var.getSymNameAttr());
  while (Operation *next = after->getNextNode()) {
    if (next->getAttr(kStateOfAttr) != stateOf)
      break;
    after = next;
  }
  OpBuilder mb(var);
  mb.setInsertionPointAfter(after);
  auto zero = DenseElementsAttr::get(type, mb.getFloatAttr(type.getElementType(), 0));
  auto state = mb.create<VariableOp>(var.getLoc(), (var.getSymName() + suffix).str(),
                                     type, cast<ElementsAttr>(zero), /*frozen=*/true);
  symbols->insert(state, mb.getInsertionPoint());
  state->setAttr(kStateOfAttr, FlatSymbolRefAttr::get(var.getSymNameAttr()));
  return b.create<ReadVariableOp>(var.getLoc(), type, state.getSymName());
}

void BuildTrainingStep::applyOptimizer(OpBuilder &b, Param &p, Value grad,
                                       Value lr, Value step) {
  Location loc = p.var.getLoc();
  Type type = p.var.getType();
  Value param = b.create<ReadVariableOp>(loc, type, p.var.getSymName());
  auto assign = [&](Value from, Value to) {
    auto read = from.getDefiningOp<ReadVariableOp>();
    if (read)
      b.create<AssignVariableOp>(loc, read.getVariableAttr(), to);
  };
  auto f32 = [&](double v) { return b.getF32FloatAttr(static_cast<float>(v)); };
  if (optimizer == "sgd") {
    Value vel = momentum != 0
                    ? stateVariable(b, p.var, ".momentum")
                    : b.create<ConstantOp>(loc, cast<ElementsAttr>(DenseElementsAttr::get(
                                                    cast<ShapedType>(type), 0.0f)))
                          .getResult();
    auto sgd = b.create<SGDOp>(loc, lr, param, grad, vel, foundInf, f32(momentum),
                               f32(weightDecay), b.getI64IntegerAttr(nesterov));
    assign(param, sgd.getNewParam());
    assign(vel, sgd.getNewVelocity());
    return;
  }
  Value m = stateVariable(b, p.var, ".adam_m");
  Value v = stateVariable(b, p.var, ".adam_v");
  auto adam = b.create<AdamWOp>(loc, lr, step, param, grad, m, v, foundInf, f32(beta1),
                                f32(beta2),
                                f32(epsilon), f32(weightDecay),
                                b.getI64IntegerAttr(freezeVarianceAfter));
  assign(param, adam.getNewParam());
  assign(m, adam.getNewM());
  assign(v, adam.getNewV());
}

LogicalResult BuildTrainingStep::buildUpdates(func::FuncOp func,
                                              MutableArrayRef<Param> params) {
  Operation *ret = func.getBody().front().getTerminator();
  OpBuilder b(ret);
  SmallVector<Param *> updated;
  SmallVector<Value> totals;
  for (Param &p : params) {
    if (!p.grad) {
      p.var.emitWarning("variable does not affect the loss; it is not updated");
      continue;
    }
    totals.push_back(b.create<AccumulateGradOp>(
        p.var.getLoc(), p.grad, FlatSymbolRefAttr::get(p.var.getSymNameAttr()),
        b.getI64IntegerAttr(microBatches)));
    updated.push_back(&p);
  }
  // Loss scaling: the accumulated (after partitioning: all-reduced) gradients
  // are unscaled before clipping, as GradScaler.unscale_ precedes
  // clip_grad_norm_; the flag gates every update.
  if (scaleArg && !totals.empty()) {
    auto unscale = b.create<UnscaleGradientsOp>(func.getLoc(), scaleArg, totals);
    totals.assign(unscale.getUnscaled().begin(), unscale.getUnscaled().end());
    foundInf = unscale.getFoundInf();
  }
  if (clipNorm > 0 && !totals.empty()) {
    auto clip = b.create<ClipByGlobalNormOp>(
        func.getLoc(), totals, b.getF32FloatAttr(static_cast<float>(clipNorm)));
    totals.assign(clip.getClipped().begin(), clip.getClipped().end());
  }
  Value lr = addArgument(func, RankedTensorType::get({}, b.getF32Type()), "lr");
  // Under loss scaling AdamW counts the updates it made, not the
  // iterations (a skipped step leaves the count, as GradScaler skips
  // optimizer.step()): the launcher feeds "optimizer_step" (dropout and
  // the codecs keep reading the iteration, "step").
  Value step = addArgument(func, RankedTensorType::get({}, b.getI64Type()),
                           scaleArg && optimizer == "adamw" ? "optimizer_step" : "step");
  for (auto [p, total] : llvm::zip(updated, totals))
    applyOptimizer(b, *p, total, lr, step);
  return success();
}

/// A variable read several times (tied embeddings) gets the sum of the
/// reads' gradients; each Add is tagged with its read's op id.
static void sumReadGradients(func::FuncOp func, MutableArrayRef<Param> params,
                             const DenseMap<Value, Value> &grads) {
  OpBuilder b(func.getBody().front().getTerminator());
  for (Param &p : params)
    for (Value read : p.reads) {
      Value g = grads.lookup(read);
      if (!g)
        continue;
      if (!p.grad) {
        p.grad = g;
        continue;
      }
      auto add = b.create<AddOp>(read.getLoc(), p.grad, g);
      if (Attribute id = read.getDefiningOp()->getAttr(kOpIdAttr))
        add->setAttr(kGradOfAttr, id);
      p.grad = add;
    }
}

/// Returns each variable's (micro-batch) gradient as a result `grad.<name>`.
static void appendGradientResults(func::FuncOp func, ArrayRef<Param> params) {
  Operation *ret = func.getBody().front().getTerminator();
  Builder b(func.getContext());
  for (const Param &p : params) {
    if (!p.grad)
      continue;
    VariableOp var = p.var;
    unsigned n = func.getNumResults();
    func.insertResult(n, p.grad.getType(),
                      nameAttr(b, ("grad." + var.getSymName()).str()));
    ret->insertOperands(n, p.grad);
  }
}

/// Returns the loss as a new `loss` result unless it already is a result;
/// with `keepOutputs` false, the model's other outputs are dropped (the loss
/// stays, under its output name when it is one: loss=output).
static void setLossResult(func::FuncOp func, Value loss, bool keepOutputs) {
  Operation *ret = func.getBody().front().getTerminator();
  if (!keepOutputs) {
    llvm::BitVector drop(func.getNumResults());
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i)
      drop[i] = ret->getOperand(i) != loss;
    // The loss once (an output returned twice keeps its first result).
    if (int first = drop.find_first_unset(); first >= 0)
      for (unsigned i = first + 1, e = func.getNumResults(); i < e; ++i)
        drop[i] = true;
    func.eraseResults(drop);
    ret->eraseOperands(drop);
  }
  if (llvm::is_contained(ret->getOperands(), loss))
    return;
  unsigned n = func.getNumResults();
  Builder b(func.getContext());
  func.insertResult(n, loss.getType(), nameAttr(b, "loss"));
  ret->insertOperands(n, loss);
}

void BuildTrainingStep::eraseDeadOps(func::FuncOp func) {
  Block &block = func.getBody().front();
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
    if (isOpTriviallyDead(&op))
      op.erase();
}

/// The learning-rate schedule is computed by the launcher from `step` and
/// passed as the `lr` argument; the pass records its parameters.
void BuildTrainingStep::recordSchedule(func::FuncOp func) {
  Builder b(func.getContext());
  SmallVector<NamedAttribute> attrs = {
      b.getNamedAttr("loss", b.getStringAttr(loss)),
      b.getNamedAttr("optimizer", b.getStringAttr(optimizer)),
      b.getNamedAttr("lr", b.getF64FloatAttr(lr)),
      b.getNamedAttr("warmup_steps", b.getI64IntegerAttr(warmupSteps)),
      b.getNamedAttr("total_steps", b.getI64IntegerAttr(totalSteps)),
      b.getNamedAttr("min_lr", b.getF64FloatAttr(minLr)),
      b.getNamedAttr("micro_batches", b.getI64IntegerAttr(microBatches))};
  // Loss scaling, for the launcher (strait-run keeps the scale and skips).
  if (initialScale > 0) {
    bool dynamic = lossScale == "dynamic";
    attrs.push_back(b.getNamedAttr("loss_scale", b.getF64FloatAttr(initialScale)));
    attrs.push_back(b.getNamedAttr("loss_scale_dynamic", b.getBoolAttr(dynamic)));
    if (dynamic) {
      attrs.push_back(b.getNamedAttr("loss_scale_growth", b.getF64FloatAttr(lossScaleGrowth)));
      attrs.push_back(
          b.getNamedAttr("loss_scale_backoff", b.getF64FloatAttr(lossScaleBackoff)));
      attrs.push_back(
          b.getNamedAttr("loss_scale_interval", b.getI64IntegerAttr(lossScaleInterval)));
    }
  }
  func->setAttr("graph.training", b.getDictionaryAttr(attrs));
}

void BuildTrainingStep::runOnOperation() {
  symbols.emplace(getOperation());
  FailureOr<func::FuncOp> found = findStep();
  SmallVector<Param> params;
  if (failed(checkOptions()) || failed(found) ||
      failed(selectTrainable(*found, params)))
    return signalPassFailure();
  func::FuncOp func = *found;
  convertBatchNorms(func);
  FailureOr<Value> lossValue = buildLoss(func);
  if (failed(lossValue))
    return signalPassFailure();
  assignOpIds(func);
  SmallVector<Value> wrt;
  for (Param &p : params)
    llvm::append_range(wrt, p.reads);
  if (initialScale > 0 && optimizer != "none")
    scaleArg = addArgument(func, RankedTensorType::get({}, Float32Type::get(&getContext())),
                           "loss_scale");
  FailureOr<GradientResult> grads = differentiate(func, *lossValue, wrt, scaleArg);
  if (failed(grads))
    return signalPassFailure();
  numBackwardOps = grads->numBackwardOps;
  sumReadGradients(func, params, grads->grads);
  if (optimizer != "none" && failed(buildUpdates(func, params)))
    return signalPassFailure();
  setLossResult(func, *lossValue, stepOutputs == "all");
  if (foundInf) { // read by the launcher: the step was skipped
    unsigned n = func.getNumResults();
    Builder b(func.getContext());
    func.insertResult(n, foundInf.getType(), nameAttr(b, "found_inf"));
    func.getBody().front().getTerminator()->insertOperands(n, foundInf);
  }
  if (returnGradients)
    appendGradientResults(func, params);
  eraseDeadOps(func);
  recordSchedule(func);
}
