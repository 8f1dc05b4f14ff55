//===- Compression.cpp - Codecs on slow links and hierarchical all-reduce -===//

#include "strait/Analysis/Compression.h"
#include "strait/Analysis/Workload.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <numeric>

using namespace strait;

static llvm::Error codecError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Expected<Codec> strait::parseCodec(llvm::StringRef text) {
  auto [name, ratioText] = text.split(':');
  std::optional<CodecKind> kind = llvm::StringSwitch<std::optional<CodecKind>>(name)
                                      .Case("none", CodecKind::None)
                                      .Case("fp16", CodecKind::FP16)
                                      .Case("bf16", CodecKind::BF16)
                                      .Case("int8", CodecKind::Int8)
                                      .Case("int4", CodecKind::Int4)
                                      .Case("int3", CodecKind::Int3)
                                      .Case("int2", CodecKind::Int2)
                                      .Case("topk", CodecKind::TopK)
                                      .Case("aqsgd", CodecKind::AqSgd)
                                      .Default(std::nullopt);
  if (!kind)
    return codecError("unknown codec '" + name +
                      "' (expected none, fp16, bf16, int8, int4, int3, int2, topk:RATIO or "
                      "aqsgd:BITS)");
  Codec codec;
  codec.kind = *kind;
  if (*kind == CodecKind::AqSgd) {
    auto [bitsText, gradText] = ratioText.split(':');
    unsigned bits = 0;
    if (bitsText.getAsInteger(10, bits) || bits < 2 || bits > 4)
      return codecError("aqsgd:BITS[:GRAD] needs BITS 2, 3 or 4 (the activation delta's codes); "
                        "got '" + bitsText + "'");
    codec.valueBits = bits;
    if (!gradText.empty() || ratioText.ends_with(":")) {
      llvm::Expected<Codec> grad = parseCodec(gradText);
      if (!grad || grad->kind == CodecKind::TopK || grad->kind == CodecKind::AqSgd) {
        if (!grad)
          llvm::consumeError(grad.takeError());
        return codecError("aqsgd:BITS:GRAD quantizes the activation gradients with none, fp16, "
                          "bf16, int8, int4, int3 or int2; got '" + gradText + "'");
      }
      codec.backward = grad->kind;
    }
    return codec;
  }
  if (*kind != CodecKind::TopK) {
    if (!ratioText.empty())
      return codecError("codec '" + name + "' takes no ratio (only topk:RATIO does)");
    return codec;
  }
  auto [numberText, valuesText] = ratioText.split(':');
  if (!valuesText.empty() || ratioText.ends_with(":")) {
    if (valuesText == "int8")
      codec.valueBits = 8;
    else if (valuesText == "int4")
      codec.valueBits = 4;
    else
      return codecError("topk:RATIO:VALUES quantizes the kept values to int8 or int4; got '" +
                        valuesText + "'");
  }
  ratioText = numberText;
  double ratio = 0;
  if (ratioText.empty() || ratioText.getAsDouble(ratio) || !(ratio > 0 && ratio <= 1))
    return codecError("topk needs a ratio in (0, 1], e.g. topk:0.01; got '" + ratioText +
                      "'");
  codec.ratio = ratio;
  return codec;
}

std::string strait::formatCodec(const Codec &codec, bool withFeedback) {
  std::string s;
  switch (codec.kind) {
  case CodecKind::None: return "none";
  case CodecKind::FP16: s = "fp16"; break;
  case CodecKind::BF16: s = "bf16"; break;
  case CodecKind::Int8: s = "int8"; break;
  case CodecKind::Int4: s = "int4"; break;
  case CodecKind::Int3: s = "int3"; break;
  case CodecKind::Int2: s = "int2"; break;
  case CodecKind::AqSgd: {
    Codec grad;
    grad.kind = codec.backward;
    s = "aqsgd:" + std::to_string(codec.valueBits) + ":" + formatCodec(grad);
    break;
  }
  case CodecKind::TopK: {
    llvm::raw_string_ostream os(s);
    os << "topk:" << llvm::format("%g", codec.ratio);
    if (codec.valueBits != 32)
      os << (codec.valueBits == 4 ? ":int4" : ":int8");
    break;
  }
  }
  if (withFeedback && codec.errorFeedback)
    s += "+ef";
  return s;
}

