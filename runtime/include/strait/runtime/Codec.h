//===- Codec.h - Compression of float32 transfers ---------------*- C++ -*-===//
//
// Encodes a float32 tensor into a self-describing byte payload and decodes it
// back, for the codecs of program::Codec (docs/runtime.md, "Codecs"):
//   CODEC_TOPK   the k = ceil(ratio * numel) largest magnitudes (selected in
//                linear expected time), f32 values + the smallest of three
//                index encodings (u32, u16 gaps, bitmap), named in the header;
//   CODEC_INT8   symmetric 8-bit, one f32 scale per block of block_size;
//   CODEC_INT4   symmetric 4-bit, two per byte, one f32 scale per block;
//   CODEC_INT2 / CODEC_INT3  2- / 3-bit codes (-2..1 / -4..3) packed LSB
//                first, one f32 scale per block, the least-squares one of
//                11 fractions (1/2..1) of max |x| / qmax and both signs
//                (IntBits.cpp);
//   CODEC_AQSGD_INT2/3/4  never encoded here: AqSgd.h turns an activation
//                into an INT2/3/4 (or INT8) payload of its delta;
//   CODEC_FP16 / CODEC_BF16  casts, round to nearest even;
//   CODEC_TOPK_INT8 / CODEC_TOPK_INT4  top-k whose kept values are int8 /
//                int4 codes (one f32 scale per block_size kept values) and
//                whose positions are Rice-coded gaps (size bound fixed by
//                (numel, k, block): topkQuantizedBytes) or, where smaller,
//                Elias-gamma-coded gaps (clustered positions).
// A payload starts with a 16-byte header (magic, codec, index encoding,
// block size, numel; top-k adds k). decode() checks every field and size
// against the destination, so a corrupt or truncated payload is a Status
// error, never a crash. ErrorFeedback keeps the sender's residual.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_CODEC_H
#define STRAIT_RUNTIME_CODEC_H

