//===- CudaCodecCommunicator.cpp - Codecs on the GPU in front of a transport ===//
//
// A Communicator decorator: sendCoded / recvCoded of f32 tensors in device or
// managed memory encode and decode on the GPU (Codec.cu), so only the
// payload crosses PCIe and the host, instead of the whole f32 tensor being
// migrated to the host, encoded by the CPU and migrated back before the next
// kernel touches it. Everything else goes to the inner communicator
// unchanged.
//
// Wire format: the inner communicator's plain send of the payload bytes. For
// the Gloo communicator that is exactly what its own sendCoded puts on the
// wire (a message header with the byte count, then the payload on the
// channel's two slots), and its recvCoded accepts it; the payload bytes are
// rt::encode's (CodecLayout.h). A GPU rank and a CPU rank thus interoperate
// in both directions. The receive side posts a receive of the exact payload
// size computed from the local codec parameters (the inner communicator's
// plain recv needs it), so a fixed-size codec must use the same block size
// on both ends (the compiler writes one CodecParams per transfer); a top-k
// receive, whose size depends on the sender's index encoding, goes to the
// inner communicator's recvCoded (host decode into managed memory: only k
// values are written).
//
// Error feedback: the residual of a stream encoded here lives in GPU memory
// (ErrorFeedback::deviceState), with the host codec's arithmetic, so the
// payloads of a stream equal the host codec's step after step.
//
// All-reduces of GPU memory: a flat compressed all-reduce runs the inner
// communicator's exchange protocol with this communicator's CodecEngine, so
// every encode (with the stream's device residual) and every decode-and-sum
// happens on the GPU and only payloads cross to the host; a top-k payload is
// decoded to its (index, value) pairs on the host (rt::decodeSparse) and
// scattered on the GPU. Plain and hierarchical all-reduces (whose rings sum
// f32 chunks on the host), and those of codecs without device kernels
// (TOPK_INT8/INT4, INT2/INT3), copy the tensor to pinned host memory once,
// run the inner all-reduce there and copy the result back, instead of the
// host's reads faulting managed pages over one by one.
//
// Not on the device: tensors in plain host memory, and the sends and
// receives of the codecs without device kernels, which the host codec runs
// on managed memory.
//
//===----------------------------------------------------------------------===//
#include "CudaCodec.h"
#include "CudaKernels.h"
#include "../codec/CodecLayout.h"

#include <algorithm>
#include <cmath>
#include <mutex>

namespace strait {
namespace rt {
namespace cuda {
namespace {

/// A device allocation that grows (cudaMalloc / cudaMallocHost).
struct Block {
  void *p = nullptr;
  size_t bytes = 0;
  bool host = false;
  ~Block() { release(); }
  void release() {
    if (p)
      host ? cudaFreeHost(p) : cudaFree(p);
    p = nullptr;
    bytes = 0;
  }
  Status reserve(size_t want, const char *what) {
    if (want <= bytes)
      return Status::ok();
    release();
    size_t n = std::max<size_t>(want, 1 << 16);
    cudaError_t err = host ? cudaMallocHost(&p, n) : cudaMalloc(&p, n);
    if (err != cudaSuccess) {
      cudaGetLastError();
      p = nullptr;
      return cudaStatus(err, std::string(what) + " of " + std::to_string(n) + " bytes");
    }
    bytes = n;
    return Status::ok();
  }
};

/// The residual of one error-feedback stream, on the GPU. Loss scaling's
/// iterations (ErrorFeedback::beginIteration): the armed iteration's first
/// encode writes the new residual into `previous` and swaps the two blocks,
/// so `previous` keeps the old one for rollBack().
struct DeviceResidual : ErrorFeedback::DeviceState {
  Block residual, previous;
  int64_t numel = -1;
  bool armed = false, kept = false;
  int device = 0;
  cudaStream_t stream = nullptr;