double strait::encodedBytes(const Codec &codec, double elements, unsigned elementBytes) {
  double n = std::max(0.0, elements);
  double blocks = std::ceil(n / std::max(1u, codec.blockSize));
  switch (codec.kind) {
  case CodecKind::None: return n * elementBytes;
  case CodecKind::FP16:
  case CodecKind::BF16: return 2 * n;
  case CodecKind::Int8: return n + 4 * blocks;
  case CodecKind::Int4: return std::ceil(n / 2) + 4 * blocks;
  case CodecKind::Int3: return std::ceil(3 * n / 8) + 4 * blocks;
  case CodecKind::Int2: return std::ceil(2 * n / 8) + 4 * blocks;
  // The steady state (every sample seen before); the first epoch goes int8.
  case CodecKind::AqSgd: return std::ceil(codec.valueBits * n / 8) + 4 * blocks;
  case CodecKind::TopK: {
    double k = std::ceil(codec.ratio * n - 1e-6);
    if (codec.valueBits == 32)
      return k * (elementBytes + 4);
    k = std::max(1.0, k);
    double b = 0; // Rice parameter: the least b with k 2^b >= n
    while (k * std::exp2(b) < n)
      ++b;
    double codes = codec.valueBits == 4 ? std::ceil(k / 2) : k;
    return codes + 4 * std::ceil(k / std::max(1u, codec.blockSize)) + std::ceil(k * (b + 2) / 8);
  }
  }
  return n * elementBytes;
}

double strait::quantizeRate(const DeviceType &type) {
  if (type.codecBandwidth > 0)
    return type.codecBandwidth;
  return type.kind == DeviceKind::CPU ? 2e9 : 100e9;
}

double strait::codecThroughput(double rate, CodecKind codec) {
  switch (codec) {
  case CodecKind::None: return 1e300;
  case CodecKind::FP16:
  case CodecKind::BF16: return 2 * rate;
  case CodecKind::Int8: return rate;
  case CodecKind::Int4: return rate / 2; // nibble packing
  case CodecKind::Int3:
  case CodecKind::Int2: return rate / 2; // bit packing
  case CodecKind::AqSgd: return rate / 4; // delta, local decode, state update
  case CodecKind::TopK: return rate / 4;
  }
  return rate;
}

Codec strait::codecForPayload(const Codec &codec, Payload payload) {
  if (codec.kind != CodecKind::AqSgd || payload == Payload::Activation)
    return codec;
  Codec plain;
  plain.kind = payload == Payload::WeightGradient ? CodecKind::None : codec.backward;
  plain.blockSize = codec.blockSize;
  return plain;
}

double strait::codecTime(const Codec &codec, double plainBytes, double senderRate,
                         double receiverRate) {
  if (codec.isNone() || plainBytes <= 0)
    return 0;
  return plainBytes / codecThroughput(senderRate, codec.kind) +
         plainBytes / codecThroughput(receiverRate, codec.kind);
}

double strait::transferTimeWith(const LinkTransfer &t, const Codec &codec) {
  if (t.plainBytes <= 0)
    return 0;
  double elements = t.plainBytes / t.elementBytes;
  double wire = encodedBytes(codec, elements, t.elementBytes);
  return t.latencyHops * t.latency + t.trafficFactor * wire / t.bandwidth +
         codecTime(codec, t.plainBytes / std::max(1.0, t.parallel), t.senderRate,
                   t.receiverRate);
}

/// Top-k ratios auto chooses from, largest first: 0.2, then one significant
/// digit from 0.1 down to 0.001.
static std::vector<double> topkRatioGrid() {
  std::vector<double> grid{0.2, 0.1};
  for (double scale : {0.01, 0.001})
    for (int d = 9; d >= 1; --d)
      grid.push_back(d * scale);
  return grid;
}

double strait::allReduceResidualBytes(llvm::ArrayRef<size_t> islandSizes, double plainBytes,
                                      bool lossScaling) {
  size_t k = islandSizes.size();
  if (k < 2 || plainBytes <= 0)
    return 0;
  bool equal = llvm::all_of(islandSizes, [&](size_t s) { return s == islandSizes.front(); });
  double part = equal ? plainBytes / double(std::max<size_t>(1, islandSizes.front())) : plainBytes;
  double residual = k > 2 ? part * (1 + 1.0 / double(k)) : part;
  return lossScaling ? 2 * residual : residual;
}

/// "3.00 GiB", "38.15 MiB", "128.00 KiB": residuals span all three.
static std::string formatBytes(double bytes) {
  const char *unit = bytes >= double(1ull << 30) ? "GiB" : bytes >= double(1 << 20) ? "MiB" : "KiB";
  double scale = bytes >= double(1ull << 30) ? double(1ull << 30)
                 : bytes >= double(1 << 20)  ? double(1 << 20)
                                             : 1024.0;
  return llvm::formatv("{0:f2} {1}", bytes / scale, unit).str();
}

