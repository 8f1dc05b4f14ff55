//===- AddLora.cpp - graph-add-lora ---------------------------------------===//
//
// LoRA adapters on the weights of an imported model's linear layers: each
// product y = x W of a target W becomes y + MatMul(MatMul(x, A) * s, B) with
// new variables A [in, R] (seeded uniform in +-1/sqrt(in)) and B [R, out]
// (zeros), s = alpha / R; the base variables are frozen, so the training
// step (graph-build-training-step) differentiates and all-reduces only the
// adapters. The pass only sees the forward graph: it runs first, while the
// weight operands are still MatMul(x, W), MatMul(x, Transpose(W)) and
// Gemm(x, W). With dropout p > 0 the adapter reads Dropout(x, p) (PEFT's
// lora_dropout), which graph-build-training-step keys like the model's own.
// A weight also read by other ops is adapted in its products only, and only
// when named (PEFT adapts the Linear module alone). See docs/training.md,
// "LoRA".
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/Support/GlobPattern.h"

#include <cmath>

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHADDLORA
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;

namespace {

/// One product that reads a weight W [in, out] as y = x W (logically).
struct Product {
  Operation *op;   // the MatMul or Gemm
  Value x;         // its input operand (rank >= 2, [..., in])
  double alpha;    // Gemm's alpha (1 for MatMul)
};

/// A weight and every product that reads it; `in`/`out` of the logical
/// [in, out] matrix (W's own layout is [out, in] when transposed). `others`:
/// the ops that read W otherwise (a Gather of a tied embedding, ...).
struct Target {
  VariableOp var;
  SmallVector<Product> products;
  SmallVector<Operation *> others;
  int64_t in = 0, out = 0;
  bool transposed = false;
  bool isHead = false;
};

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(StringRef s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s)
    h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

bool isProductInput(Value x, int64_t in) {
  auto t = dyn_cast<RankedTensorType>(x.getType());
  return t && t.hasStaticShape() && t.getRank() >= 2 && t.getShape().back() == in &&
         isa<FloatType>(t.getElementType());
}

/// "graph.Gather 'node_name'" (an imported node's name), or the op and its
/// location, for remarks that name another reader of a weight.
std::string describe(Operation *op) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << op->getName();
  Location loc = op->getLoc();
  if (auto fused = dyn_cast<FusedLoc>(loc); fused && !fused.getLocations().empty())
    loc = fused.getLocations().front();
  if (auto name = dyn_cast<NameLoc>(loc))
    os << " '" << name.getName().getValue() << "'";
  else
    os << " at " << loc;
  return out;
}

/// Whether `v` reaches a function result through layout ops and bias Adds
/// only (the output head's product).
bool reachesResult(Value v) {
  SmallVector<Value> work{v};
  DenseSet<Value> seen;
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    if (!seen.insert(cur).second)
      continue;
    for (Operation *user : cur.getUsers()) {
      if (isa<func::ReturnOp>(user))
        return true;
      if (isa<ReshapeOp, CastOp, TransposeOp, FlattenOp, SqueezeOp, UnsqueezeOp>(user) ||
          (isa<AddOp>(user) && llvm::all_of(user->getOperands(), [&](Value o) {
             // A bias: the other operand is a weight or a constant (not the
             // residual stream, which reaches every block's output).
             return o == cur || o.getDefiningOp<ReadVariableOp>() ||
                    o.getDefiningOp<ConstantOp>();
           })))
        llvm::append_range(work, user->getResults());
    }
  }
  return false;
}

class AddLora : public strait::graph::impl::GraphAddLoraBase<AddLora> {
public:
  using Base::Base;
  void runOnOperation() override;

private:
  FailureOr<SmallVector<Target>> selectTargets(ArrayRef<llvm::GlobPattern> targetGlobs);
  bool collectProducts(VariableOp var, ArrayRef<ReadVariableOp> reads, Target &t);
  FailureOr<std::pair<VariableOp, VariableOp>> addAdapters(Target &t, SymbolTable &symbols,
                                                           double scale);
  ElementsAttr initialA(Target &t, FloatType et);
  void rewrite(Target &t, VariableOp a, VariableOp b, double scale);
};

} // namespace