  DeviceResidual(int device, cudaStream_t stream) : device(device), stream(stream) {}
  void swapBlocks() {
    std::swap(residual.p, previous.p);
    std::swap(residual.bytes, previous.bytes);
  }
  Status beginIteration() override {
    armed = true;
    kept = false;
    return Status::ok();
  }
  Status rollBack() override {
    // The stream's encodes have finished (encodeOnDevice synchronizes).
    if (kept)
      swapBlocks();
    else if (!armed) // made during the iteration: the next encode starts from zero
      numel = -1;
    armed = kept = false;
    return Status::ok();
  }
  Status scaleResidual(float factor) override {
    if (numel <= 0)
      return Status::ok();
    cudaSetDevice(device);
    launchCodecScale(static_cast<float *>(residual.p), factor, numel, stream);
    return cudaStatus(cudaGetLastError(), "codec residual scale");
  }
  StatusOr<std::vector<float>> download() const override {
    std::vector<float> r(numel > 0 ? static_cast<size_t>(numel) : 0);
    if (r.empty())
      return r;
    cudaSetDevice(device);
    STRAIT_RETURN_IF_ERROR(cudaStatus(cudaMemcpyAsync(r.data(), residual.p, 4 * r.size(),
                                                      cudaMemcpyDeviceToHost, stream),
                                      "codec residual download"));
    STRAIT_RETURN_IF_ERROR(cudaStatus(cudaStreamSynchronize(stream), "codec residual download"));
    return r;
  }
  Status upload(const std::vector<float> &r) override {
    kept = false; // an armed stream keeps `r` at its next encode
    if (r.empty()) {
      numel = -1; // the next encode zeroes it
      return Status::ok();
    }
    cudaSetDevice(device);
    STRAIT_RETURN_IF_ERROR(residual.reserve(4 * r.size(), "codec residual"));
    STRAIT_RETURN_IF_ERROR(cudaStatus(cudaMemcpyAsync(residual.p, r.data(), 4 * r.size(),
                                                      cudaMemcpyHostToDevice, stream),
                                      "codec residual upload"));
    numel = static_cast<int64_t>(r.size());
    return cudaStatus(cudaStreamSynchronize(stream), "codec residual upload");
  }
};

int codecNumber(const program::CodecParams &p) { return static_cast<int>(p.codec()); }

class CudaCodecCommunicator : public Communicator {
public:
  CudaCodecCommunicator(std::unique_ptr<Communicator> inner, int device, cudaStream_t stream)
      : inner(std::move(inner)), device(device), stream(stream) {
    staging.host = true;
    reduceStaging.host = true;
  }
  ~CudaCodecCommunicator() override {
    cudaSetDevice(device);
    cudaStreamSynchronize(stream);
    payload.release();
    sum.release();
    flags.release();
    work.release();
    staging.release();
    reduceStaging.release();
    cudaStreamDestroy(stream);
  }

  int getRank() const override { return inner->getRank(); }
  int getWorldSize() const override { return inner->getWorldSize(); }
  // Transfers: sendVia / recvVia (staged or encoded on the GPU).
  Status send(const Tensor &t, int peer, uint32_t channel) override {
    return sendVia(t, peer, channel, program::CodecParams(), nullptr, false);
  }
  Status recv(const Tensor &t, int peer, uint32_t channel) override {
    return recvVia(t, peer, channel, program::CodecParams(), false);
  }
  Status allReduceSum(const Tensor &t, uint32_t channel) override {
    return allReduce(t, channel, AllReduceOptions());
  }
  Status allReduceSumGroup(const Tensor &t, const std::vector<int> &ranks,
                           uint32_t channel) override {
    AllReduceOptions o;
    o.ranks = ranks;
    return allReduce(t, channel, o);
  }
  Status barrier() override { return inner->barrier(); }
  /// Interrupts the inner transport's blocked transfers (link recovery, a
  /// peer's failure): this layer has none of its own.
  void abort(const std::string &reason) override { inner->abort(reason); }
  /// Flat compressed: the inner exchange with this GPU's codec engine.
  /// Plain or hierarchical: the inner all-reduce on a pinned host copy.
  Status allReduce(const Tensor &t, uint32_t channel, const AllReduceOptions &options) override {
    if (options.islands.empty() && onDevice(t, options.codec)) {
      DeviceEngine engine(*this, options.codec);
      AllReduceOptions o = options;
      o.engine = &engine;
      return inner->allReduce(t, channel, o);
    }
    if (t.dtype != program::DTYPE_F32 || !staged(t))
      return inner->allReduce(t, channel, options);
    return stagedAllReduce(t, channel, options);
  }
  TrafficCounters takeTraffic() override { return inner->takeTraffic(); }