llvm::Expected<Codec> strait::givenCodec(Codec codec, const LinkTransfer &t, llvm::StringRef what) {
  codec.errorFeedback = !codec.isNone() && isWeightGradient(t.payload);
  // AQ-SGD is no gradient codec: codecForPayload turns it into one first.
  if (!codec.errorFeedback || t.residualFits() || codec.kind == CodecKind::AqSgd)
    return codec;
  codec.errorFeedback = false;
  if (codec.kind == CodecKind::FP16 || codec.kind == CodecKind::BF16)
    return codec;
  return codecError(what + ": " + formatCodec(codec) + " needs error feedback, whose residual (" +
                    formatBytes(t.residualBytes) + " per rank) does not fit in the " +
                    formatBytes(std::max(0.0, t.memoryLeft)) +
                    " the plan leaves on the stage's devices; give it bf16 (no residual) "
                    "or none, or more memory");
}

Codec strait::chooseCodec(const LinkTransfer &t) {
  Codec none;
  double base = transferTimeWith(t, none);
  if (t.plainBytes <= 0 || base <= t.target)
    return none;
  if (isWeightGradient(t.payload) && !t.residualFits()) {
    // No memory for a residual: rounding to bf16 (to nearest, unbiased) is
    // the one codec that goes without feedback.
    Codec bf16;
    bf16.kind = CodecKind::BF16;
    double time = transferTimeWith(t, bf16);
    return time <= t.target || time <= 0.9 * base ? bf16 : none;
  }
  bool gradient = t.payload != Payload::Activation;
  std::vector<Codec> ladder;
  auto add = [&](CodecKind kind) {
    Codec c;
    c.kind = kind;
    c.errorFeedback = isWeightGradient(t.payload);
    ladder.push_back(c);
  };
  add(gradient ? CodecKind::BF16 : CodecKind::FP16);
  add(CodecKind::Int8);
  add(CodecKind::Int4);
  for (const Codec &c : ladder)
    if (transferTimeWith(t, c) <= t.target)
      return c;
  // Top-k converges more slowly than quantization early in training (150
  // AdamW steps of gpt2-tiny on real text: int8/int4 end within 0.5-1.5% of
  // the uncompressed loss, top-k 5% and 1% at +2.3% and +3.2%; docs/
  // benchmarks.md). It is worth that only where int4 still leaves the link
  // far over its target; otherwise int4, the fastest quantization, serves.
  constexpr double kTopKOnlyBeyond = 3.0;
  // Under AdamW with a live second moment top-k costs 5-17% of the loss at
  // any ratio that saves bytes (CompressionOptions::gradientTopK): int4 then.
  if (isWeightGradient(t.payload) &&
      (!t.gradientTopK || transferTimeWith(t, ladder.back()) <= kTopKOnlyBeyond * t.target))
    return ladder.back();
  if (isWeightGradient(t.payload)) {
    // Top-k with int8 values (topk:R:int8): the same k as f32 top-k at
    // about a third of the bytes (2.0-2.3 bytes per kept value against 8 in
    // the size model), and on gpt2-tiny it converges as f32 top-k of the
    // same ratio does, within the seeds' spread (AdamW and SGD, 300-1000
    // steps; docs/benchmarks.md, "Top-k with quantized values"), so for the
    // bytes that fit it keeps ~3.5x more values, which converges better.
    // The largest ratio of the grid whose time fits.
    Codec topk;
    topk.kind = CodecKind::TopK;
    topk.valueBits = 8;
    topk.errorFeedback = true;
    for (double r : topkRatioGrid()) {
      topk.ratio = r;
      if (transferTimeWith(t, topk) <= t.target)
        return topk;
    }
    topk.ratio = 1e-3;
    ladder.push_back(topk);
  }
  // Nothing fits: the fastest candidate, when it saves at least 10%.
  const Codec *best = &none;
  double bestTime = base;
  for (const Codec &c : ladder)
    if (double time = transferTimeWith(t, c); time < bestTime) {
      best = &c;
      bestTime = time;
    }
  return bestTime <= 0.9 * base ? *best : none;
}

//===----------------------------------------------------------------------===//
// Islands and the hierarchical all-reduce
//===----------------------------------------------------------------------===//

