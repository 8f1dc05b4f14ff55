//===- InsertCompression.cpp - Codecs on the transfers of slow links ------===//
//
// Applies the codec choice of strait/Analysis/Compression.h to the IR: the
// transfers of @main are grouped by link (sending stage, receiving stage),
// each gradient all-reduce is one more link (its inter-island phase, or its
// flat ring), and a link whose codec is not `none` gets dist.compress before
// its transfer and dist.decompress after it. The analysis needs the cluster
// (bandwidths, latencies, device speeds); the IR gives the exact bytes and
// each stage's compute through the cost interface.
//
//===----------------------------------------------------------------------===//

#include "ClusterDevices.h"

#include "strait/Analysis/Compression.h"
#include "strait/Analysis/IRCostGraph.h"
#include "strait/Analysis/Workload.h"
#include "strait/Dialect/Dist/DistOps.h"
#include "strait/Dialect/Dist/DistPasses.h"
#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Interfaces/CostOpInterface.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Format.h"

#include <map>

namespace strait::dist {
#define GEN_PASS_DEF_DISTINSERTCOMPRESSION
#include "strait/Dialect/Dist/DistPasses.h.inc"
} // namespace strait::dist

using namespace mlir;
using namespace strait;
using namespace strait::dist;

namespace {

constexpr int64_t kMinElements = 64;

std::optional<dist::Codec> irCodec(const strait::Codec &codec) {
  if (codec.kind == CodecKind::TopK && codec.valueBits != 32)
    return codec.valueBits == 4 ? dist::Codec::topk_int4 : dist::Codec::topk_int8;
  switch (codec.kind) {
  case CodecKind::None: return std::nullopt;
  case CodecKind::FP16: return dist::Codec::fp16;
  case CodecKind::BF16: return dist::Codec::bf16;
  case CodecKind::Int8: return dist::Codec::int8;
  case CodecKind::Int4: return dist::Codec::int4;
  case CodecKind::Int3: return dist::Codec::int3;
  case CodecKind::Int2: return dist::Codec::int2;
  case CodecKind::AqSgd:
    return codec.valueBits == 2   ? dist::Codec::aqsgd_int2
           : codec.valueBits == 3 ? dist::Codec::aqsgd_int3
                                  : dist::Codec::aqsgd_int4;
  case CodecKind::TopK: return dist::Codec::topk;
  }
  return std::nullopt;
}

/// An f32 tensor with a static shape and enough elements to encode (the
/// runtime's codecs carry f32: program-format CodecParams).
bool encodable(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.hasStaticShape() && t.getElementType().isF32() &&
         t.getNumElements() >= kMinElements;
}

/// A ratio as a diagnostic shows it ("0.05", not "5.000000e-02").
std::string shortNumber(double v) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%g", v);
  return text;
}

double bytesOf(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return static_cast<double>(t.getNumElements()) *
         ((t.getElementTypeBitWidth() + 7) / 8);
}

struct Transfer {
  SendOp send;
  RecvOp recv;
};