  Status sendCoded(const Tensor &t, int peer, uint32_t channel,
                   const program::CodecParams &codec, ErrorFeedback *feedback) override {
    return sendVia(t, peer, channel, codec, feedback, false);
  }
  Status recvCoded(const Tensor &t, int peer, uint32_t channel,
                   const program::CodecParams &codec) override {
    return recvVia(t, peer, channel, codec, false);
  }
  Status sendDeferred(const Tensor &t, int peer, uint32_t channel,
                      const program::CodecParams &codec, ErrorFeedback *feedback) override {
    return sendVia(t, peer, channel, codec, feedback, true);
  }
  Status recvDeferred(const Tensor &t, int peer, uint32_t channel,
                      const program::CodecParams &codec) override {
    return recvVia(t, peer, channel, codec, true);
  }
  Status flushSends() override { return inner->flushSends(); }

private:
  /// One send, blocking or deferred (the inner transport copies a deferred
  /// payload, so the staging buffer is free again on return). Plain GPU
  /// memory is staged through pinned host memory: one cudaMemcpy over
  /// PCIe/NVLink-C2C instead of the page faults of the inner (host)
  /// transport touching managed memory, and the pages stay on the GPU for
  /// the next kernels. The executor calls this on its communication thread,
  /// so the copies overlap the compute stream. The wire carries the same
  /// bytes (Gloo's header holds only the byte count). Lossy codecs of GPU
  /// memory encode on the GPU.
  Status sendVia(const Tensor &t, int peer, uint32_t channel, const program::CodecParams &codec,
                 ErrorFeedback *feedback, bool deferred) {
    bool plain = codec.codec() == program::CODEC_NONE;
    if (plain ? !staged(t) : !onDevice(t, codec))
      return deferred ? inner->sendDeferred(t, peer, channel, codec, feedback)
             : plain  ? inner->send(t, peer, channel)
                      : inner->sendCoded(t, peer, channel, codec, feedback);
    std::lock_guard<std::mutex> lock(mutex);
    cudaSetDevice(device);
    size_t bytes = t.byteSize();
    if (plain) {
      STRAIT_RETURN_IF_ERROR(staging.reserve(bytes, "pinned staging").withRank(getRank()));
      STRAIT_RETURN_IF_ERROR(
          cudaStatus(cudaMemcpyAsync(staging.p, t.data, bytes, cudaMemcpyDefault, stream),
                     "staging copy to the host")
              .withRank(getRank()));
      STRAIT_RETURN_IF_ERROR(finish("staging to the host").withRank(getRank()).withPeer(peer));
    } else {
      StatusOr<size_t> encoded = encodeOnDevice(t.as<float>(), t.numel(), codec, feedback);
      if (!encoded.isOk())
        return encoded.takeStatus().withRank(getRank()).withPeer(peer);
      bytes = *encoded;
    }
    Tensor wire{program::DTYPE_U8, {static_cast<int64_t>(bytes)}, staging.p};
    return deferred ? inner->sendDeferred(wire, peer, channel, program::CodecParams(), nullptr)
                    : inner->send(wire, peer, channel);
  }