std::vector<std::vector<unsigned>> strait::islandsOf(const ClusterModel &cluster,
                                                     llvm::ArrayRef<unsigned> devices,
                                                     double minGapRatio) {
  size_t k = devices.size();
  if (k < 2)
    return {std::vector<unsigned>(devices.begin(), devices.end())};
  // Prim's maximum spanning tree over the subset, O(k^2).
  std::vector<double> best(k, -1);
  std::vector<size_t> from(k, 0), order{0};
  std::vector<char> inTree(k, 0);
  struct Edge {
    size_t a, b;
    double bw;
  };
  std::vector<Edge> edges;
  inTree[0] = 1;
  size_t current = 0;
  for (size_t step = 1; step < k; ++step) {
    for (size_t v = 0; v < k; ++v)
      if (!inTree[v]) {
        double bw = cluster.bandwidth(devices[current], devices[v]);
        if (bw > best[v]) {
          best[v] = bw;
          from[v] = current;
        }
      }
    size_t next = k;
    for (size_t v = 0; v < k; ++v)
      if (!inTree[v] && (next == k || best[v] > best[next]))
        next = v;
    inTree[next] = 1;
    edges.push_back({from[next], next, best[next]});
    order.push_back(next);
    current = next;
  }
  std::vector<double> levels;
  for (const Edge &e : edges)
    levels.push_back(e.bw);
  std::sort(levels.begin(), levels.end(), std::greater<double>());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  double threshold = -1, gap = minGapRatio;
  for (size_t i = 0; i + 1 < levels.size(); ++i)
    if (levels[i] / levels[i + 1] >= gap) {
      gap = levels[i] / levels[i + 1];
      threshold = levels[i];
    }
  std::vector<size_t> parent(k);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](size_t x) {
    while (parent[x] != x)
      x = parent[x] = parent[parent[x]];
    return x;
  };
  for (const Edge &e : edges)
    if (threshold < 0 || e.bw >= threshold)
      parent[find(e.a)] = find(e.b);
  std::vector<int> islandOf(k, -1);
  std::vector<std::vector<unsigned>> islands;
  for (size_t v : order) {
    size_t root = find(v);
    if (islandOf[root] < 0) {
      islandOf[root] = islands.size();
      islands.emplace_back();
    }
    islands[islandOf[root]].push_back(devices[v]);
  }
  return islands;
}

double strait::islandAllReduceTime(const ClusterModel &cluster,
                                   llvm::ArrayRef<std::vector<unsigned>> islands,
                                   double bytes, double interBytes, double interExtra,
                                   double interShare) {
  if (islands.empty() || bytes <= 0)
    return 0;
  if (interBytes < 0)
    interBytes = bytes;
  double buckets = allReduceBuckets(cluster, bytes);
  double inner = 0;
  for (const std::vector<unsigned> &island : islands)
    inner = std::max(inner, ringAllReduceTime(cluster, island, bytes, buckets));
  if (islands.size() < 2)
    return inner;
  std::vector<unsigned> leaders;
  for (const std::vector<unsigned> &island : islands)
    leaders.push_back(island.front());
  // The runtime's exchange between islands (GlooCommunicator::exchangeSum):
  // with k peers, a reduce-scatter and an all-gather in which every pair
  // swaps bytes / k at once, each pair on its own link; with two, one swap
  // of all the bytes. Not a ring: a ring carries 2 (k - 1) / k of the bytes
  // over its slowest link, (k - 1) x this on a mesh of distinct links (3
  // sites: 2x; bench/runtime/baselines_wan.py measured it).
  auto exchange = [&](llvm::ArrayRef<unsigned> peers, double b) {
    size_t k = peers.size();
    if (k <= 2) // one swap: the ring's time
      return ringAllReduceTime(cluster, peers, b, buckets);
    // Each peer's k - 1 flows leave through one network interface: they run
    // at once, each at most at its link's rate, and together at most at the
    // peer's fastest link's rate (a NIC is no faster than its fastest link);
    // without that bound 63 single-GPU hosts would each push 63 flows at
    // full rate.
    double t = 0;
    for (size_t i = 0; i < k; ++i) {
      double slowest = 0, fastest = 0, latency = 0;
      for (size_t j = 0; j < k; ++j) {
        if (i == j)
          continue;
        const Link &l = cluster.link(peers[i], peers[j]);
        slowest = std::max(slowest, b / double(k) / l.bandwidth);
        fastest = std::max(fastest, l.bandwidth);
        latency = std::max(latency, cluster.latency(peers[i], peers[j]));
      }
      double nic = double(k - 1) * b / double(k) / fastest;
      t = std::max(t, latency * buckets + std::max(slowest, nic));
    }
    return 2 * t;
  };
  double outer = exchange(leaders, interBytes);
  // Equal islands on unshared links: one ring per member, 1/size each.
  size_t local = islands.front().size();
  bool equal = llvm::all_of(islands, [&](const auto &i) { return i.size() == local; });
  bool shared = false;
  if (equal && local > 1) {
    double split = 0;
    std::vector<unsigned> ring(islands.size());
    for (size_t r = 0; r < local; ++r) {
      for (size_t g = 0; g < islands.size(); ++g) {
        ring[g] = islands[g][r];
        shared |= cluster.link(ring[g], islands[(g + 1) % islands.size()][r]).shared;
      }
      split = std::max(split, exchange(ring, interBytes / local));
    }
    if (!shared)
      outer = std::min(outer, split);
  }
  return inner + (outer + interExtra) * interShare;
}

