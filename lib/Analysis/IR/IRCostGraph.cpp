//===- IRCostGraph.cpp - The planner's cost graph of graph IR -------------===//

#include "strait/Analysis/IRCostGraph.h"

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Interfaces/CostOpInterface.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/xxhash.h"

using namespace mlir;
using namespace strait;

static constexpr llvm::StringLiteral kOpIdAttr = "graph.op_id";
static constexpr llvm::StringLiteral kGradOfAttr = "graph.grad_of";

std::string strait::layerKeyOf(StringRef name) {
  SmallVector<StringRef> parts;
  name.split(parts, '.');
  std::string key;
  for (StringRef p : parts) {
    if (!key.empty())
      key += ".";
    key += p.str();
    if (!p.empty() && llvm::all_of(p, llvm::isDigit))
      return key;
  }
  return "";
}

OpKind strait::opKindOf(Operation *op) {
  auto cost = dyn_cast<CostOpInterface>(op);
  if (!cost)
    return OpKind::Other;
  if (isa<graph::GatherOp>(op) &&
      isa_and_nonnull<graph::ReadVariableOp>(op->getOperand(0).getDefiningOp()))
    return OpKind::Embedding;
  switch (cost.getKernelClass()) {
  case KernelClass::MatMul: return OpKind::MatMul;
  case KernelClass::Conv: return OpKind::Conv;
  case KernelClass::Normalization:
    return isa<graph::SoftmaxOp, graph::LogSoftmaxOp>(op) ? OpKind::Softmax : OpKind::Norm;
  case KernelClass::Reduction: return OpKind::Norm;
  case KernelClass::Elementwise: return OpKind::Elementwise;
  default: return OpKind::Other;
  }
}

std::string strait::kernelSignature(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << op->getName().getStringRef() << "(";
  for (Value v : op->getOperands()) {
    os << v.getType();
    // A constant operand's value shapes the kernel (an exponent, a shape):
    // small ones printed, large ones by a hash of their bytes.
    if (auto c = v.getDefiningOp<graph::ConstantOp>()) {
      auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
      if (dense && dense.getNumElements() > 16)
        os << "=#" << llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(
                            reinterpret_cast<const uint8_t *>(dense.getRawData().data()),
                            dense.getRawData().size()));
      else
        os << "=" << c.getValue();
    }
    os << ",";
  }
  os << ")->(";
  for (Type t : op->getResultTypes())
    os << t << ",";
  os << "){";
  for (NamedAttribute attr : op->getAttrs()) {
    if (attr.getName().getValue().contains('.') || isa<SymbolRefAttr>(attr.getValue()))
      continue;
    os << attr.getName().getValue() << "=" << attr.getValue() << ";";
  }
  os << "}";
  return (op->getName().stripDialect() + "." + llvm::utohexstr(llvm::xxh3_64bits(text), false, 16))
      .str();
}

static DType dtypeOf(Operation *op) {
  for (Type t : op->getResultTypes())
    if (auto s = dyn_cast<ShapedType>(t)) {
      Type e = s.getElementType();
      if (e.isF16()) return DType::F16;
      if (e.isBF16()) return DType::BF16;
      if (e.isInteger(8)) return DType::I8;
    }
  return DType::F32;
}