struct InsertCompressionPass
    : public dist::impl::DistInsertCompressionBase<InsertCompressionPass> {
  using DistInsertCompressionBase::DistInsertCompressionBase;
  void runOnOperation() override;

  LogicalResult parseOptions(ModuleOp module);
  LogicalResult loadCluster(ModuleOp module);
  /// Compute seconds of one micro-batch (forward and backward) per stage on
  /// its slowest replica (zeros without a cluster).
  std::vector<double> stageTimes(func::FuncOp func) const;
  StringRef deviceName(int64_t stage, size_t replica) const;
  /// One codec per (sending stage, receiving stage) for all its transfers.
  LogicalResult compressCuts(func::FuncOp func, ArrayRef<double> times);
  /// The per-step exchanges of tied variables' partial gradients: one codec
  /// per sending stage; the sender sums the decoded value it sent.
  LogicalResult compressTiedExchanges(func::FuncOp func, ArrayRef<double> times);
  /// The inter-island phase (or flat ring) of the gradient all-reduces, one
  /// codec per stage and islands.
  LogicalResult compressAllReduces(func::FuncOp func, ArrayRef<double> times);
  /// The codec of a link given by its device pairs (override, mode, auto);
  /// an error at `at` naming `what` where a given codec's error-feedback
  /// residual does not fit (givenCodec).
  FailureOr<strait::Codec> pick(ArrayRef<std::pair<unsigned, unsigned>> pairs,
                                ArrayRef<std::pair<StringRef, StringRef>> names,
                                const LinkTransfer &t, bool canChoose, Operation *at,
                                const Twine &what);
  /// Memory a stage's devices have left for error-feedback residuals: the
  /// planner's dist.memory_left less the residuals kept so far (infinite
  /// without it); `keep` takes a codec's residual from it.
  void keep(int64_t stage, const strait::Codec &codec, const LinkTransfer &t);
  std::vector<double> memoryLeft;
  /// Loss scaling keeps every residual twice (allReduceResidualBytes).
  bool lossScaling = false;
  /// `adapt`: mark the encode dist.topk_adapt (adaptive-topk).
  void compressTransfer(Transfer &t, const strait::Codec &codec, bool adapt);
  void compressAllReduce(AllReduceOp op, const strait::Codec &codec);
  Value encode(OpBuilder &b, Location loc, Value v, const strait::Codec &codec,
               int64_t stage);
  Value decode(OpBuilder &b, Location loc, Value bytes, Type plain,
               const strait::Codec &codec, int64_t stage);

  PlanAttr plan;
  std::optional<ClusterModel> clusterModel;
  std::vector<std::vector<unsigned>> devices;
  CompressionOptions options;
  std::optional<strait::Codec> global;
  std::vector<char> used;
  /// adaptive-topk=MIN:MAX, when given.
  std::optional<std::pair<double, double>> adaptBounds;
  bool adaptedCuts = false;
  /// The compress-link override the last pick() took (-1: none).
  int lastOverride = -1;
  /// An override put AQ-SGD on a gradient all-reduce (an error).
  bool aqsgdOnAllReduce = false;
  /// Compressed AdamW (the step's AdamW ops' freeze_variance_after, N > 0 on
  /// every one): the gradient all-reduces' codecs start after N exact steps.
  int64_t exactSteps = 0;
  /// warmup-codec: the codec of those N steps (none: exact f32).
  std::optional<dist::Codec> warmup;
  /// An AdamW whose second moment follows the all-reduced gradient: auto
  /// gives the gradients no top-k (options.gradientTopK), an explicit top-k
  /// gets a warning.
  bool liveVariance = false;
  void readOptimizer(ModuleOp module);
  /// memoryLeft from dist.memory_left, lossScaling from @main's training.
  void readMemory(ModuleOp module, func::FuncOp func);
};

} // namespace

std::vector<double> InsertCompressionPass::stageTimes(func::FuncOp func) const {
  std::vector<double> times(plan.getNumStages(), 0);
  if (!clusterModel)
    return times;
  bool training = false;
  func.walk([&](Operation *op) { training |= op->hasAttr("graph.grad_of"); });
  for (Operation &op : func.getBody().front()) {
    auto cost = dyn_cast<CostOpInterface>(op);
    std::optional<int64_t> stage = getStage(&op);
    if (!cost || !stage)
      continue;
    // In a training step the optimizer tail is not pipeline work; backward
    // ops are ops of their own (their forward FLOPs are backward work).
    bool backwardOp = op.hasAttr("graph.grad_of");
    if (training && !backwardOp && !op.hasAttr("graph.op_id"))
      continue;
    CostNode node;
    node.kind = opKindOf(&op);
    node.op = op.getName().stripDialect().str();
    node.fwdFlops = cost.getForwardFlops();
    node.bwdFlops = cost.getBackwardFlops();
    node.bytesRead = cost.getBytesRead();
    node.bytesWritten = cost.getBytesWritten();
    double slowest = 0;
    for (unsigned d : devices[*stage]) {
      double t = nodeTime(node, *clusterModel, d, false);
      if (!training)
        t += nodeTime(node, *clusterModel, d, true);
      slowest = std::max(slowest, t);
    }
    times[*stage] += slowest;
  }
  return times;
}

FailureOr<strait::Codec>
InsertCompressionPass::pick(ArrayRef<std::pair<unsigned, unsigned>> pairs,
                            ArrayRef<std::pair<StringRef, StringRef>> names, const LinkTransfer &t,
                            bool canChoose, Operation *at, const Twine &what) {
  auto given = [&](const strait::Codec &c, const Twine &flag) -> FailureOr<strait::Codec> {
    llvm::Expected<strait::Codec> g = givenCodec(c, t, (flag + ": " + what).str());
    if (!g)
      return at->emitError() << llvm::toString(g.takeError());
    return *g;
  };
  for (auto [i, o] : llvm::enumerate(options.links)) {
    bool match = false;
    if (clusterModel)
      match = llvm::any_of(pairs, [&, &o = o](auto p) {
        return linkMatches(*clusterModel, o.a, o.b, p.first, p.second);
      });
    else
      match = llvm::any_of(names, [&, &o = o](auto p) {
        return (p.first == o.a && p.second == o.b) || (p.first == o.b && p.second == o.a);
      });
    if (match) {
      used[i] = 1;
      lastOverride = static_cast<int>(i);
      return given(o.codec, "--compress-link=" + o.text);
    }
  }
  lastOverride = -1;
  if (global)
    return given(*global, "--compress=" + compress);
  if (options.mode == "auto" && canChoose)
    return chooseCodec(t);
  return strait::Codec();
}