LinkTransfer strait::interIslandTransfer(const ClusterModel &cluster,
                                         llvm::ArrayRef<std::vector<unsigned>> islands,
                                         double bytes) {
  LinkTransfer t;
  t.plainBytes = bytes;
  t.payload = Payload::WeightGradient;
  std::vector<unsigned> leaders;
  for (const std::vector<unsigned> &island : islands)
    leaders.push_back(island.front());
  size_t g = leaders.size();
  if (g < 2)
    return t;
  RingCost ring = ringCost(cluster, leaders);
  t.latency = ring.latency;
  t.bandwidth = ring.bandwidth;
  t.trafficFactor = 2.0 * (g - 1) / g;
  t.latencyHops = 2.0 * (g - 1) * allReduceBuckets(cluster, bytes);
  double slowest = 1e300;
  for (unsigned d : leaders)
    slowest = std::min(slowest, quantizeRate(cluster.typeOf(d)));
  t.senderRate = t.receiverRate = slowest;
  return t;
}

//===----------------------------------------------------------------------===//
// Codecs of a plan
//===----------------------------------------------------------------------===//

bool PlanCompression::any() const {
  auto some = [](const std::vector<Codec> &v) {
    return llvm::any_of(v, [](const Codec &c) { return !c.isNone(); });
  };
  return some(forward) || some(backward) || some(allReduce) || some(tied);
}

llvm::Expected<CompressionOptions::LinkOverride>
strait::parseLinkOverride(llvm::StringRef text) {
  auto [link, codecText] = text.split('=');
  auto [a, b] = link.split(':');
  if (a.empty() || b.empty() || codecText.empty())
    return codecError("'" + text + "': expected SITE_A:SITE_B=CODEC[:RATIO]");
  llvm::Expected<Codec> codec = parseCodec(codecText);
  if (!codec)
    return codecError("'" + text + "': " + llvm::toString(codec.takeError()));
  return CompressionOptions::LinkOverride{a.str(), b.str(), *codec, text.str()};
}

bool strait::linkMatches(const ClusterModel &cluster, llvm::StringRef a, llvm::StringRef b,
                         unsigned x, unsigned y) {
  const Device &dx = cluster.devices[x], &dy = cluster.devices[y];
  auto pairIs = [&](llvm::StringRef p, llvm::StringRef q) {
    return (p == a && q == b) || (p == b && q == a);
  };
  return pairIs(cluster.sites[dx.site], cluster.sites[dy.site]) ||
         pairIs(cluster.hosts[dx.host], cluster.hosts[dy.host]) ||
         pairIs(dx.name, dy.name);
}

namespace {
/// The codec a transfer between device pairs gets: an override naming one
/// of the pairs, else the mode's.
struct CodecPicker {
  const ClusterModel &cluster;
  const CompressionOptions &options;
  std::optional<Codec> global; ///< mode is a codec
  std::vector<char> used;

  CodecPicker(const ClusterModel &cluster, const CompressionOptions &options)
      : cluster(cluster), options(options), used(options.links.size(), 0) {}

  /// `what` names the transfer in errors (givenCodec).
  llvm::Expected<Codec> pick(llvm::ArrayRef<std::pair<unsigned, unsigned>> pairs,
                             const LinkTransfer &t, llvm::StringRef what) {
    for (auto [i, o] : llvm::enumerate(options.links))
      for (auto [x, y] : pairs)
        if (linkMatches(cluster, o.a, o.b, x, y)) {
          used[i] = 1;
          return givenCodec(codecForPayload(o.codec, t.payload), t,
                            "--compress-link=" + o.text + ": " + what.str());
        }
    if (options.mode == "none")
      return Codec();
    if (global)
      return givenCodec(codecForPayload(*global, t.payload), t,
                        "--compress=" + options.mode + ": " + what.str());
    LinkTransfer u = t;
    u.gradientTopK = options.gradientTopK;
    return chooseCodec(u);
  }
};

/// Where a weight gradient's codec went without error feedback for want of
/// memory (givenCodec, chooseCodec): the residual it would keep, for the
/// report. A codec with feedback adds its residual to the stage's.
void noteResidual(PlanCompression &out, size_t stage, const Codec &c, const LinkTransfer &t) {
  if (c.errorFeedback) {
    out.residualBytes[stage] += t.residualBytes;
    out.memoryLeft[stage] -= t.residualBytes;
  } else if (!c.isNone() && !t.residualFits()) {
    out.droppedResidual[stage] += t.residualBytes;
  }
}
} // namespace