llvm::Expected<IRCostGraph> strait::buildCostGraph(func::FuncOp func, double batchSamples) {
  IRCostGraph out;
  CostGraph &g = out.graph;
  g.name = func.getName().str();
  if (batchSamples <= 0) {
    batchSamples = 1;
    if (func.getNumArguments() > 0)
      if (auto t = dyn_cast<RankedTensorType>(func.getArgument(0).getType());
          t && t.getRank() > 0 && !t.isDynamicDim(0))
        batchSamples = t.getDimSize(0);
  }
  g.batchSamples = batchSamples;
  DenseMap<Value, unsigned> producer;
  DenseMap<Value, bool> weightCounted;
  // Frozen variables (straitc --frozen, LoRA's base weights) have no
  // gradient: their bytes count in frozenBytes too.
  auto isFrozen = [&](StringRef name) {
    auto var = SymbolTable::lookupNearestSymbolFrom<graph::VariableOp>(
        func, StringAttr::get(func.getContext(), name));
    return var && var.getFrozen();
  };
  llvm::StringMap<int> layerIds;
  // The layer (in order of first appearance) a weight's name places it in;
  // -1 for a name without a layer key.
  auto layerOfWeight = [&](StringRef weight) {
    std::string key = layerKeyOf(weight);
    if (key.empty())
      return -1;
    return layerIds.try_emplace(key, (int)layerIds.size()).first->second;
  };
  // In a training step (see docs/training.md) backward ops carry
  // graph.grad_of = <forward graph.op_id>: their cost is the backward cost of
  // that forward op's node, not a node of its own; the per-step tail
  // (accumulation, clipping, optimizer, assignments) is not pipeline work.
  bool training = false;
  func.walk([&](Operation *op) { training |= op->hasAttr(kGradOfAttr); });
  DenseMap<int64_t, unsigned> nodeOfOpId;
  // Nodes using each variable, directly or through nodes computed from
  // weights only (whose results map to the variables they derive from).
  llvm::MapVector<StringRef, std::pair<double, SmallVector<unsigned>>> weightUsers;
  DenseMap<Value, SmallVector<StringRef, 1>> derivedFrom;
  // The node whose paramBytes hold each variable.
  llvm::StringMap<unsigned> weightOwner;
  // The node a backward or optimizer-step value's work is charged to.
  DenseMap<Value, unsigned> chargedTo;
  SmallVector<Operation *> stepOps;
  // The signature of an op with work (views move no bytes and keep none),
  // listing the first op of each signature.
  llvm::StringSet<> listed;
  auto kernelOf = [&](Operation *op, double flops, double bytes) -> std::string {
    if (!(flops > 0 || bytes > 0))
      return "";
    std::string key = kernelSignature(op);
    if (listed.insert(key).second)
      out.kernelOps.push_back(op);
    return key;
  };
  auto termOf = [&](Operation *op, CostOpInterface cost) {
    CostTerm term{opKindOf(op), dtypeOf(op), cost.getForwardFlops(),
                  cost.getBytesRead() + cost.getBytesWritten(),
                  op->getName().stripDialect().str()};
    term.kernel = kernelOf(op, term.flops, term.bytes);
    return term;
  };
  for (Operation &op : func.getBody().front()) {
    if (isa<graph::ConstantOp, graph::ReadVariableOp, func::ReturnOp>(op))
      continue;
    if (training) {
      if (auto gradOf = op.getAttrOfType<IntegerAttr>(kGradOfAttr)) {
        auto it = nodeOfOpId.find(gradOf.getInt());
        auto cost = dyn_cast<CostOpInterface>(op);
        if (it != nodeOfOpId.end() && cost) {
          CostNode &fwd = g.nodes[it->second];
          fwd.bwdFlops = std::max(fwd.bwdFlops, 0.0) + cost.getForwardFlops();
          fwd.bwdTerms.push_back(termOf(&op, cost));
          for (Value r : op.getResults())
            chargedTo[r] = it->second;
        }
        continue;
      }
      if (!op.hasAttr(kOpIdAttr)) {
        stepOps.push_back(&op);
        continue;
      }
    }
    auto cost = dyn_cast<CostOpInterface>(op);
    if (!cost)
      return llvm::createStringError("op '" + op.getName().getStringRef().str() +
                                     "' has no cost model");
    CostNode n;
    if (auto loc = dyn_cast<NameLoc>(op.getLoc()))
      n.name = loc.getName().str();
    else
      n.name = op.getName().stripDialect().str();
    n.kind = opKindOf(&op);
    n.dtype = dtypeOf(&op);
    n.op = op.getName().stripDialect().str();
    n.fwdFlops = cost.getForwardFlops();
    n.bwdFlops = cost.getBackwardFlops();
    n.bytesRead = cost.getBytesRead();
    n.bytesWritten = cost.getBytesWritten();
    n.kernel = kernelOf(&op, n.fwdFlops, n.bytesRead + n.bytesWritten);
    n.activationBytes = n.bytesWritten;
    // In a training step only the results that backward ops read are kept
    // from the forward to the backward (the rest is transient: the executor
    // reuses its memory); autocast's casts no longer count twice.
    if (training) {
      n.activationBytes = 0;
      for (Value r : op.getResults())
        if (llvm::any_of(r.getUsers(),
                         [](Operation *u) { return u->hasAttr(kGradOfAttr); }))
          n.activationBytes += strait::detail::bytesOf(TypeRange(r.getType()));
    }
    int layer = -1;
    for (Value v : op.getOperands()) {
      if (auto read = v.getDefiningOp<graph::ReadVariableOp>()) {
        if (!weightCounted[v]) {
          weightCounted[v] = true;
          double bytes = strait::detail::bytesOf(TypeRange(v.getType()));
          n.paramBytes += bytes;
          if (isFrozen(read.getVariable()))
            n.frozenBytes += bytes;
          weightOwner.try_emplace(read.getVariable(), g.nodes.size());
        }
        layer = std::max(layer, layerOfWeight(read.getVariable()));
      } else if (auto it = derivedFrom.find(v); it != derivedFrom.end()) {
        // A weight reached through a value computed from weights only (a
        // bf16 job's Cast of W): its layer is the reader's, as for W itself;
        // otherwise a block's first Conv would join the previous block.
        for (StringRef w : it->second)
          layer = std::max(layer, layerOfWeight(w));
      }
    }
    unsigned id = g.nodes.size();
    // Weights this node reads, and whether it reads nothing else.
    SmallVector<StringRef, 1> weights;
    bool weightsOnly = true;
    for (Value v : op.getOperands()) {
      if (auto read = v.getDefiningOp<graph::ReadVariableOp>()) {
        weights.push_back(read.getVariable());
        auto &entry = weightUsers[read.getVariable()];
        entry.first = strait::detail::bytesOf(TypeRange(v.getType()));
        entry.second.push_back(id);
      } else if (auto it = derivedFrom.find(v); it != derivedFrom.end()) {
        for (StringRef w : it->second) {
          weights.push_back(w);
          weightUsers[w].second.push_back(id);
        }
      } else if (!v.getDefiningOp<graph::ConstantOp>()) {
        weightsOnly = false;
      }
    }
    if (weightsOnly && !weights.empty())
      for (Value r : op.getResults())
        derivedFrom[r] = weights;
    // Ops without weights of their own follow their inputs' latest layer
    // (a residual Add joins its block's branch, not the stream it adds to).
    // A value computed from weights only is no transfer (it is recomputed
    // by its users' stage, like dist-assign-stages places it).
    int inherited = -1;
    for (Value v : op.getOperands()) {
      auto it = producer.find(v);
      if (it == producer.end() || derivedFrom.count(v))
        continue;
      inherited = std::max(inherited, g.nodes[it->second].layer);
      g.addEdge(it->second, id, strait::detail::bytesOf(TypeRange(v.getType())),
                cast<OpResult>(v).getResultNumber());
    }
    n.layer = layer < 0 ? inherited : layer;
    // A forward op of a training step with no backward op costs nothing
    // backward (it is off every path to a trainable weight).
    if (training)
      n.bwdFlops = 0;
    if (auto opId = op.getAttrOfType<IntegerAttr>(kOpIdAttr))
      nodeOfOpId[opId.getInt()] = id;
    g.addNode(std::move(n));
    out.ops.push_back(&op);
    for (Value r : op.getResults())
      producer[r] = id;
  }
  // The optimizer step (accumulation, clipping, the update, assignments),
  // once per iteration: each op is charged to the node owning the variable
  // it updates, else to the node its inputs' work was charged to, else to
  // the last node (where the step ends).
  for (Operation *op : stepOps) {
    std::optional<unsigned> owner;
    for (Value v : op->getOperands()) {
      if (auto read = v.getDefiningOp<graph::ReadVariableOp>())
        if (auto it = weightOwner.find(read.getVariable()); it != weightOwner.end()) {
          owner = it->second;
          break;
        }
      if (auto it = chargedTo.find(v); !owner && it != chargedTo.end())
        owner = it->second;
    }
    if (!owner && g.nodes.empty())
      continue;
    unsigned node = owner ? *owner : unsigned(g.nodes.size() - 1);
    for (Value r : op->getResults())
      chargedTo[r] = node;
    if (auto cost = dyn_cast<CostOpInterface>(op))
      g.nodes[node].updateTerms.push_back(termOf(op, cost));
  }
  for (auto &[name, entry] : weightUsers) {
    SmallVector<unsigned> nodes = entry.second;
    llvm::sort(nodes);
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    if (nodes.size() > 1)
      g.sharedWeights.push_back({name.str(), entry.first, {nodes.begin(), nodes.end()},
                                 weightOwner.lookup(name), isFrozen(name)});
  }
  return out;
}