void InsertCompressionPass::keep(int64_t stage, const strait::Codec &codec, const LinkTransfer &t) {
  if (codec.errorFeedback && static_cast<size_t>(stage) < memoryLeft.size())
    memoryLeft[stage] -= t.residualBytes;
}

Value InsertCompressionPass::encode(OpBuilder &b, Location loc, Value v,
                                    const strait::Codec &codec, int64_t stage) {
  dist::Codec kind = *irCodec(codec);
  auto type = cast<RankedTensorType>(v.getType());
  FloatAttr ratio = codec.kind == CodecKind::TopK ? b.getF64FloatAttr(codec.ratio) : nullptr;
  bool quantized = codec.kind != CodecKind::FP16 && codec.kind != CodecKind::BF16 &&
                   (codec.kind != CodecKind::TopK || codec.valueBits != 32);
  IntegerAttr block = quantized ? b.getI64IntegerAttr(codec.blockSize) : nullptr;
  int64_t bytes = encodedByteCount(kind, type.getNumElements(),
                                   (type.getElementTypeBitWidth() + 7) / 8, codec.ratio,
                                   codec.blockSize);
  auto encodedType = RankedTensorType::get({bytes}, b.getIntegerType(8));
  auto op = b.create<CompressOp>(loc, encodedType, v, CodecAttr::get(b.getContext(), kind),
                                 ratio, block,
                                 codec.errorFeedback ? b.getUnitAttr() : nullptr);
  setStage(op, stage);
  return op.getEncoded();
}

Value InsertCompressionPass::decode(OpBuilder &b, Location loc, Value bytes, Type plain,
                                    const strait::Codec &codec, int64_t stage) {
  dist::Codec kind = *irCodec(codec);
  FloatAttr ratio = codec.kind == CodecKind::TopK ? b.getF64FloatAttr(codec.ratio) : nullptr;
  bool quantized = codec.kind != CodecKind::FP16 && codec.kind != CodecKind::BF16 &&
                   (codec.kind != CodecKind::TopK || codec.valueBits != 32);
  IntegerAttr block = quantized ? b.getI64IntegerAttr(codec.blockSize) : nullptr;
  auto op = b.create<DecompressOp>(loc, plain, bytes, CodecAttr::get(b.getContext(), kind),
                                   ratio, block);
  setStage(op, stage);
  return op.getResult();
}

void InsertCompressionPass::compressTransfer(Transfer &t, const strait::Codec &codec,
                                             bool adapt) {
  Value plain = t.send.getValue();
  if (!encodable(plain))
    return;
  OpBuilder b(t.send);
  Value bytes = encode(b, t.send.getLoc(), plain, codec, *getStage(t.send));
  if (adapt)
    bytes.getDefiningOp()->setAttr(
        "dist.topk_adapt", b.getDenseF64ArrayAttr({adaptBounds->first, adaptBounds->second}));
  t.send.getValueMutable().assign(bytes);
  b.setInsertionPoint(t.recv);
  auto recv = b.create<RecvOp>(t.recv.getLoc(), bytes.getType(), t.recv.getPeerAttr(),
                               t.recv.getChannelAttr());
  recv->setAttrs(t.recv->getAttrs());
  b.setInsertionPointAfter(recv);
  Value decoded = decode(b, recv.getLoc(), recv.getResult(), plain.getType(), codec,
                         *getStage(t.recv));
  t.recv.getResult().replaceAllUsesWith(decoded);
  t.recv.erase();
  ++numCompressed;
}

void InsertCompressionPass::readOptimizer(ModuleOp module) {
  std::optional<int64_t> frozen;
  module.walk([&](graph::AdamWOp adam) {
    int64_t n = adam.getFreezeVarianceAfterAttr().getInt();
    liveVariance |= n == 0;
    frozen = frozen ? std::min(*frozen, n) : n;
  });
  exactSteps = frozen && !liveVariance ? *frozen : 0;
  options.gradientTopK = !liveVariance;
}