  /// One receive of a blocking or a deferred send (see sendVia).
  Status recvVia(const Tensor &t, int peer, uint32_t channel, const program::CodecParams &codec,
                 bool deferred) {
    bool plain = codec.codec() == program::CODEC_NONE;
    codec::FixedLayout l;
    if (plain ? !staged(t)
              : !onDevice(t, codec) || !codec::fixedLayout(codecNumber(codec), t.numel(),
                                                           codecBlockSizeOf(codec), l))
      return deferred ? inner->recvDeferred(t, peer, channel, codec)
             : plain  ? inner->recv(t, peer, channel)
                      : inner->recvCoded(t, peer, channel, codec);
    std::lock_guard<std::mutex> lock(mutex);
    cudaSetDevice(device);
    size_t bytes = plain ? t.byteSize() : l.bytes;
    if (plain)
      STRAIT_RETURN_IF_ERROR(staging.reserve(bytes, "pinned staging").withRank(getRank()));
    else
      STRAIT_RETURN_IF_ERROR(reserveAll(bytes, 0));
    Tensor wire{program::DTYPE_U8, {static_cast<int64_t>(bytes)}, staging.p};
    STRAIT_RETURN_IF_ERROR(deferred
                               ? inner->recvDeferred(wire, peer, channel, program::CodecParams())
                               : inner->recv(wire, peer, channel));
    if (plain) {
      STRAIT_RETURN_IF_ERROR(
          cudaStatus(cudaMemcpyAsync(t.data, staging.p, bytes, cudaMemcpyDefault, stream),
                     "staging copy to the device")
              .withRank(getRank()));
      return finish("staging to the device").withRank(getRank()).withPeer(peer);
    }
    const uint8_t *h = static_cast<const uint8_t *>(staging.p);
    std::string why = codec::fixedHeaderMismatch(h, codecNumber(codec), t.numel(),
                                                 codecBlockSizeOf(codec));
    if (!why.empty())
      return invalidArgument("recv on channel " + std::to_string(channel) + ": " + why +
                             " (" + program::Codec_Name(codec.codec()) + ")")
          .withRank(getRank())
          .withPeer(peer);
    uint32_t block = codecBlockSizeOf(codec);
    uint8_t *d = static_cast<uint8_t *>(payload.p);
    STRAIT_RETURN_IF_ERROR(
        cudaStatus(cudaMemcpyAsync(d, h, l.bytes, cudaMemcpyHostToDevice, stream), "payload copy")
            .withRank(getRank()));
    launchDecodeFixed(codecNumber(codec), d, t.numel(), block, t.as<float>(), stream);
    return finish("decode").withRank(getRank()).withPeer(peer);
  }

  static uint32_t codecBlockSizeOf(const program::CodecParams &p) {
    return p.block_size() ? p.block_size() : 256;
  }

  /// Staged plain transfer: GPU memory of this device, 64 KiB or more (below,
  /// the copy's latency outweighs the page faults).
  bool staged(const Tensor &t) const { return t.byteSize() >= (64u << 10) && onThisGpu(t.data); }

  /// Device or managed memory of this communicator's GPU.
  bool onThisGpu(const void *p) const {
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) &&
           attr.device == device;
  }

  /// Device path: a lossy f32 codec on device or managed memory. The
  /// quantized top-k codecs (TOPK_INT8/INT4) and INT2/INT3 have no device
  /// kernels: their transfers take the inner (host) codec, which reads the
  /// tensor's managed memory, as every compressed all-reduce does.
  bool onDevice(const Tensor &t, const program::CodecParams &codec) const {
    if (codec.codec() == program::CODEC_NONE || codec.codec() == program::CODEC_TOPK_INT8 ||
        codec.codec() == program::CODEC_TOPK_INT4 || codec.codec() == program::CODEC_INT2 ||
        codec.codec() == program::CODEC_INT3 || t.dtype != program::DTYPE_F32 ||
        t.numel() == 0 ||
        !validateCodecParams(codec, "codec").isOk() ||
        (codec.codec() == program::CODEC_TOPK && t.numel() > 0x7fffffff))
      return false;
    return onThisGpu(t.data);
  }

  Status reserveAll(size_t payloadBytes, int64_t numel) {
    STRAIT_RETURN_IF_ERROR(payload.reserve(payloadBytes, "codec payload"));
    STRAIT_RETURN_IF_ERROR(staging.reserve(payloadBytes, "pinned codec payload"));
    if (numel)
      STRAIT_RETURN_IF_ERROR(sum.reserve(4ull * numel, "codec sum"));
    return Status::ok();
  }