/// The tied-gradient exchanges (docs/distribution-dialect.md): each stage
/// holding a copy sends its partial gradient (the weight's bytes) to every
/// other holder once per iteration, in the planner's tiedExchangeTime. As
/// dist-insert-compression: a weight gradient (error feedback) whose time
/// may take the holders' M micro-batches of compute.
static llvm::Error compressTiedExchanges(const PartitionPlan &plan, const ClusterModel &cluster,
                                         CodecPicker &picker, PlanCompression &out,
                                         const PlanCompression *keep, bool lossScaling) {
  size_t S = plan.stages.size();
  out.tied.assign(S, Codec());
  out.tiedPlainBytes.assign(S, 0);
  out.tiedBytes.assign(S, 0);
  out.tiedTime.assign(S, 0);
  std::vector<unsigned> holders;
  double weightBytes = 0, compute = 0;
  for (unsigned j = 0; j < S; ++j) {
    const StagePlan &s = plan.stages[j];
    if (s.tiedExchangeTime <= 0)
      continue;
    holders.push_back(j);
    // The first holder keeps no count of the copy's bytes (tiedBytes).
    weightBytes = std::max(weightBytes, s.tiedBytes);
    compute = std::max(compute, s.fwdTime + s.bwdTime);
  }
  if (holders.size() < 2 || weightBytes <= 0)
    return llvm::Error::success();
  for (unsigned j : holders) {
    const StagePlan &s = plan.stages[j];
    LinkTransfer t;
    t.payload = Payload::TiedGradient;
    t.plainBytes = weightBytes * (holders.size() - 1);
    t.target = plan.microBatches * compute;
    t.senderRate = t.receiverRate = 1e300;
    std::vector<std::pair<unsigned, unsigned>> pairs;
    for (unsigned k : holders) {
      if (k == j)
        continue;
      const StagePlan &o = plan.stages[k];
      for (size_t r = 0; r < std::min(s.devices.size(), o.devices.size()); ++r) {
        pairs.push_back({s.devices[r], o.devices[r]});
        t.senderRate = std::min(t.senderRate, quantizeRate(cluster.typeOf(s.devices[r])));
        t.receiverRate = std::min(t.receiverRate, quantizeRate(cluster.typeOf(o.devices[r])));
      }
      if (!s.devices.empty() && !o.devices.empty())
        t.latency += cluster.links[cluster.linkId(s.devices[0], o.devices[0])].latency;
    }
    // The bandwidth that gives the planner's time for the plain bytes.
    t.bandwidth = t.plainBytes / std::max(1e-12, s.tiedExchangeTime - t.latency);
    // One feedback stream per weight, however many copies it goes to.
    t.residualBytes = lossScaling ? 2 * weightBytes : weightBytes;
    t.memoryLeft = out.memoryLeft[j];
    Codec c;
    if (keep) {
      c = keep->tied[j];
    } else {
      llvm::Expected<Codec> picked = picker.pick(
          pairs, t, llvm::formatv("the tied-gradient exchange from stage {0}", j).str());
      if (!picked)
        return picked.takeError();
      c = *picked;
    }
    noteResidual(out, j, c, t);
    out.tied[j] = c;
    out.tiedPlainBytes[j] = t.plainBytes;
    out.tiedBytes[j] = c.isNone() ? t.plainBytes : encodedBytes(c, t.plainBytes / 4, 4);
    out.tiedTime[j] = c.isNone() ? s.tiedExchangeTime : transferTimeWith(t, c);
  }
  return llvm::Error::success();
}

/// The islands a stage's gradient all-reduce runs over, and the share of
/// iterations that pay its inter-island phase (as the planner costs it,
/// PlanContext::makeChunk: local steps discount the inter-island phase of
/// replicas over several islands). One island: each replica its own (the
/// flat ring is the slow phase).
static std::pair<std::vector<std::vector<unsigned>>, double>
allReduceIslands(const ClusterModel &cluster, const StagePlan &s, unsigned localSteps) {
  std::vector<std::vector<unsigned>> islands = islandsOf(cluster, s.devices);
  double share = islands.size() > 1 ? 1.0 / std::max(1u, localSteps) : 1.0;
  if (islands.size() < 2) {
    islands.clear();
    for (unsigned d : s.devices)
      islands.push_back({d});
  }
  return {std::move(islands), share};
}

PlanCompression strait::warmupCompression(const PlanCompression &steady,
                                          const PartitionPlan &plan,
                                          const ClusterModel &cluster, const Codec &warmup,
                                          unsigned localSteps) {
  PlanCompression out = steady;
  for (size_t j = 0; j < plan.stages.size() && j < out.allReduce.size(); ++j) {
    const StagePlan &s = plan.stages[j];
    if (out.allReduce[j].isNone()) // not compressed: no exact_steps either
      continue;
    out.allReduce[j] = warmup;
    if (warmup.isNone()) {
      out.allReduceTime[j] = s.allReduceTime;
      continue;
    }
    auto [islands, share] = allReduceIslands(cluster, s, localSteps);
    LinkTransfer t = interIslandTransfer(cluster, islands, s.gradBytes);
    out.allReduceTime[j] = islandAllReduceTime(
        cluster, islands, s.gradBytes, encodedBytes(warmup, s.gradBytes / 4, 4),
        codecTime(warmup, s.gradBytes, t.senderRate, t.receiverRate), share);
  }
  return out;
}