void InsertCompressionPass::readMemory(ModuleOp module, func::FuncOp func) {
  memoryLeft.assign(plan.getNumStages(), std::numeric_limits<double>::infinity());
  if (auto left = module->getAttrOfType<DenseI64ArrayAttr>(DistDialect::kMemoryLeftAttrName);
      left && left.size() == plan.getNumStages())
    for (auto [i, bytes] : llvm::enumerate(left.asArrayRef()))
      memoryLeft[i] = static_cast<double>(bytes);
  auto training = func->getAttrOfType<DictionaryAttr>("graph.training");
  lossScaling = training && training.get("loss_scale");
}

void InsertCompressionPass::compressAllReduce(AllReduceOp op, const strait::Codec &codec) {
  Value plain = op.getValue();
  if (!encodable(plain))
    return;
  int64_t stage = *getStage(op);
  OpBuilder b(op);
  Value bytes = encode(b, op.getLoc(), plain, codec, stage);
  // Compressed AdamW: the runtime reduces exact values while the second
  // moment warms up (the exporter's CodecParams.exact_steps).
  if (exactSteps > 0)
    bytes.getDefiningOp()->setAttr("dist.exact_steps", b.getI64IntegerAttr(exactSteps));
  if (exactSteps > 0 && warmup)
    bytes.getDefiningOp()->setAttr("dist.warmup_codec",
                                   CodecAttr::get(b.getContext(), *warmup));
  auto reduce = b.create<AllReduceOp>(op.getLoc(), bytes.getType(), bytes,
                                      op.getReductionAttr(), op.getGroupAttr(),
                                      op.getIslandsAttr(), op.getChannelAttr());
  reduce->setAttrs(op->getAttrs());
  Value decoded = decode(b, op.getLoc(), reduce.getResult(), plain.getType(), codec, stage);
  op.getResult().replaceAllUsesWith(decoded);
  op.erase();
  ++numCompressedAllReduces;
}

LogicalResult InsertCompressionPass::parseOptions(ModuleOp module) {
  options.mode = compress;
  options.localSteps = static_cast<unsigned>(std::max<int64_t>(1, localSteps));
  if (compress != "auto" && compress != "none") {
    llvm::Expected<strait::Codec> c = parseCodec(compress);
    if (!c)
      return module.emitError() << "--compress=" << compress << ": "
                                << llvm::toString(c.takeError());
    global = *c;
  }
  for (const std::string &text : compressLink) {
    llvm::Expected<CompressionOptions::LinkOverride> o = parseLinkOverride(text);
    if (!o)
      return module.emitError() << "--compress-link=" << llvm::toString(o.takeError());
    options.links.push_back(std::move(*o));
  }
  used.assign(options.links.size(), 0);
  if (warmupCodec != "none") {
    llvm::Expected<strait::Codec> c = parseCodec(warmupCodec);
    if (!c)
      return module.emitError() << "--compressed-adam-warmup=" << warmupCodec << ": "
                                << llvm::toString(c.takeError());
    CodecKind k = c->kind;
    if (k != CodecKind::FP16 && k != CodecKind::BF16 && k != CodecKind::Int8 &&
        k != CodecKind::Int4 && k != CodecKind::Int3 && k != CodecKind::Int2)
      return module.emitError() << "--compressed-adam-warmup=" << warmupCodec
                                << ": expected a dense codec (fp16, bf16, int8, int4, int3, "
                                   "int2): the second moment warms up on every coordinate";
    warmup = irCodec(*c);
  }
  if (!adaptiveTopk.empty()) {
    // MIN:MAX, both in (0, 1], MIN <= MAX.
    auto [lo, hi] = StringRef(adaptiveTopk).split(':');
    double a = 0, b = 0;
    if (hi.empty() || lo.trim().getAsDouble(a) || hi.trim().getAsDouble(b))
      return module.emitError() << "--adaptive-topk=" << adaptiveTopk
                                << ": expected MIN:MAX, two ratios such as 0.005:0.2";
    if (!(a > 0 && a <= b && b <= 1))
      return module.emitError() << "--adaptive-topk=" << adaptiveTopk
                                << ": needs 0 < MIN <= MAX <= 1";
    adaptBounds = {a, b};
  }
  return success();
}

