//===- AqSgd.h - AQ-SGD delta compression of pipeline activations -*- C++ -*-===//
//
// AQ-SGD (Wang et al., NeurIPS 2022) on the forward sends of a pipeline cut
// (CODEC_AQSGD_INT2/3/4; docs/runtime.md "AQ-SGD"). Both ends of a cut keep,
// per stream (peer, channel) and dataset sample x, m(x): the last
// reconstruction of x's activation rows, as f16 (half the bytes of f32).
// The sender encodes the delta a(x) - m(x) as an INT2 / INT3 / INT4 payload
// (INT8 while the micro-batch holds a sample not seen before, whose m is
// zero), both ends decode the same payload into Q(delta) and set
// m(x) <- f16(m(x) + Q(delta)); the receiver's value is m(x) + Q(delta) in
// f32 (before the state's f16 rounding), and the two states stay
// bit-identical. A micro-batch's rows are its samples'
// (numel / samples elements each, sample-major as the stacked batch).
//
// The executor (strait_rt_core, which does not link the codecs) sees only
// the ActivationDeltas interface; strait-run gives it an AqSgdState and the
// dataset samples of each iteration's batch (DataLoader::lastSampleIds).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_AQSGD_H
#define STRAIT_RUNTIME_AQSGD_H

#include "strait/runtime/Status.h"
#include "strait/runtime/Tensor.h"
#include "strait_program.pb.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace strait {
namespace rt {

/// One direction of one cut as this rank sees it: sends to / receives from
/// `peer` on `channel` (every micro-batch's transfer of one value).
struct DeltaStreamKey {
  bool send = true;
  int peer = 0;
  uint32_t channel = 0;
  bool operator<(const DeltaStreamKey &o) const {
    return std::tie(send, peer, channel) < std::tie(o.send, o.peer, o.channel);
  }
  /// "send-p1-c0" / "recv-p0-c0": checkpoint file names and messages.
  std::string name() const;
};

/// Per-sample state of the delta codecs, as the executor uses it.
class ActivationDeltas {
public:
  virtual ~ActivationDeltas() = default;
  /// Sender: `delta` <- activation - m (rows of `samples`), `wire` <- the
  /// plain codec that carries it; m <- f16(m + Q(delta)).
  virtual Status prepareSend(const DeltaStreamKey &key, const uint64_t *samples, size_t count,
                             const Tensor &activation, const program::CodecParams &params,
                             std::vector<float> &delta, program::CodecParams &wire) = 0;
  /// Receiver, before the transfer: the plain codec the sender chose.
  virtual Status prepareRecv(const DeltaStreamKey &key, const uint64_t *samples, size_t count,
                             int64_t numel, const program::CodecParams &params,
                             program::CodecParams &wire) = 0;
  /// Receiver, after it: `value` holds Q(delta); it becomes m + Q(delta),
  /// and m <- f16(m + Q(delta)).
  virtual Status finishRecv(const DeltaStreamKey &key, const uint64_t *samples, size_t count,
                            const Tensor &value) = 0;
};

/// The bits of an AQ-SGD codec's steady-state payload (2, 3, 4), 0 for
/// another codec.
int aqsgdBits(program::Codec codec);
/// The plain codec of those bits (CODEC_INT2 / INT3 / INT4).
program::Codec aqsgdWireCodec(program::Codec codec);

class AqSgdState : public ActivationDeltas {
public:
  /// `numSamples`: the dataset's samples (ids are below it); `maxBytes`:
  /// the most all streams' m may take together.
  AqSgdState(uint64_t numSamples, uint64_t maxBytes)
      : numSamples(numSamples), maxBytes(maxBytes) {}

  struct Stream {
    uint64_t rowElements = 0;
    std::vector<uint16_t> m;   ///< numSamples x rowElements, f16 bits
    std::vector<uint8_t> seen; ///< numSamples: 1 once a sample was sent
  };

  Status prepareSend(const DeltaStreamKey &key, const uint64_t *samples, size_t count,
                     const Tensor &activation, const program::CodecParams &params,
                     std::vector<float> &delta, program::CodecParams &wire) override;
  Status prepareRecv(const DeltaStreamKey &key, const uint64_t *samples, size_t count,
                     int64_t numel, const program::CodecParams &params,
                     program::CodecParams &wire) override;
  Status finishRecv(const DeltaStreamKey &key, const uint64_t *samples, size_t count,
                    const Tensor &value) override;

  uint64_t getNumSamples() const { return numSamples; }
  /// The streams made so far (checkpoints save them).
  const std::map<DeltaStreamKey, Stream> &getStreams() const { return streams; }
  /// Restores a stream (a checkpoint's): sizes must agree with numSamples.
  Status setStream(const DeltaStreamKey &key, Stream stream);
  /// Bytes the streams' m and flags take.
  uint64_t stateBytes() const;

private:
  /// The stream of `key` for transfers of `numel` elements over `count`
  /// samples, made (zero m) on first use within the byte limit.
  StatusOr<Stream *> streamFor(const DeltaStreamKey &key, int64_t numel, const uint64_t *samples,
                               size_t count);
  /// The wire codec of a micro-batch: INT8 when a sample is new, else the
  /// codec's bits.
  program::CodecParams wireFor(const Stream &s, const uint64_t *samples, size_t count,
                               const program::CodecParams &params) const;
  /// m <- f16(m_old + dq) for every row (all rows read m_old first, so a
  /// sample twice in one micro-batch ends with its last row's value);
  /// `out` (may be null) gets m_old + dq in f32.
  Status update(Stream &s, const DeltaStreamKey &key, const uint64_t *samples, size_t count,
                const std::vector<float> &mOld, const float *dq, float *out);
  std::vector<float> gather(const Stream &s, const uint64_t *samples, size_t count) const;

  uint64_t numSamples, maxBytes;
  std::map<DeltaStreamKey, Stream> streams;
  std::mutex mutex;
};

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_AQSGD_H