llvm::Expected<PlanCompression> strait::compressPlan(const PartitionPlan &plan,
                                                     const ClusterModel &cluster,
                                                     const CompressionOptions &options) {
  CodecPicker picker(cluster, options);
  const PlanCompression *keep = options.codecs;
  size_t S = plan.stages.size();
  if (keep && (keep->forward.size() + 1 != std::max<size_t>(S, 1) ||
               keep->backward.size() != keep->forward.size() || keep->allReduce.size() != S ||
               keep->tied.size() != S))
    return codecError(llvm::formatv("the given codecs are for {0} stages, the plan has {1}",
                                    keep->allReduce.size(), S));
  if (!keep && options.mode != "auto" && options.mode != "none") {
    llvm::Expected<Codec> c = parseCodec(options.mode);
    if (!c)
      return codecError("--compress=" + options.mode + ": " + llvm::toString(c.takeError()));
    picker.global = *c;
  }
  PlanCompression out;
  out.residualBytes.assign(S, 0);
  out.droppedResidual.assign(S, 0);
  out.memoryLeft.assign(S, std::numeric_limits<double>::infinity());
  for (size_t j = 0; j < S; ++j)
    if (plan.stages[j].capacity > 0)
      out.memoryLeft[j] = plan.stages[j].capacity - plan.stages[j].peakMemory;
  auto stageTime = [&](size_t j) {
    return plan.stages[j].fwdTime + plan.stages[j].bwdTime;
  };
  for (size_t j = 0; j + 1 < S; ++j) {
    const StagePlan &s = plan.stages[j], &next = plan.stages[j + 1];
    std::vector<std::pair<unsigned, unsigned>> pairs;
    for (size_t i = 0; i < std::min(s.devices.size(), next.devices.size()); ++i)
      pairs.push_back({s.devices[i], next.devices[i]});
    LinkTransfer t;
    t.plainBytes = s.sendBytes;
    t.latency = s.sendLatency;
    t.bandwidth = s.sendBandwidth > 0 ? s.sendBandwidth : 1e30;
    t.parallel = pairs.size();
    t.target = std::max(stageTime(j), stageTime(j + 1));
    t.senderRate = t.receiverRate = 1e300;
    for (auto [x, y] : pairs) {
      t.senderRate = std::min(t.senderRate, quantizeRate(cluster.typeOf(x)));
      t.receiverRate = std::min(t.receiverRate, quantizeRate(cluster.typeOf(y)));
    }
    for (bool backward : {false, true}) {
      if (backward) {
        std::swap(t.senderRate, t.receiverRate);
        t.payload = Payload::ActivationGradient;
      }
      Codec c;
      if (keep) {
        c = backward ? keep->backward[j] : keep->forward[j];
      } else {
        llvm::Expected<Codec> picked = picker.pick(
            pairs, t, llvm::formatv("the transfers from stage {0} to {1}", j, j + 1).str());
        if (!picked) // activations and their gradients need no residual
          return picked.takeError();
        c = *picked;
      }
      (backward ? out.backward : out.forward).push_back(c);
      (backward ? out.backwardBytes : out.forwardBytes)
          .push_back(encodedBytes(c, t.plainBytes / t.elementBytes, t.elementBytes));
      (backward ? out.backwardCodecTime : out.forwardCodecTime)
          .push_back(codecTime(c, t.plainBytes / t.parallel, t.senderRate, t.receiverRate));
      (backward ? out.backwardTime : out.forwardTime).push_back(transferTimeWith(t, c));
    }
  }
  // The tied exchanges first, as dist-insert-compression: their residuals
  // then leave the all-reduces less memory.
  if (llvm::Error e = compressTiedExchanges(plan, cluster, picker, out, keep, options.lossScaling))
    return std::move(e);
  for (size_t j = 0; j < S; ++j) {
    const StagePlan &s = plan.stages[j];
    Codec c;
    double time = s.allReduceTime;
    if (s.devices.size() > 1 && s.gradBytes > 0) {
      auto [islands, share] = allReduceIslands(cluster, s, options.localSteps);
      LinkTransfer t = interIslandTransfer(cluster, islands, s.gradBytes);
      // Local steps: H iterations of compute hide one synchronization.
      t.target = plan.microBatches * stageTime(j) / share;
      std::vector<size_t> sizes;
      for (const std::vector<unsigned> &island : islands)
        sizes.push_back(island.size());
      t.residualBytes = allReduceResidualBytes(sizes, s.gradBytes, options.lossScaling);
      t.memoryLeft = out.memoryLeft[j];
      // Overrides may name any pair of replicas in different islands.
      std::vector<std::pair<unsigned, unsigned>> pairs;
      if (!options.links.empty())
        for (size_t a = 0; a < islands.size(); ++a)
          for (size_t b = a + 1; b < islands.size(); ++b)
            for (unsigned x : islands[a])
              for (unsigned y : islands[b])
                pairs.push_back({x, y});
      if (keep) {
        c = keep->allReduce[j];
      } else {
        llvm::Expected<Codec> picked =
            picker.pick(pairs, t, llvm::formatv("the gradient all-reduce of stage {0}", j).str());
        if (!picked)
          return picked.takeError();
        c = *picked;
      }
      noteResidual(out, j, c, t);
      if (!c.isNone())
        time = islandAllReduceTime(
            cluster, islands, s.gradBytes, encodedBytes(c, s.gradBytes / 4, 4),
            codecTime(c, s.gradBytes, t.senderRate, t.receiverRate), share);
    }
    out.allReduce.push_back(c);
    out.allReduceTime.push_back(time);
  }
  for (auto [i, o] : llvm::enumerate(options.links))
    if (!keep && !picker.used[i]) // given codecs: the overrides chose them before
      return codecError("--compress-link=" + o.text + ": no link of the plan joins '" + o.a +
                        "' and '" + o.b + "' (sites, hosts or devices of the stages)");
  return out;
}