LogicalResult InsertCompressionPass::loadCluster(ModuleOp module) {
  if (cluster.empty()) {
    if (compress == "auto")
      return module.emitError(
          "--compress=auto needs the cluster file (cluster=FILE) to weigh links; give a codec "
          "or compress=none with compress-link overrides instead");
    return success();
  }
  FailureOr<ClusterModel> c =
      strait::dist::detail::loadClusterFor(module, cluster, "dist-insert-compression");
  if (failed(c))
    return failure();
  clusterModel = std::move(*c);
  clusterModel->allReduceBucketBytes = allReduceBucketMib * 1048576.0;
  FailureOr<std::vector<std::vector<unsigned>>> d =
      strait::dist::detail::stageDevices(module, plan, *clusterModel, cluster);
  if (failed(d))
    return failure();
  devices = std::move(*d);
  return success();
}

StringRef InsertCompressionPass::deviceName(int64_t stage, size_t replica) const {
  return cast<StringAttr>(plan.getStage(stage).getDevices()[replica]).getValue();
}

LogicalResult InsertCompressionPass::compressCuts(func::FuncOp func, ArrayRef<double> times) {
  // The transfers of each (from, to) pair share one codec.
  std::map<std::pair<int64_t, int64_t>, SmallVector<Transfer>> links;
  for (Operation &op : func.getBody().front())
    // Per-step transfers (tied variables' partial gradients) are links of
    // their own (compressTiedExchanges).
    if (auto send = dyn_cast<SendOp>(op); send && !send->hasAttr("dist.per_step"))
      if (auto recv = dyn_cast_or_null<RecvOp>(send->getNextNode());
          recv && recv.getChannel() == send.getChannel())
        links[{*getStage(send), send.getPeer()}].push_back({send, recv});
  for (auto &[link, transfers] : links) {
    auto [from, to] = link;
    size_t replicas = std::min(plan.getStage(from).getRanks().size(),
                               plan.getStage(to).getRanks().size());
    SmallVector<std::pair<unsigned, unsigned>> pairs;
    SmallVector<std::pair<StringRef, StringRef>> names;
    for (size_t r = 0; r < replicas; ++r) {
      names.push_back({deviceName(from, r), deviceName(to, r)});
      if (clusterModel)
        pairs.push_back({devices[from][r], devices[to][r]});
    }
    LinkTransfer t;
    t.payload = from < to ? Payload::Activation : Payload::ActivationGradient;
    for (Transfer &tr : transfers)
      if (encodable(tr.send.getValue()))
        t.plainBytes += bytesOf(tr.send.getValue());
    if (clusterModel) {
      // Replica pairs on one shared link split it (as the planner's comm()).
      std::map<unsigned, unsigned> uses;
      for (auto [x, y] : pairs)
        ++uses[clusterModel->linkId(x, y)];
      double slowest = 1e30, latency = 0;
      for (auto [id, count] : uses) {
        const Link &l = clusterModel->links[id];
        slowest = std::min(slowest, l.shared ? l.bandwidth / count : l.bandwidth);
        latency = std::max(latency, l.latency);
      }
      t.bandwidth = slowest;
      t.latency = latency;
      // The slowest encoder and decoder among the replica pairs.
      t.senderRate = t.receiverRate = 1e300;
      for (auto [x, y] : pairs) {
        t.senderRate = std::min(t.senderRate, quantizeRate(clusterModel->typeOf(x)));
        t.receiverRate = std::min(t.receiverRate, quantizeRate(clusterModel->typeOf(y)));
      }
      t.target = std::max(times[from], times[to]);
    }
    FailureOr<strait::Codec> picked =
        pick(pairs, names, t, clusterModel.has_value(), transfers.front().send,
             "the transfers from stage " + Twine(from) + " to stage " + Twine(to));
    if (failed(picked))
      return failure();
    strait::Codec codec = *picked;
    if (codec.isNone())
      continue;
    bool adapt = adaptBounds && codec.kind == CodecKind::TopK && codec.valueBits == 32;
    if (adapt && !(codec.ratio >= adaptBounds->first && codec.ratio <= adaptBounds->second))
      return transfers.front().send.emitError()
             << "--adaptive-topk=" << adaptiveTopk << ": the top-k ratio " << shortNumber(codec.ratio)
             << " of the transfers from stage " << from << " to stage " << to
             << " (its starting ratio) is outside [" << shortNumber(adaptBounds->first) << ", "
             << shortNumber(adaptBounds->second) << "]";
    for (Transfer &tr : transfers) {
      adaptedCuts |= adapt && encodable(tr.send.getValue());
      // AQ-SGD on the forward activations, its plain codec on the
      // activation gradients (the backward's sends).
      strait::Codec c = codecForPayload(codec, tr.send->hasAttr("dist.backward")
                                                   ? Payload::ActivationGradient
                                                   : Payload::Activation);
      if (!c.isNone())
        compressTransfer(tr, c, adapt);
    }
  }
  return success();
}