#include "strait/runtime/Status.h"
#include "strait_program.pb.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strait {
namespace rt {

/// Bytes of the fixed payload header (top-k adds 8 for k).
constexpr size_t kCodecHeaderBytes = 16;

/// Index encodings of a top-k payload (header byte 2).
enum class TopKIndexEncoding : uint8_t {
  None = 0,     // not a top-k payload
  U32 = 1,      // k absolute u32 indices
  U16Gaps = 2,  // u16 gaps between sorted indices; 0xFFFF adds 65535 and continues
  Bitmap = 3,   // ceil(numel / 8) bytes, bit i set when element i is kept
  Rice = 4,     // Rice-coded gaps, parameter riceParameter(numel, k) (TOPK_INT8/INT4)
  Gamma = 5,    // Elias-gamma-coded gaps (TOPK_INT8/INT4, where smaller than Rice)
};

/// Whether `codec` is a top-k codec (f32 or quantized values).
inline bool isTopKCodec(program::Codec codec) {
  return codec == program::CODEC_TOPK || codec == program::CODEC_TOPK_INT8 ||
         codec == program::CODEC_TOPK_INT4;
}

/// Whether `codec` is an AQ-SGD activation codec (delta against the
/// per-sample state both ends keep; AqSgd.h).
inline bool isAqSgdCodec(program::Codec codec) {
  return codec == program::CODEC_AQSGD_INT2 || codec == program::CODEC_AQSGD_INT3 ||
         codec == program::CODEC_AQSGD_INT4;
}

/// Largest INT8/INT4 block size.
constexpr uint32_t kMaxCodecBlock = 1u << 24;

/// Checks a CodecParams message: known codec, top-k ratio in (0, 1], block
/// size at most 2^24. `field` prefixes the message ("steps[3].send.codec").
/// Inline so that the executor (strait_rt_core) checks programs at load
/// without linking the codec library.
inline Status validateCodecParams(const program::CodecParams &params,
                                  const std::string &field) {
  switch (params.codec()) {
  case program::CODEC_NONE:
  case program::CODEC_FP16:
  case program::CODEC_BF16:
    if (params.adapt())
      return invalidArgument(field + ".adapt: only a top-k codec adapts its ratio");
    return Status::ok();
  case program::CODEC_TOPK_INT8:
  case program::CODEC_TOPK_INT4:
    if (params.adapt())
      return invalidArgument(field + ".adapt: only the f32 top-k codec adapts its ratio");
    if (params.block_size() > kMaxCodecBlock)
      return invalidArgument(field + ".block_size: " + std::to_string(params.block_size()) +
                             " exceeds 2^24");
    [[fallthrough]];
  case program::CODEC_TOPK:
    if (!(params.topk_ratio() > 0.0f && params.topk_ratio() <= 1.0f))
      return invalidArgument(field + ".topk_ratio: " +
                             std::to_string(params.topk_ratio()) +
                             " is not in (0, 1]");
    if (params.adapt() &&
        !(params.ratio_min() > 0.0f && params.ratio_min() <= params.topk_ratio() &&
          params.topk_ratio() <= params.ratio_max() && params.ratio_max() <= 1.0f))
      return invalidArgument(field + ": adaptive top-k needs 0 < ratio_min <= topk_ratio <= "
                             "ratio_max <= 1, got ratio_min " +
                             std::to_string(params.ratio_min()) + ", topk_ratio " +
                             std::to_string(params.topk_ratio()) + ", ratio_max " +
                             std::to_string(params.ratio_max()));
    return Status::ok();
  case program::CODEC_INT8:
  case program::CODEC_INT4:
  case program::CODEC_INT2:
  case program::CODEC_INT3:
  case program::CODEC_AQSGD_INT2:
  case program::CODEC_AQSGD_INT3:
  case program::CODEC_AQSGD_INT4:
    if (isAqSgdCodec(params.codec()) && params.error_feedback())
      return invalidArgument(field + ".error_feedback: an AQ-SGD codec keeps its own state "
                             "(the per-sample reconstruction), not a residual");
    if (params.adapt())
      return invalidArgument(field + ".adapt: only a top-k codec adapts its ratio");
    if (params.block_size() > kMaxCodecBlock)
      return invalidArgument(field + ".block_size: " +
                             std::to_string(params.block_size()) +
                             " exceeds 2^24");
    return Status::ok();
  default:
    return invalidArgument(field + ".codec: unknown codec " +
                           std::to_string(static_cast<int>(params.codec())));
  }
}

/// Elements per scale block of INT8/INT4 and kept values per scale of
/// TOPK_INT8/INT4 (block_size, 0 = 256).
uint32_t codecBlockSize(const program::CodecParams &params);

/// k of a top-k codec for numel elements: ceil(ratio * numel), at least 1.
int64_t topkCount(const program::CodecParams &params, int64_t numel);

/// Rice parameter b of the gaps of k sorted positions among numel: the
/// least b >= 0 with k * 2^b >= numel. Each gap g costs (g >> b) + 1 + b
/// bits and the gaps sum to at most numel - k, so k gaps take at most
/// k (b + 2) bits.
int riceParameter(uint64_t numel, uint64_t k);

/// Payload bytes of TOPK_INT8 (int4 = false) / TOPK_INT4 of numel elements
/// keeping k in scale blocks of `block` with Rice-coded gaps, the most a
/// payload takes: the header, u64 k, ceil(k / block) f32 scales, k (int8)
/// or ceil(k / 2) (int4) code bytes, and ceil(k (b + 2) / 8) bytes of
/// gaps (b = riceParameter). The encoder writes Elias-gamma-coded gaps
/// instead where they take fewer bytes (index encoding 5).
uint64_t topkQuantizedBytes(bool int4, uint64_t numel, uint64_t k, uint32_t block);

/// Encodes `numel` floats into `out` (resized to the payload size). With
/// CODEC_NONE the payload is the header and the raw floats.
Status encode(const program::CodecParams &params, const float *data,
              int64_t numel, std::vector<uint8_t> &out);

/// Error feedback's encode in one pass, where the codec allows it (fp16,
/// bf16, int8, int4 with an even block): sum = data + residual, `out` =
/// encode(sum), nextResidual = sum - decode(out) (0 where that is not
/// finite), and `decoded` (when given) = decode(out); bit-identical to those
/// steps taken apart, reading each input and writing each output once.
/// `nextResidual` may be `residual`. False for other codecs (nothing done).
StatusOr<bool> encodeWithResidual(const program::CodecParams &params, const float *data,
                                  const float *residual, float *nextResidual, int64_t numel,
                                  std::vector<uint8_t> &out, float *decoded = nullptr);

/// Decodes a payload into `numel` floats at `out`; with `accumulate` the
/// decoded values are added to `out` instead of overwriting it (elements a
/// top-k payload does not carry stay / count as zero).
Status decode(const uint8_t *payload, size_t bytes, float *out, int64_t numel,
              bool accumulate = false);

/// The codec named in a payload's header (InvalidArgument when it is not a
/// Strait codec payload).
StatusOr<program::Codec> payloadCodec(const uint8_t *payload, size_t bytes);

/// The kept elements of a top-k payload (TOPK, TOPK_INT8, TOPK_INT4) of
/// numel elements, checked as decode() checks them: `indices` increasing
/// below numel, `values` as decode() computes them (dequantized). decode()
/// of the payload is zero elsewhere and 0 + values[j] at indices[j]; with
/// accumulate, out[indices[j]] += values[j]. InvalidArgument for another
/// codec. A device decodes a top-k payload from these k pairs instead of
/// parsing the index encodings itself.
Status decodeSparse(const uint8_t *payload, size_t bytes, int64_t numel,
                    std::vector<uint32_t> &indices, std::vector<float> &values);

/// Error feedback of one (step, value) stream: encode() adds the residual to
/// the input, encodes the sum and keeps sum - decode(encoded) as the next
/// residual, so the residual carries exactly what was not sent.
class ErrorFeedback {
public:
  /// Encodes data (+ residual when params.error_feedback) and updates the
  /// residual. A change of numel restarts from a zero residual.
  Status encode(const program::CodecParams &params, const float *data,
                int64_t numel, std::vector<uint8_t> &out);
  const std::vector<float> &getResidual() const { return residual; }
  /// Restores a residual (a checkpoint's): the next encode() of a tensor of
  /// residual.size() elements continues from it.
  void setResidual(std::vector<float> r) { residual = std::move(r); }
  /// The residual wherever it lives: a copy of the host's, or the device's
  /// downloaded (empty: none yet, i.e. zero). Checkpoints and link-recovery
  /// snapshots save it; restoreResidual() puts it back.
  StatusOr<std::vector<float>> residualValues() const;
  /// setResidual() for a stream that may live on a device: a device stream
  /// takes `r` on the device (empty: back to zero); one that has not yet
  /// encoded keeps it on the host, and its first device encode of a tensor
  /// of r.size() elements takes it over.
  Status restoreResidual(std::vector<float> r);
  /// An iteration that may be discarded (loss scaling skips a step whose
  /// gradients overflowed; docs/training.md): the first encode() after this
  /// call keeps the residual it started from (the encode writes the new one
  /// into a second buffer and swaps, so it costs memory, not a copy), and so
  /// do the sub-streams made so far.
  Status beginIteration();
  /// Discards what this iteration's encodes did to the residual: back to the
  /// one kept since beginIteration(), or to none (zero) for a stream or
  /// sub-stream made during the iteration.
  Status rollBack();
  /// Multiplies the residual (and the sub-streams') by `factor`: a residual
  /// of loss-scaled gradients follows a change of the scale.
  Status scaleResidual(float factor);
  /// beginIteration() was called and no encode has kept the residual since
  /// (a device state made by this iteration's first encode starts armed).
  bool isArmed() const { return armed; }
  /// The sub-streams made so far (null where an index was never used).
  size_t numParts() const { return parts.size(); }
  const ErrorFeedback *getPart(size_t i) const { return i < parts.size() ? parts[i].get() : nullptr; }
  bool onDevice() const { return device != nullptr; }
  /// Bytes of the payload the last encode() wrote (0 before the first, and
  /// for a stream encoded on the device).
  uint64_t getLastPayloadBytes() const { return lastPayloadBytes; }
  /// A Send with keep_decoded (program-format.md): while `out` is set,
  /// encode() also writes decode(payload) to `out` (numel floats: what the
  /// peer receives) and keeps a copy of the payload (getLastPayload(), for
  /// the Sends that repeat it to other peers). Host encodes only.
  void setDecodedOutput(float *out) { decodedOut = out; }
  const std::vector<uint8_t> &getLastPayload() const { return lastPayload; }
  /// The two phases of the stream's last blocking send, as a transport that
  /// records them (the Gloo communicator's sendCoded) saw them: from posting
  /// until the peer took the header (mostly the peer getting to its
  /// receive), then until the payload was handed to the link (which waits
  /// for the link to have carried the previous payload of the pair); -1:
  /// not recorded. Adaptive top-k reads them (AdaptiveRatio.h).
  struct SendPhases {
    double headerSeconds = -1, payloadSeconds = -1;
  };
  void setLastSendPhases(const SendPhases &p) { lastPhases = p; }
  const SendPhases &getLastSendPhases() const { return lastPhases; }
  /// Sub-stream i (created empty on first use): a compressed all-reduce of 3
  /// or more ranks encodes each chunk, and the reduced chunk, separately.
  ErrorFeedback &part(size_t i) {
    if (parts.size() <= i)
      parts.resize(i + 1);
    if (!parts[i])
      parts[i] = std::make_unique<ErrorFeedback>();
    return *parts[i];
  }