/// The products reading `var` (through its reads) into t.products, every
/// other reader (a Gather, a Concat, a product with a rank-1 or transposed
/// input, ...) into t.others; false when there is no product or the products
/// disagree on layout.
bool AddLora::collectProducts(VariableOp var, ArrayRef<ReadVariableOp> reads, Target &t) {
  auto wt = cast<RankedTensorType>(var.getType());
  std::optional<bool> layout;
  bool conflict = false;
  auto add = [&](Operation *op, Value x, bool transposed, double alpha) {
    int64_t in = wt.getDimSize(transposed ? 1 : 0);
    if (!isProductInput(x, in)) {
      t.others.push_back(op);
      return true;
    }
    if (layout && *layout != transposed)
      conflict = true;
    layout = transposed;
    t.products.push_back(Product{op, x, alpha});
    return true;
  };
  auto isWeightOf = [](OpOperand &use) {
    return use.getOperandNumber() == 1 && isa<MatMulOp, GemmOp>(use.getOwner());
  };
  auto addUse = [&](OpOperand &use, bool transposed) {
    if (auto mm = dyn_cast<MatMulOp>(use.getOwner()))
      return add(mm, mm.getA(), transposed, 1.0);
    auto gemm = cast<GemmOp>(use.getOwner());
    if (gemm.getTransA()) {
      t.others.push_back(gemm);
      return true;
    }
    return add(gemm, gemm.getA(), transposed != (gemm.getTransB() != 0),
               gemm.getAlpha().convertToDouble());
  };
  for (ReadVariableOp read : reads)
    for (OpOperand &use : read.getValue().getUses()) {
      if (isWeightOf(use)) {
        addUse(use, false);
        continue;
      }
      auto tr = dyn_cast<TransposeOp>(use.getOwner());
      if (!tr || !llvm::equal(tr.getPerm(), ArrayRef<int64_t>{1, 0})) {
        t.others.push_back(use.getOwner());
        continue;
      }
      for (OpOperand &trUse : tr.getTransposed().getUses()) {
        if (isWeightOf(trUse) && !isa<GemmOp>(trUse.getOwner()))
          addUse(trUse, true);
        else
          t.others.push_back(trUse.getOwner());
      }
    }
  if (t.products.empty() || conflict)
    return false;
  t.transposed = *layout;
  t.in = wt.getDimSize(t.transposed ? 1 : 0);
  t.out = wt.getDimSize(t.transposed ? 0 : 1);
  t.isHead = llvm::any_of(t.products, [](const Product &p) {
    return reachesResult(p.op->getResult(0));
  });
  return true;
}

/// A [in, R]: element k (row-major) is (2u - 1) / sqrt(in) in double,
/// rounded to the element type, with u = (splitmix64(base + k) >> 11) * 2^-53
/// and base = splitmix64(seed ^ fnv1a64(W's name)).
ElementsAttr AddLora::initialA(Target &t, FloatType et) {
  auto type = RankedTensorType::get({t.in, rank}, et);
  uint64_t base = splitmix64(seed ^ fnv1a64(t.var.getSymName()));
  double bound = 1.0 / std::sqrt(static_cast<double>(t.in));
  const llvm::fltSemantics &sem = et.getFloatSemantics();
  SmallVector<APFloat> values;
  values.reserve(t.in * rank);
  for (int64_t k = 0, n = t.in * rank; k < n; ++k) {
    double u = static_cast<double>(splitmix64(base + static_cast<uint64_t>(k)) >> 11) *
               0x1.0p-53;
    APFloat v(static_cast<float>((2.0 * u - 1.0) * bound));
    bool lost;
    v.convert(sem, APFloat::rmNearestTiesToEven, &lost);
    values.push_back(v);
  }
  return cast<ElementsAttr>(DenseElementsAttr::get(type, values));
}