LogicalResult InsertCompressionPass::compressTiedExchanges(func::FuncOp func,
                                                           ArrayRef<double> times) {
  // Per sending stage, its per-step values in block order, each with its
  // transfers (one per other copy's stage).
  std::map<int64_t, llvm::MapVector<Value, SmallVector<Transfer>>> byStage;
  for (Operation &op : func.getBody().front())
    if (auto send = dyn_cast<SendOp>(op); send && send->hasAttr("dist.per_step"))
      if (auto recv = dyn_cast_or_null<RecvOp>(send->getNextNode());
          recv && recv.getChannel() == send.getChannel() && encodable(send.getValue()))
        byStage[*getStage(send)][send.getValue()].push_back({send, recv});
  for (auto &[from, values] : byStage) {
    SmallVector<std::pair<unsigned, unsigned>> pairs;
    SmallVector<std::pair<StringRef, StringRef>> names;
    std::set<int64_t> peers;
    LinkTransfer t;
    t.payload = Payload::TiedGradient;
    for (auto &[value, transfers] : values)
      for (Transfer &tr : transfers) {
        t.plainBytes += bytesOf(value);
        peers.insert(tr.send.getPeer());
      }
    for (int64_t to : peers) {
      size_t replicas = std::min(plan.getStage(from).getRanks().size(),
                                 plan.getStage(to).getRanks().size());
      for (size_t r = 0; r < replicas; ++r) {
        names.push_back({deviceName(from, r), deviceName(to, r)});
        if (clusterModel)
          pairs.push_back({devices[from][r], devices[to][r]});
      }
    }
    if (clusterModel) {
      // The slowest link and encoder among the pairs; once per step, so the
      // transfer may take the stages' M micro-batches of compute.
      t.bandwidth = 1e30;
      t.senderRate = t.receiverRate = 1e300;
      double target = 0;
      for (auto [x, y] : pairs) {
        const Link &l = clusterModel->links[clusterModel->linkId(x, y)];
        t.bandwidth = std::min(t.bandwidth, l.bandwidth);
        t.latency = std::max(t.latency, l.latency);
        t.senderRate = std::min(t.senderRate, quantizeRate(clusterModel->typeOf(x)));
        t.receiverRate = std::min(t.receiverRate, quantizeRate(clusterModel->typeOf(y)));
      }
      for (int64_t to : peers)
        target = std::max({target, times[from], times[to]});
      t.target = plan.getMicroBatches() * target;
    }
    t.gradientTopK = options.gradientTopK;
    // One feedback stream per value, however many copies it goes to.
    for (auto &[value, transfers] : values)
      t.residualBytes += bytesOf(value) * (lossScaling ? 2 : 1);
    if (static_cast<size_t>(from) < memoryLeft.size())
      t.memoryLeft = memoryLeft[from];
    Operation *at = values.front().second.front().send;
    std::string what = "the tied-gradient exchange from stage " + std::to_string(from);
    FailureOr<strait::Codec> picked = pick(pairs, names, t, clusterModel.has_value(), at, what);
    if (failed(picked))
      return failure();
    llvm::Expected<strait::Codec> fitted =
        givenCodec(codecForPayload(*picked, Payload::TiedGradient), t, what);
    if (!fitted)
      return at->emitError() << llvm::toString(fitted.takeError());
    strait::Codec codec = *fitted;
    keep(from, codec, t);
    if (codec.isNone())
      continue;
    for (auto &[value, transfers] : values) {
      bool usedHere = llvm::any_of(value.getUsers(), [](Operation *u) { return !isa<SendOp>(u); });
      if (!usedHere && transfers.size() == 1) { // only the peer reads it
        compressTransfer(transfers.front(), codec, false);
        ++numCompressedTied;
        continue;
      }
      // Every other use reads the decoded value, defined after the first
      // send (where the runtime replaces it in place): a use before, or a
      // value that is not a computed one (an argument, a variable's read, a
      // constant: replacing those would change them), stays exact.
      Operation *first = transfers.front().send;
      Operation *def = value.getDefiningOp();
      bool usedBefore = llvm::any_of(value.getUsers(), [&](Operation *u) {
        return !isa<SendOp>(u) && u->getBlock() == first->getBlock() &&
               u->isBeforeInBlock(first);
      });
      if (usedBefore || !def || isa<graph::ReadVariableOp, graph::ConstantOp>(def)) {
        first->emitRemark() << "the per-step transfer of this value stays exact: the sender "
                               "must go on with the decoded value, but the value is "
                            << (usedBefore ? "used before it is sent" : "not a computed one");
        continue;
      }
      OpBuilder b(first);
      Value bytes = encode(b, first->getLoc(), value, codec, from);
      Operation *compress = bytes.getDefiningOp();
      b.setInsertionPointAfter(first);
      Value decoded = decode(b, first->getLoc(), bytes, value.getType(), codec, from);
      value.replaceUsesWithIf(decoded, [&](OpOperand &use) {
        return use.getOwner() != compress && !isa<SendOp>(use.getOwner());
      });
      for (Transfer &tr : transfers) {
        tr.send.getValueMutable().assign(bytes);
        OpBuilder rb(tr.recv);
        auto recv = rb.create<RecvOp>(tr.recv.getLoc(), bytes.getType(), tr.recv.getPeerAttr(),
                                      tr.recv.getChannelAttr());
        recv->setAttrs(tr.recv->getAttrs());
        rb.setInsertionPointAfter(recv);
        Value got = this->decode(rb, recv.getLoc(), recv.getResult(), value.getType(), codec,
                                 *getStage(tr.recv));
        tr.recv.getResult().replaceAllUsesWith(got);
        tr.recv.erase();
        ++numCompressed;
      }
      ++numCompressedTied;
    }
  }
  return success();
}