  Status finish(const char *what) {
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess)
      err = cudaStreamSynchronize(stream);
    return cudaStatus(err, std::string("device codec ") + what);
  }

  /// Encodes n floats of GPU memory at x into staging (pinned host memory);
  /// returns the payload size.
  StatusOr<size_t> encodeOnDevice(const float *x, int64_t n, const program::CodecParams &codec,
                                  ErrorFeedback *feedback) {
    DeviceResidual *res = nullptr;
    bool swapped = false;
    if (feedback && codec.error_feedback()) {
      auto &state = feedback->deviceState();
      if (!state) { // armed as the stream is: its first encode may be rolled back
        state = std::make_unique<DeviceResidual>(device, stream);
        static_cast<DeviceResidual *>(state.get())->armed = feedback->isArmed();
      }
      res = static_cast<DeviceResidual *>(state.get());
      // A residual restored on the host before the stream's first device
      // encode (a checkpoint's, ErrorFeedback::restoreResidual) moves here;
      // one of another size is dropped (a change of numel starts from zero,
      // as on the host).
      if (!feedback->getResidual().empty()) {
        if (feedback->getResidual().size() == static_cast<size_t>(n))
          STRAIT_RETURN_IF_ERROR(res->upload(feedback->getResidual()));
        feedback->setResidual({});
      }
      if (res->numel != n) { // a new stream or a change of numel: zero residual
        STRAIT_RETURN_IF_ERROR(res->residual.reserve(4ull * n, "codec residual"));
        STRAIT_RETURN_IF_ERROR(
            cudaStatus(cudaMemsetAsync(res->residual.p, 0, 4ull * n, stream), "residual"));
        res->numel = n;
      }
      STRAIT_RETURN_IF_ERROR(sum.reserve(4ull * n, "codec sum"));
      launchCodecAdd(x, static_cast<float *>(res->residual.p), static_cast<float *>(sum.p), n,
                     stream);
      x = static_cast<const float *>(sum.p);
      if (res->armed) { // every residual kernel below writes all n entries
        STRAIT_RETURN_IF_ERROR(res->previous.reserve(4ull * n, "codec residual"));
        res->swapBlocks();
        res->armed = false;
        res->kept = true;
        swapped = true;
      }
    }
    // A failure from here on leaves no half-written residual: swapped blocks
    // go back (the stream as before this call), else it restarts from zero.
    struct Undo {
      DeviceResidual *res;
      bool &swapped, done = false;
      ~Undo() {
        if (!res || done)
          return;
        if (swapped) {
          res->swapBlocks();
          res->armed = true;
          res->kept = false;
        } else {
          res->numel = -1;
        }
      }
    } undo{res, swapped};
    float *r = res ? static_cast<float *>(res->residual.p) : nullptr;
    size_t bytes = 0;
    codec::FixedLayout l;
    uint32_t block = codecBlockSizeOf(codec);
    if (codec::fixedLayout(codecNumber(codec), n, block, l)) {
      STRAIT_RETURN_IF_ERROR(reserveAll(l.bytes, 0));
      uint8_t *d = static_cast<uint8_t *>(payload.p);
      if (!launchEncodeFixed(codecNumber(codec), x, n, block, d, stream))
        return unimplemented("device codec " + program::Codec_Name(codec.codec()) + " of " +
                             std::to_string(n) + " elements");
      if (r) { // residual = sum - decode(payload)
        launchDecodeFixed(codecNumber(codec), d, n, block, r, stream);
        launchCodecResidual(x, r, n, stream);
      }
      bytes = l.bytes;
    } else { // top-k
      int64_t k = std::max<int64_t>(
          1, std::min<int64_t>(n, static_cast<int64_t>(std::ceil(
                                      static_cast<double>(codec.topk_ratio()) * n))));
      STRAIT_RETURN_IF_ERROR(flags.reserve(n, "top-k flags"));
      STRAIT_RETURN_IF_ERROR(work.reserve(topkWorkBytes(n), "top-k work"));
      uint8_t *f = static_cast<uint8_t *>(flags.p);
      if (!selectTopK(x, n, k, f, work.p, stream)) {
        Status failed = finish("top-k selection");
        return failed.isOk() ? internalError("device top-k selection failed") : failed;
      }
      uint64_t sizes[3];
      topkIndexBytes(f, n, k, work.p, sizes, stream);
      uint64_t indexBytes;
      int encoding = codec::smallestIndexEncoding(sizes, indexBytes);
      bytes = codec::topkIndicesOffset(k) + indexBytes;
      STRAIT_RETURN_IF_ERROR(reserveAll(bytes, 0));
      launchEncodeTopK(x, f, n, k, encoding, work.p, static_cast<uint8_t *>(payload.p), stream);
      if (r)
        launchTopKResidual(x, f, r, n, stream);
    }
    STRAIT_RETURN_IF_ERROR(cudaStatus(
        cudaMemcpyAsync(staging.p, payload.p, bytes, cudaMemcpyDeviceToHost, stream), "payload copy"));
    STRAIT_RETURN_IF_ERROR(finish("encode"));
    undo.done = true;
    return bytes;
  }

