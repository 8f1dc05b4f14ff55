//===- Compression.h - Codecs on slow links and hierarchical all-reduce -*- C++ -*-===//
//
// A pure analysis shared by the IR pass dist-insert-compression, the plan
// report and the simulator:
//  - the codecs (fp16/bf16 casts, int8/int4 with per-block f32 scales,
//    top-k values plus u32 indices), their wire size model and their
//    encode/decode time (a bytes/s throughput per device kind);
//  - the AdaTopK-like choice: the least lossy codec that brings a link's
//    transfer time down to a target (the adjacent stages' compute time);
//  - bandwidth islands of a stage's replicas (single linkage cut at the
//    largest bandwidth gap) and the hierarchical all-reduce over them;
//  - the compression of a PartitionPlan: a codec per cut and direction and
//    per stage all-reduce, and the plan's transfer times with them.
//
// See docs/planner.md (section Compression) and docs/distribution-dialect.md.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_ANALYSIS_COMPRESSION_H
#define STRAIT_ANALYSIS_COMPRESSION_H

#include "strait/Analysis/ClusterModel.h"
#include "strait/Analysis/Partitioner.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <limits>
#include <string>
#include <vector>

namespace strait {

/// Int2/Int3: plain 2- / 3-bit block quantization; AqSgd: AQ-SGD on the
/// forward activations of a pipeline cut (the delta against the per-sample
/// state both ends keep, at valueBits 2, 3 or 4; docs/runtime.md "AQ-SGD"),
/// whose activation gradients take the plain codec `backward`.
enum class CodecKind { None, FP16, BF16, Int8, Int4, TopK, Int2, Int3, AqSgd };

struct Codec {
  CodecKind kind = CodecKind::None;
  double ratio = 1;        ///< TopK: k / numel, in (0, 1]
  unsigned blockSize = 256; ///< Int8/Int4: elements per f32 scale; TopK with
                            ///< quantized values: kept values per scale
  unsigned valueBits = 32;  ///< TopK: 32 (f32 values), 8 or 4 (int8/int4 codes
                            ///< of the kept values, Rice-coded positions);
                            ///< AqSgd: 2, 3 or 4 (the delta's codes)
  CodecKind backward = CodecKind::Int8; ///< AqSgd: the activation gradients' codec
  bool errorFeedback = false;
  bool isNone() const { return kind == CodecKind::None; }
  bool operator==(const Codec &o) const {
    return kind == o.kind && ratio == o.ratio && blockSize == o.blockSize &&
           valueBits == o.valueBits && errorFeedback == o.errorFeedback &&
           (kind != CodecKind::AqSgd || backward == o.backward);
  }
};

/// "none", "fp16", "bf16", "int8", "int4", "int3", "int2", "topk:R" (R in
/// (0, 1]), "topk:R:int8", "topk:R:int4" (top-k with quantized values),
/// "aqsgd:B[:GRAD]" (AQ-SGD at B = 2, 3 or 4 bits on the activations, GRAD
/// one of none, fp16, bf16, int8 (default), int4, int3, int2 on their
/// gradients).
llvm::Expected<Codec> parseCodec(llvm::StringRef text);
/// The inverse of parseCodec ("topk:0.01", "topk:0.01:int8", "int8"), plus
/// "+ef" with error feedback when `withFeedback`.
std::string formatCodec(const Codec &codec, bool withFeedback = false);

/// Wire bytes of `elements` values of `elementBytes` each (the size model):
/// fp16/bf16 2n; int8 n + 4 ceil(n/B); int4 ceil(n/2) + 4 ceil(n/B); topk
/// k (elementBytes + 4) with k = ceil(ratio n); topk:R:int8 / topk:R:int4
/// k resp. ceil(k/2) + 4 ceil(k/B) + ceil(k (b + 2) / 8), b the least with
/// k 2^b >= n (dist::encodedByteCount); none n elementBytes.
double encodedBytes(const Codec &codec, double elements, unsigned elementBytes = 4);

/// Input bytes per second a device of `type` quantizes to int8 at: the
/// type's `codec_gbs`, else 2 GB/s for a CPU, 100 GB/s for a GPU or NPU.
double quantizeRate(const DeviceType &type);
/// Input bytes per second of `codec` on a device quantizing at `rate`:
/// casts 2x, int4 1/2x (packing), top-k selection (linear time) 1/4x; the
/// CPU defaults match the runtime's measured codecs within about 2x
/// (docs/benchmarks.md, Runtime: codec throughput).
double codecThroughput(double rate, CodecKind codec);
/// Encode on the sender plus decode on the receiver of `plainBytes`, their
/// quantization rates given.
double codecTime(const Codec &codec, double plainBytes, double senderRate,
                 double receiverRate);

/// TiedGradient: the once-per-step exchange of a tied variable's partial
/// gradients between its copies' stages (docs/distribution-dialect.md):
/// a weight gradient (error feedback, bf16 first) that AQ-SGD's GRAD codec
/// also compresses.
enum class Payload { Activation, ActivationGradient, WeightGradient, TiedGradient };

/// Weight gradients: all-reduced or exchanged between a tied variable's copies.
inline bool isWeightGradient(Payload p) {
  return p == Payload::WeightGradient || p == Payload::TiedGradient;
}

/// One link's traffic in one direction, per micro-batch (or per iteration
/// for an all-reduce phase), and the time it should fit in.
struct LinkTransfer {
  double plainBytes = 0;
  unsigned elementBytes = 4;
  double latency = 0, bandwidth = 1e30; ///< effective, per flow
  /// Bytes crossing the link per plain byte (2(p-1)/p for a ring).
  double trafficFactor = 1;
  /// Latency hops (2(p-1) for a ring).
  double latencyHops = 1;
  /// Quantization rates (bytes/s) of the encoding and decoding devices.
  double senderRate = 100e9, receiverRate = 100e9;
  Payload payload = Payload::Activation;
  double target = 0; ///< seconds; compression aims at time <= target
  /// Encoders working in parallel (replica pairs of a cut): the codec time
  /// of plainBytes / parallel.
  double parallel = 1;
  /// Whether weight gradients may take top-k: false under AdamW whose second
  /// moment follows the compressed gradients (CompressionOptions).
  bool gradientTopK = true;
  /// Weight gradients: the error-feedback residual a codec with feedback
  /// keeps on the rank that keeps the most (allReduceResidualBytes; the
  /// weight's bytes for a tied exchange), and the memory that rank's device
  /// has left beside the plan's peak (the stage's capacity less its peak
  /// memory: PartitionPlan, dist.memory_left), infinite when unknown.
  double residualBytes = 0;
  double memoryLeft = std::numeric_limits<double>::infinity();
  bool residualFits() const { return residualBytes <= memoryLeft; }
};

/// Bytes of error-feedback residual that the rank keeping the most holds
/// for a compressed gradient all-reduce of `plainBytes` over islands of
/// `islandSizes` members (one island per replica: a flat exchange), as the
/// runtime keeps them (GlooCommunicator::hierarchicalAllReduce and
/// exchangeSum): the part it encodes (plainBytes / size for equal islands
/// of size members, all of it for unequal islands' leaders) and, over 3+
/// islands, the reduced chunk it encodes again (1/k of that part). Twice
/// that under loss scaling (ErrorFeedback::beginIteration keeps the
/// residual the iteration started from). 0 for fewer than two islands.
double allReduceResidualBytes(llvm::ArrayRef<size_t> islandSizes, double plainBytes,
                              bool lossScaling = false);

/// The codec that an override (--compress-link) or --compress gives a
/// transfer: error feedback on weight gradients where the residual fits
/// (t.residualFits()). Where it does not, a cast (fp16, bf16) goes without
/// feedback and any other lossy codec is an error naming `what` (the
/// transfer), the residual and the memory left.
llvm::Expected<Codec> givenCodec(Codec codec, const LinkTransfer &t, llvm::StringRef what);

/// The codec a transfer of `payload` gets under `codec`: AqSgd becomes its
/// `backward` codec on activation gradients and tied-gradient exchanges,
/// none on all-reduced gradients; anything else is unchanged.
Codec codecForPayload(const Codec &codec, Payload payload);

/// Time of the transfer with `codec` (codec time included).
double transferTimeWith(const LinkTransfer &t, const Codec &codec);

/// The least lossy codec whose time fits the target: none, then fp16
/// (activations) or bf16 (gradients), int8, int4; weight gradients then,
/// when int4 is still over 3x the target, top-k with the largest ratio that
/// fits (at least 1e-3) (else int4: top-k converges more slowly; never top-k
/// without t.gradientTopK), with error feedback on every lossy gradient codec. When nothing fits,
/// the fastest candidate if it saves at least 10%, else none. A weight gradient whose residual does
/// not fit in memory (t.residualFits()) has one candidate: bf16 without error feedback (quantizing
/// without feedback biases the small coordinates to zero).
Codec chooseCodec(const LinkTransfer &t);

/// Islands of `devices` (indices into the cluster): components of the
/// maximum spanning tree over their links with the edges below the largest
/// bandwidth gap (ratio >= minGapRatio) removed, in tree order. One island
/// when no gap is that large.
std::vector<std::vector<unsigned>> islandsOf(const ClusterModel &cluster,
                                             llvm::ArrayRef<unsigned> devices,
                                             double minGapRatio = 1.5);

/// Hierarchical all-reduce over islands: ring all-reduce inside each
/// island (reduce, then share), and between them, as the runtime's
/// exchange (a reduce-scatter and an all-gather in which every pair of the
/// k peers swaps 1/k at once), either size parallel exchanges carrying
/// 1/size of the bytes each (equal sizes, no shared link crossed) or one
/// over the islands' first members carrying all the bytes.
/// `interBytes` (default `bytes`) is what the inter-island phase carries
/// (smaller under a codec); `interExtra` is added to that phase (codec time).
/// `interShare` scales the inter-island phase: 1/H under local steps, where
/// the islands synchronize once per H iterations (PlannerOptions::localSteps).
double islandAllReduceTime(const ClusterModel &cluster,
                           llvm::ArrayRef<std::vector<unsigned>> islands, double bytes,
                           double interBytes = -1, double interExtra = 0,
                           double interShare = 1);
/// The inter-island phase alone, as a LinkTransfer of `bytes` (its ring's
/// slowest hop and largest latency).
LinkTransfer interIslandTransfer(const ClusterModel &cluster,
                                 llvm::ArrayRef<std::vector<unsigned>> islands,
                                 double bytes);

/// Codecs of a plan: per cut j (stage j -> j + 1) and direction, and per
/// stage for the inter-island phase of its gradient all-reduce.
struct CompressionOptions {
  /// "auto" (choose per link), "none", or one codec for every transfer.
  std::string mode = "auto";
  /// Per link: the two endpoints (site, host or device names, either
  /// order) and the codec.
  struct LinkOverride {
    std::string a, b;
    Codec codec;
    std::string text; ///< as given, for messages
  };
  std::vector<LinkOverride> links;
  /// Local steps H (PlannerOptions::localSteps): a stage whose replicas span
  /// several islands pays the compressed inter-island phase once per H
  /// iterations.
  unsigned localSteps = 1;
  /// Whether auto may give weight gradients top-k. False for AdamW whose
  /// second moment is updated from the all-reduced gradient: error-feedback
  /// top-k feeds it sparse bursts (gpt2-tiny, 1000 steps: top-k 1% int8
  /// +16.6%, 10% +5.3% loss); true for SGD and for compressed AdamW
  /// (straitc --compressed-adam: the second moment frozen after an exact
  /// warm-up; docs/planner.md, "Compression").
  bool gradientTopK = true;
  /// Loss scaling (f16): the error-feedback residuals are kept twice
  /// (allReduceResidualBytes).
  bool lossScaling = false;
  /// The codec of every transfer as given (an earlier choice: the codecs a
  /// job runs, re-timed for another cluster by strait-run --replan's
  /// re-simulation); mode, links and gradientTopK then choose nothing. Its
  /// cuts, stages and tied exchanges must be the plan's.
  const struct PlanCompression *codecs = nullptr;
};

struct PlanCompression {
  std::vector<Codec> forward, backward;           ///< per cut
  std::vector<double> forwardBytes, backwardBytes; ///< wire bytes per micro-batch
  std::vector<double> forwardCodecTime, backwardCodecTime;
  /// Per cut and direction, per micro-batch, codec time included.
  std::vector<double> forwardTime, backwardTime;
  std::vector<Codec> allReduce;                   ///< per stage
  std::vector<double> allReduceTime;              ///< per stage, with its codec
  /// Per stage: the codec of its tied-gradient exchange (what it sends to
  /// the other copies' stages once per iteration; none where it holds no
  /// copy), the plain and wire bytes it sends, and the exchange's time with
  /// the codec (StagePlan::tiedExchangeTime without).
  std::vector<Codec> tied;
  std::vector<double> tiedPlainBytes, tiedBytes, tiedTime;
  /// Per stage: the error-feedback residual per rank that its compressed
  /// all-reduce and tied exchange keep (memory beside the plan's peak);
  /// the residual a gradient codec would have kept where it goes without
  /// feedback for want of memory; and the memory its devices have left
  /// beside the plan's peak before the residuals (infinite: unknown).
  std::vector<double> residualBytes, droppedResidual, memoryLeft;
  bool any() const;
};

/// Parses "A:B=CODEC[:RATIO]" (a --compress-link value).
llvm::Expected<CompressionOptions::LinkOverride> parseLinkOverride(llvm::StringRef text);

/// Whether `a`:`b` names the link between devices x and y (their sites,
/// hosts or names, either order).
bool linkMatches(const ClusterModel &cluster, llvm::StringRef a, llvm::StringRef b,
                 unsigned x, unsigned y);

/// Chooses the codecs of `plan` (f32 payloads). Errors name an override
/// that matches no link of the plan.
llvm::Expected<PlanCompression> compressPlan(const PartitionPlan &plan,
                                             const ClusterModel &cluster,
                                             const CompressionOptions &options);

/// Compressed AdamW (straitc --compressed-adam N): the codecs of the N
/// warm-up steps. Every stage all-reduce that `steady` compresses (the ones
/// dist-insert-compression gives dist.exact_steps) carries `warmup` instead:
/// none, exact f32 (the plan's own all-reduce time), or the dense codec of
/// --compressed-adam-warmup, its time recomputed as compressPlan does. The
/// cuts and tied exchanges keep their codecs.
PlanCompression warmupCompression(const PlanCompression &steady, const PartitionPlan &plan,
                                  const ClusterModel &cluster, const Codec &warmup,
                                  unsigned localSteps = 1);

/// One line per compressed link: cut, direction, codec, ratio, time before
/// and after; and per stage all-reduce.
std::string formatCompression(const PlanCompression &c, const PartitionPlan &plan,
                              const ClusterModel &cluster);

/// One line per stage whose gradient codecs keep error-feedback residuals
/// (their bytes beside the plan's peak), or go without feedback because
/// the residual does not fit (formatCompression ends with these).
std::string formatResidualMemory(const PlanCompression &c, const PartitionPlan &plan);

} // namespace strait

#endif // STRAIT_ANALYSIS_COMPRESSION_H