LogicalResult InsertCompressionPass::compressAllReduces(func::FuncOp func, ArrayRef<double> times) {
  // The gradient all-reduces of a stage over the same islands run one after
  // another after its last backward: like the planner (one all-reduce of
  // the stage's parameters), they share one codec chosen for their total.
  llvm::MapVector<std::pair<int64_t, const void *>, SmallVector<AllReduceOp>> groups;
  func.walk([&](AllReduceOp op) {
    groups[{*getStage(op), op.getIslandsAttr().getAsOpaquePointer()}].push_back(op);
  });
  for (auto &[key, ops] : groups) {
    int64_t stage = key.first;
    AllReduceOp first = ops.front();
    ArrayRef<int64_t> ranks = plan.getStage(stage).getRanks().asArrayRef();
    auto replicaOf = [&](int64_t rank) {
      return static_cast<size_t>(llvm::find(ranks, rank) - ranks.begin());
    };
    // Islands as replica indices: the ops', else one per replica (the flat
    // ring is then the slow link).
    std::vector<std::vector<size_t>> islands;
    if (ArrayAttr attr = first.getIslandsAttr()) {
      for (auto group : attr.getAsRange<DenseI64ArrayAttr>()) {
        islands.emplace_back();
        for (int64_t r : group.asArrayRef())
          islands.back().push_back(replicaOf(r));
      }
    } else {
      for (int64_t r : first.getGroup())
        islands.push_back({replicaOf(r)});
    }
    double bytes = 0;
    for (AllReduceOp op : ops)
      if (encodable(op.getValue()))
        bytes += bytesOf(op.getValue());
    if (islands.size() < 2 || bytes <= 0)
      continue;
    // Overrides may name any pair of replicas in different islands.
    SmallVector<std::pair<unsigned, unsigned>> pairs;
    SmallVector<std::pair<StringRef, StringRef>> names;
    if (!options.links.empty())
      for (size_t a = 0; a < islands.size(); ++a)
        for (size_t b = a + 1; b < islands.size(); ++b)
          for (size_t x : islands[a])
            for (size_t y : islands[b]) {
              names.push_back({deviceName(stage, x), deviceName(stage, y)});
              if (clusterModel)
                pairs.push_back({devices[stage][x], devices[stage][y]});
            }
    LinkTransfer t;
    t.payload = Payload::WeightGradient;
    t.plainBytes = bytes;
    if (clusterModel) {
      std::vector<std::vector<unsigned>> deviceIslands;
      for (const std::vector<size_t> &island : islands) {
        deviceIslands.emplace_back();
        for (size_t r : island)
          deviceIslands.back().push_back(devices[stage][r]);
      }
      t = interIslandTransfer(*clusterModel, deviceIslands, bytes);
      // Under local steps the islands synchronize once per H iterations
      // (the outer step takes this codec): H iterations hide the transfer.
      t.target = plan.getMicroBatches() * times[stage] *
                 static_cast<double>(std::max<int64_t>(1, localSteps));
    }
    t.gradientTopK = options.gradientTopK;
    std::vector<size_t> sizes;
    for (const std::vector<size_t> &island : islands)
      sizes.push_back(island.size());
    t.residualBytes = allReduceResidualBytes(sizes, bytes, lossScaling);
    if (static_cast<size_t>(stage) < memoryLeft.size())
      t.memoryLeft = memoryLeft[stage];
    FailureOr<strait::Codec> picked = pick(pairs, names, t, clusterModel.has_value(), first,
                                           "the gradient all-reduce of stage " + Twine(stage));
    if (failed(picked))
      return failure();
    strait::Codec codec = *picked;
    keep(stage, codec, t);
    if (codec.kind == CodecKind::AqSgd) {
      // AQ-SGD keeps state per dataset sample: it has no meaning for a sum
      // of gradients.
      if (lastOverride >= 0) {
        first.emitError() << "--compress-link=" << options.links[lastOverride].text
                          << ": AQ-SGD compresses the forward activations of a pipeline cut, "
                             "but this link carries the gradient all-reduce of stage "
                          << stage << " (give it a gradient codec, e.g. int8)";
        aqsgdOnAllReduce = true;
      } else {
        first.emitWarning() << "--compress=" << compress
                            << " leaves the gradient all-reduce of stage " << stage
                            << " uncompressed: AQ-SGD compresses pipeline activations only "
                               "(give the all-reduce's link a codec with --compress-link)";
      }
      continue;
    }
    if (codec.isNone())
      continue;
    if (liveVariance && codec.kind == CodecKind::TopK)
      first.emitWarning() << "top-k on the gradients of AdamW, whose second moment then "
                             "follows sparse bursts, ends 5-17% above the uncompressed loss "
                             "(gpt2-tiny, docs/benchmarks.md); straitc --compressed-adam N "
                             "freezes it after N exact steps";
    for (AllReduceOp op : ops)
      compressAllReduce(op, codec);
  }
  return success();
}