  /// rt::decode of a payload of `codec` into n floats of GPU memory at out,
  /// on the GPU: fixed layouts by the decode kernel, top-k from the pairs
  /// rt::decodeSparse checks and extracts on the host.
  Status decodeOnDevice(const program::CodecParams &codec, const uint8_t *p, size_t bytes,
                        float *out, int64_t n, bool accumulate) {
    std::lock_guard<std::mutex> lock(mutex);
    cudaSetDevice(device);
    uint32_t block = codecBlockSizeOf(codec);
    codec::FixedLayout l;
    if (codec::fixedLayout(codecNumber(codec), n, block, l)) {
      if (bytes != l.bytes)
        return invalidArgument("corrupt codec payload: " + std::to_string(bytes) +
                               " bytes, this rank expects " + std::to_string(l.bytes) + " (" +
                               program::Codec_Name(codec.codec()) + " of " + std::to_string(n) +
                               " elements)");
      std::string why = codec::fixedHeaderMismatch(p, codecNumber(codec), n, block);
      if (!why.empty())
        return invalidArgument(why + " (" + program::Codec_Name(codec.codec()) + ")");
      STRAIT_RETURN_IF_ERROR(payload.reserve(bytes, "codec payload"));
      STRAIT_RETURN_IF_ERROR(cudaStatus(
          cudaMemcpyAsync(payload.p, p, bytes, cudaMemcpyHostToDevice, stream), "payload copy"));
      launchDecodeFixed(codecNumber(codec), static_cast<const uint8_t *>(payload.p), n, block,
                        out, stream, accumulate);
      return finish("decode");
    }
    STRAIT_ASSIGN_OR_RETURN(program::Codec sent, payloadCodec(p, bytes));
    if (sent != codec.codec())
      return invalidArgument("peer sent a " + program::Codec_Name(sent) +
                             " payload, this rank expects " +
                             program::Codec_Name(codec.codec()));
    std::vector<uint32_t> indices;
    std::vector<float> values;
    STRAIT_RETURN_IF_ERROR(decodeSparse(p, bytes, n, indices, values));
    int64_t k = static_cast<int64_t>(indices.size());
    STRAIT_RETURN_IF_ERROR(payload.reserve(8ull * k, "top-k pairs"));
    uint32_t *di = static_cast<uint32_t *>(payload.p);
    float *dv = reinterpret_cast<float *>(di + k);
    if (!accumulate)
      STRAIT_RETURN_IF_ERROR(
          cudaStatus(cudaMemsetAsync(out, 0, 4ull * n, stream), "top-k decode"));
    if (k) {
      STRAIT_RETURN_IF_ERROR(cudaStatus(
          cudaMemcpyAsync(di, indices.data(), 4ull * k, cudaMemcpyHostToDevice, stream),
          "top-k indices copy"));
      STRAIT_RETURN_IF_ERROR(cudaStatus(
          cudaMemcpyAsync(dv, values.data(), 4ull * k, cudaMemcpyHostToDevice, stream),
          "top-k values copy"));
    }
    launchScatterAdd(di, dv, k, out, stream);
    return finish("decode");
  }