/// y -> y + MatMul(MatMul(x, A) * (scale * alpha), B) after each product.
void AddLora::rewrite(Target &t, VariableOp a, VariableOp b, double scale) {
  for (Product &p : t.products) {
    Operation *op = p.op;
    Value y = op->getResult(0);
    OpBuilder builder(op->getContext());
    builder.setInsertionPointAfter(op);
    Location loc = op->getLoc();
    Value readA = builder.create<ReadVariableOp>(loc, a.getType(), a.getSymName());
    Value readB = builder.create<ReadVariableOp>(loc, b.getType(), b.getSymName());
    Value x = p.x;
    if (dropout > 0)
      x = builder.create<DropoutOp>(loc, x, builder.getF32FloatAttr(static_cast<float>(dropout)));
    Value xa = builder.create<MatMulOp>(loc, x, readA);
    auto et = cast<FloatType>(cast<ShapedType>(xa.getType()).getElementType());
    APFloat s(static_cast<float>(scale * p.alpha));
    bool lost;
    s.convert(et.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    Value c = builder.create<ConstantOp>(
        loc, cast<ElementsAttr>(DenseElementsAttr::get(RankedTensorType::get({}, et), s)));
    Value scaled = builder.create<MulOp>(loc, xa, c);
    Value delta = builder.create<MatMulOp>(loc, scaled, readB);
    // A Gemm's y is [N, out]; a MatMul's [..., out] like x A B.
    auto sum = builder.create<AddOp>(loc, y, delta);
    y.replaceAllUsesExcept(sum.getResult(), sum);
    ++numProducts;
  }
}

/// Compiles glob patterns; an invalid one is a diagnostic.
static LogicalResult compileGlobs(ModuleOp module, ArrayRef<std::string> patterns,
                                  SmallVectorImpl<llvm::GlobPattern> &globs) {
  for (const std::string &p : patterns) {
    llvm::Expected<llvm::GlobPattern> glob = llvm::GlobPattern::create(p);
    if (!glob)
      return module.emitError("graph-add-lora: invalid variable pattern '")
             << p << "': " << llvm::toString(glob.takeError());
    globs.push_back(std::move(*glob));
  }
  return success();
}

static bool matchesAny(ArrayRef<llvm::GlobPattern> globs, StringRef name) {
  return llvm::any_of(globs, [&](const llvm::GlobPattern &g) { return g.match(name); });
}

/// The weights to adapt: those `targetGlobs` name (all product weights but
/// the head when empty); an error when there is none.
FailureOr<SmallVector<Target>>
AddLora::selectTargets(ArrayRef<llvm::GlobPattern> targetGlobs) {
  ModuleOp module = getOperation();
  llvm::StringMap<SmallVector<ReadVariableOp>> reads;
  module.walk([&](ReadVariableOp r) { reads[r.getVariable()].push_back(r); });
  SmallVector<Target> chosen;
  SmallVector<VariableOp> vars(module.getOps<VariableOp>());
  for (VariableOp var : vars) {
    auto wt = dyn_cast<RankedTensorType>(var.getType());
    if (!wt || !wt.hasStaticShape() || wt.getRank() != 2 || !isa<FloatType>(wt.getElementType()))
      continue;
    bool named = matchesAny(targetGlobs, var.getSymName());
    if (!targetGlobs.empty() && !named)
      continue;
    Target t{var, {}, {}};
    if (!collectProducts(var, reads.lookup(var.getSymName()), t)) {
      if (named)
        var.emitWarning("graph-add-lora: '")
            << var.getSymName()
            << "' matches --lora-targets but is the weight operand of no MatMul/Gemm "
               "product (y = x W), or of products in both layouts; it gets no adapter";
      continue;
    }
    if (targetGlobs.empty() && t.isHead)
      continue;
    if (!t.others.empty()) {
      Operation *other = t.others.front();
      if (!named) {
        var.emitRemark("graph-add-lora: '")
            << var.getSymName() << "' is read by " << t.products.size()
            << " product(s) and by " << t.others.size() << " other op(s) ("
            << describe(other) << "); it gets no adapter (--lora-targets naming it adapts its products "
               "only, as PEFT adapts a Linear module)";
        continue;
      }
      var.emitRemark("graph-add-lora: '")
          << var.getSymName() << "' is adapted in its " << t.products.size()
          << " product(s) only; " << t.others.size() << " other op(s) ("
          << describe(other) << ") read the base weight, so merging the adapter into it would change "
             "them too (the PEFT adapter keeps them apart)";
      ++numPartial;
    }
    chosen.push_back(std::move(t));
  }
  if (chosen.empty())
    return module.emitError("graph-add-lora: no weight to adapt")
           << (targetGlobs.empty() ? " (no 2-D float variable is only the weight operand of "
                                     "MatMul/Gemm products below the output head)"
                                   : " matches --lora-targets");
  return chosen;
}

/// Adds `<W>.lora_A` and `<W>.lora_B` after W and rewrites W's products.
FailureOr<std::pair<VariableOp, VariableOp>> AddLora::addAdapters(Target &t,
                                                                  SymbolTable &symbols,
                                                                  double scale) {
  auto et = cast<FloatType>(cast<RankedTensorType>(t.var.getType()).getElementType());
  std::string nameA = (t.var.getSymName() + ".lora_A").str();
  std::string nameB = (t.var.getSymName() + ".lora_B").str();
  for (const std::string &n : {nameA, nameB})
    if (symbols.lookup(n))
      return t.var.emitError("graph-add-lora: the module already has a symbol '")
             << n << "' (adapters added twice?)";
  OpBuilder mb(t.var);
  mb.setInsertionPointAfter(t.var);
  auto typeA = RankedTensorType::get({t.in, rank}, et);
  auto typeB = RankedTensorType::get({rank, t.out}, et);
  ElementsAttr valueA = t.var.getValue() ? initialA(t, et) : ElementsAttr();
  auto zero =
      cast<ElementsAttr>(DenseElementsAttr::get(typeB, APFloat::getZero(et.getFloatSemantics())));
  auto a = mb.create<VariableOp>(t.var.getLoc(), nameA, typeA, valueA, /*frozen=*/false);
  auto b = mb.create<VariableOp>(t.var.getLoc(), nameB, typeB, zero, /*frozen=*/false);
  // Placed after W (A, then B); the table checks the names.
  symbols.insert(a);
  symbols.insert(b);
  rewrite(t, a, b, scale);
  ++numAdapted;
  numAdapterElements += rank * (t.in + t.out);
  return std::make_pair(a, b);
}

void AddLora::runOnOperation() {
  ModuleOp module = getOperation();
  if (rank < 1) {
    module.emitError("graph-add-lora: invalid rank=")
        << static_cast<int64_t>(rank) << " (straitc --lora): expected an adapter rank >= 1";
    return signalPassFailure();
  }
  if (!(dropout >= 0 && dropout < 1)) {
    module.emitError("graph-add-lora: invalid dropout=")
        << dropout << " (straitc --lora-dropout): expected a ratio in [0, 1)";
    return signalPassFailure();
  }
  if (!(alpha >= 0) || !std::isfinite(alpha)) {
    module.emitError("graph-add-lora: invalid alpha (straitc --lora-alpha): expected a "
                     "finite value > 0, or 0 for alpha = rank");
    return signalPassFailure();
  }
  SmallVector<llvm::GlobPattern> targetGlobs, keepGlobs;
  if (failed(compileGlobs(module, targets, targetGlobs)) ||
      failed(compileGlobs(module, trainable, keepGlobs)))
    return signalPassFailure();
  FailureOr<SmallVector<Target>> chosen = selectTargets(targetGlobs);
  if (failed(chosen))
    return signalPassFailure();
  SymbolTable symbols(module);
  double scale = (alpha > 0 ? alpha : static_cast<double>(rank)) / static_cast<double>(rank);
  DenseSet<Operation *> adapters;
  for (Target &t : *chosen) {
    auto added = addAdapters(t, symbols, scale);
    if (failed(added))
      return signalPassFailure();
    adapters.insert(added->first);
    adapters.insert(added->second);
  }
  if (!freezeBase)
    return;
  for (VariableOp var : module.getOps<VariableOp>()) {
    auto type = dyn_cast<RankedTensorType>(var.getType());
    if (adapters.contains(var) || var.getFrozen() || !type ||
        !isa<FloatType>(type.getElementType()) || matchesAny(keepGlobs, var.getSymName()))
      continue;
    var.setFrozen(true);
    ++numFrozen;
  }
}