void InsertCompressionPass::runOnOperation() {
  ModuleOp module = getOperation();
  plan = getPlan(module);
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!plan || !func || func.isExternal()) {
    module.emitError("dist-insert-compression needs a dist.plan and a function @main; run "
                     "dist-assign-stages and dist-insert-comm first");
    return signalPassFailure();
  }
  if (failed(parseOptions(module)))
    return signalPassFailure();
  readOptimizer(module);
  if (warmup && (exactSteps == 0 || compress == "none")) {
    module.emitError() << "--compressed-adam-warmup=" << warmupCodec
                       << " needs compressed AdamW (--compressed-adam N) and a codec for the "
                          "gradients (--compress)";
    return signalPassFailure();
  }
  if (compress == "none" && options.links.empty()) {
    if (adaptBounds) {
      module.emitError() << "--adaptive-topk=" << adaptiveTopk
                         << " needs top-k transfers between stages: give --compress topk:R "
                            "or --compress-link A:B=topk:R";
      return signalPassFailure();
    }
    return;
  }
  if (failed(loadCluster(module)))
    return signalPassFailure();
  readMemory(module, func);
  std::vector<double> times = stageTimes(func);
  if (failed(compressCuts(func, times)))
    return signalPassFailure();
  // Before the all-reduces: the exchange reads the all-reduced partials,
  // whichever value a codec gives them.
  if (failed(compressTiedExchanges(func, times)) || failed(compressAllReduces(func, times)))
    return signalPassFailure();
  if (aqsgdOnAllReduce)
    return signalPassFailure();
  if (adaptBounds && !adaptedCuts) {
    module.emitError() << "--adaptive-topk=" << adaptiveTopk
                       << ": no transfer between stages uses top-k (give --compress topk:R "
                          "or --compress-link A:B=topk:R; all-reduces never adapt)";
    return signalPassFailure();
  }
  for (auto [i, o] : llvm::enumerate(options.links))
    if (!used[i]) {
      module.emitError() << "--compress-link=" << o.text << ": no link of the plan joins '"
                         << o.a << "' and '" << o.b
                         << "' (sites, hosts or devices of the stages"
                         << (clusterModel ? "" : "; without a cluster, device names") << ")";
      return signalPassFailure();
    }
}