  /// State that a device implementation of the codecs keeps for this stream
  /// (lib/cuda: the residual in GPU memory), destroyed with it. A stream
  /// encoded on the device keeps its residual there; getResidual() then
  /// stays empty.
  struct DeviceState {
    virtual ~DeviceState() = default;
    /// beginIteration(), rollBack() and scaleResidual() of a residual in
    /// device memory (ordered after the stream's encodes).
    virtual Status beginIteration() = 0;
    virtual Status rollBack() = 0;
    virtual Status scaleResidual(float factor) = 0;
    /// The residual's values (empty: none yet); `r` replaces them (empty:
    /// the next encode starts from zero).
    virtual StatusOr<std::vector<float>> download() const = 0;
    virtual Status upload(const std::vector<float> &r) = 0;
  };
  std::unique_ptr<DeviceState> &deviceState() { return device; }

private:
  template <typename Op> Status forDeviceAndParts(Op &&op);

  std::vector<float> residual;
  std::vector<float> previous;  ///< the residual beginIteration() keeps
  bool armed = false;           ///< beginIteration() since the last encode/rollBack
  bool kept = false;            ///< `previous` holds this iteration's starting residual
  uint64_t lastPayloadBytes = 0;
  float *decodedOut = nullptr;
  std::vector<uint8_t> lastPayload;
  SendPhases lastPhases;
  std::vector<std::unique_ptr<ErrorFeedback>> parts;
  std::unique_ptr<DeviceState> device;
};

/// Where a compressed all-reduce encodes and decodes
/// (AllReduceOptions::engine): the host codec by default; the CUDA codec
/// communicator passes one that encodes and decodes GPU memory on the GPU,
/// so only payloads cross to the host. Every engine writes rt::encode's
/// bytes and decodes as rt::decode, so ranks of different engines agree
/// bit for bit.
class CodecEngine {
public:
  virtual ~CodecEngine() = default;
  /// Encodes numel floats at x into `out`, through `feedback`'s error
  /// feedback when it is given (ErrorFeedback::encode), else rt::encode.
  virtual Status encode(const program::CodecParams &params, const float *x, int64_t numel,
                        ErrorFeedback *feedback, std::vector<uint8_t> &out) = 0;
  /// rt::decode of a payload into numel floats at out.
  virtual Status decode(const uint8_t *payload, size_t bytes, float *out, int64_t numel,
                        bool accumulate) = 0;
};

/// The host codec as an engine (rt::encode, ErrorFeedback::encode, rt::decode).
CodecEngine &hostCodecEngine();

/// Round-to-nearest-even conversions used by the FP16/BF16 codecs.
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBFloat16(float f);
float bfloat16ToFloat(uint16_t h);

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_CODEC_H