std::string strait::formatCompression(const PlanCompression &c, const PartitionPlan &plan,
                                      const ClusterModel &cluster) {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto ms = [](double s) { return llvm::formatv("{0:f2} ms", s * 1e3).str(); };
  for (size_t j = 0; j < c.forward.size(); ++j) {
    const StagePlan &s = plan.stages[j];
    for (bool backward : {false, true}) {
      const Codec &codec = backward ? c.backward[j] : c.forward[j];
      double wire = backward ? c.backwardBytes[j] : c.forwardBytes[j];
      os << llvm::formatv("link stage {0} -> {1} ({2}, {3}): {4}", backward ? j + 1 : j,
                          backward ? j : j + 1, backward ? "gradients" : "activations",
                          cluster.links[s.sendLink].origin, formatCodec(codec, true));
      if (!codec.isNone())
        os << llvm::formatv(" ({0:f1}x)", s.sendBytes / std::max(1.0, wire));
      os << llvm::formatv(", {0} -> {1} per micro-batch\n", ms(s.sendTime),
                          ms(backward ? c.backwardTime[j] : c.forwardTime[j]));
    }
  }
  for (size_t j = 0; j < c.tied.size(); ++j) {
    if (c.tiedPlainBytes[j] <= 0)
      continue;
    os << llvm::formatv("tied-gradient exchange from stage {0} (per iteration): {1}", j,
                        formatCodec(c.tied[j], true));
    if (!c.tied[j].isNone())
      os << llvm::formatv(" ({0:f1}x)", c.tiedPlainBytes[j] / std::max(1.0, c.tiedBytes[j]));
    os << llvm::formatv(", {0} -> {1}\n", ms(plan.stages[j].tiedExchangeTime),
                        ms(c.tiedTime[j]));
  }
  for (size_t j = 0; j < c.allReduce.size(); ++j) {
    const StagePlan &s = plan.stages[j];
    if (s.devices.size() < 2)
      continue;
    size_t islands = islandsOf(cluster, s.devices).size();
    const Codec &codec = c.allReduce[j];
    os << llvm::formatv("all-reduce stage {0} ({1} replicas, {2}): {3}", j, s.devices.size(),
                        islands > 1 ? llvm::formatv("{0} islands", islands).str()
                                    : std::string("one island"),
                        formatCodec(codec, true));
    if (!codec.isNone())
      os << llvm::formatv(" ({0:f1}x {1})",
                          s.gradBytes / std::max(1.0, encodedBytes(codec, s.gradBytes / 4)),
                          islands > 1 ? "between islands" : "on the ring");
    os << llvm::formatv(", {0} -> {1}\n", ms(s.allReduceTime), ms(c.allReduceTime[j]));
  }
  return text + formatResidualMemory(c, plan);
}

std::string strait::formatResidualMemory(const PlanCompression &c, const PartitionPlan &plan) {
  std::string text;
  llvm::raw_string_ostream os(text);
  for (size_t j = 0; j < c.residualBytes.size() && j < plan.stages.size(); ++j) {
    const StagePlan &s = plan.stages[j];
    if (c.residualBytes[j] > 0)
      os << llvm::formatv("memory of stage {0}: error-feedback residuals {1} per rank beside "
                          "the plan's peak of {2} (capacity {3})\n",
                          j, formatBytes(c.residualBytes[j]), formatBytes(s.peakMemory),
                          formatBytes(s.capacity));
    if (c.droppedResidual[j] > 0)
      os << llvm::formatv("memory of stage {0}: gradients compressed without error feedback: "
                          "their {1} residual per rank does not fit in the {2} left beside "
                          "the plan's peak\n",
                          j, formatBytes(c.droppedResidual[j]),
                          formatBytes(std::max(0.0, c.memoryLeft[j] + c.residualBytes[j])));
  }
  return text;
}