  /// The codecs of one compressed all-reduce, on this GPU.
  class DeviceEngine final : public CodecEngine {
  public:
    DeviceEngine(CudaCodecCommunicator &comm, const program::CodecParams &codec)
        : comm(comm), codec(codec) {}
    Status encode(const program::CodecParams &params, const float *x, int64_t n,
                  ErrorFeedback *feedback, std::vector<uint8_t> &out) override {
      if (n == 0) // an empty chunk (fewer elements than ranks): nothing to read
        return hostCodecEngine().encode(params, x, n, feedback, out);
      std::lock_guard<std::mutex> lock(comm.mutex);
      cudaSetDevice(comm.device);
      StatusOr<size_t> bytes = comm.encodeOnDevice(x, n, params, feedback);
      if (!bytes.isOk())
        return bytes.takeStatus();
      const uint8_t *h = static_cast<const uint8_t *>(comm.staging.p);
      out.assign(h, h + *bytes);
      return Status::ok();
    }
    Status decode(const uint8_t *p, size_t bytes, float *out, int64_t n,
                  bool accumulate) override {
      if (n == 0)
        return hostCodecEngine().decode(p, bytes, out, n, accumulate);
      return comm.decodeOnDevice(codec, p, bytes, out, n, accumulate);
    }

  private:
    CudaCodecCommunicator &comm;
    const program::CodecParams &codec;
  };

  /// The inner all-reduce on a pinned host copy of t (one copy each way on
  /// this communicator's stream).
  Status stagedAllReduce(const Tensor &t, uint32_t channel, const AllReduceOptions &options) {
    std::lock_guard<std::mutex> lock(reduceMutex);
    cudaSetDevice(device);
    size_t bytes = t.byteSize();
    STRAIT_RETURN_IF_ERROR(reduceStaging.reserve(bytes, "pinned all-reduce staging"));
    auto copy = [&](void *to, const void *from, const char *what) {
      Status s = cudaStatus(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream), what);
      return s.isOk() ? finish(what) : s;
    };
    STRAIT_RETURN_IF_ERROR(
        copy(reduceStaging.p, t.data, "all-reduce staging to the host").withRank(getRank()));
    Tensor host{t.dtype, t.shape, reduceStaging.p};
    STRAIT_RETURN_IF_ERROR(inner->allReduce(host, channel, options));
    return copy(t.data, reduceStaging.p, "all-reduce staging to the device").withRank(getRank());
  }

  std::unique_ptr<Communicator> inner;
  int device;
  cudaStream_t stream;
  std::mutex mutex;       // payload, sum, flags, work, staging
  std::mutex reduceMutex; // reduceStaging
  Block payload, sum, flags, work, staging, reduceStaging;
};

} // namespace
} // namespace cuda

StatusOr<std::unique_ptr<Communicator>>
createCudaCodecCommunicator(std::unique_ptr<Communicator> inner, int device) {
  using namespace cuda;
  if (!inner)
    return invalidArgument("createCudaCodecCommunicator: no inner communicator");
  int count = cudaDeviceCount();
  if (device < 0 || device >= count)
    return unavailable("cuda codec communicator: device " + std::to_string(device) +
                       " not available (" +
                       (count ? std::to_string(count) + " devices" : cudaUnavailableReason()) + ")")
        .withRank(inner->getRank());
  STRAIT_RETURN_IF_ERROR(cudaStatus(cudaSetDevice(device), "set device"));
  cudaStream_t stream = nullptr;
  STRAIT_RETURN_IF_ERROR(
      cudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "codec stream"));
  return std::unique_ptr<Communicator>(
      new CudaCodecCommunicator(std::move(inner), device, stream));
}

} // namespace rt
} // namespace strait
