//===- GlooCommunicator.cpp - Communicator over Gloo's TCP transport ------===//
//
// Rendezvous through Gloo's file store (one machine / shared folder) or Redis
// store (across machines), a full mesh of TCP pairs, and:
//  - send/recv: a 16-byte header (magic, byte count) then the payload, on two
//    Gloo slots derived from the channel, so that a size mismatch between the
//    two ends is a clear error instead of a transport abort;
//  - allReduceSum: Gloo's ring all-reduce with a float sum;
//  - barrier.
// Every Gloo exception becomes a Status naming this rank and the peer.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Communicator.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/transport/tcp/device.h>

#include <sys/stat.h>

namespace strait {
namespace rt {
namespace {

constexpr uint64_t kHeaderMagic = 0x5354524149543031ull; // "STRAIT01"

struct MessageHeader {
  uint64_t magic;
  uint64_t bytes;
};

class GlooCommunicator : public Communicator {
public:
  GlooCommunicator(const GlooOptions &options,
                   std::unique_ptr<gloo::rendezvous::Store> store,
                   std::unique_ptr<gloo::rendezvous::PrefixStore> prefixed,
                   std::shared_ptr<gloo::rendezvous::Context> context)
      : options(options), store(std::move(store)),
        prefixed(std::move(prefixed)), context(std::move(context)) {}

  int getRank() const override { return options.rank; }
  int getWorldSize() const override { return options.worldSize; }

  Status send(const Tensor &tensor, int peer, uint32_t channel) override;
  Status recv(const Tensor &tensor, int peer, uint32_t channel) override;
  Status allReduceSum(const Tensor &tensor, uint32_t channel) override;
  Status allReduceSumGroup(const Tensor &tensor, const std::vector<int> &ranks,
                           uint32_t channel) override;
  Status barrier() override;

private:
  Status checkPeer(int peer) const;
  /// Records the first transport failure; Gloo pairs do not recover from
  /// one, so later calls fail fast with the original cause.
  Status markBroken(Status status);
  Status fromException(const std::exception &e, const char *what,
                       int peer) const;

  GlooOptions options;
  std::unique_ptr<gloo::rendezvous::Store> store;
  std::unique_ptr<gloo::rendezvous::PrefixStore> prefixed;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::string brokenBy;
};

Status GlooCommunicator::markBroken(Status status) {
  if (!status.isOk() && brokenBy.empty() &&
      status.getCode() != StatusCode::InvalidArgument)
    brokenBy = status.toString();
  return status;
}

Status GlooCommunicator::checkPeer(int peer) const {
  if (!brokenBy.empty())
    return unavailable("communicator unusable after an earlier failure: " +
                       brokenBy)
        .withRank(options.rank)
        .withPeer(peer);
  if (peer < 0 || peer >= options.worldSize || peer == options.rank)
    return invalidArgument("peer " + std::to_string(peer) +
                           " is not another rank of a world of " +
                           std::to_string(options.worldSize))
        .withRank(options.rank)
        .withPeer(peer);
  return Status::ok();
}

Status GlooCommunicator::fromException(const std::exception &e,
                                       const char *what, int peer) const {
  std::string msg = e.what();
  bool timeout = msg.find("imed out") != std::string::npos ||
                 msg.find("imeout") != std::string::npos;
  std::string text = std::string(what) + " failed: " + msg;
  Status s = timeout ? deadlineExceeded(text + " (timeout " +
                                        std::to_string(options.timeout.count()) +
                                        " ms)")
                     : unavailable(text);
  s.withRank(options.rank);
  if (peer >= 0)
    s.withPeer(peer);
  return s;
}

Status GlooCommunicator::send(const Tensor &tensor, int peer, uint32_t channel) {
  STRAIT_RETURN_IF_ERROR(checkPeer(peer));
  MessageHeader header = {kHeaderMagic, tensor.byteSize()};
  try {
    auto hbuf = context->createUnboundBuffer(&header, sizeof(header));
    hbuf->send(peer, 2ull * channel);
    std::unique_ptr<gloo::transport::UnboundBuffer> pbuf;
    if (header.bytes) {
      pbuf = context->createUnboundBuffer(tensor.data, header.bytes);
      pbuf->send(peer, 2ull * channel + 1);
    }
    if (!hbuf->waitSend(options.timeout) || (pbuf && !pbuf->waitSend(options.timeout)))
      return unavailable("send on channel " + std::to_string(channel) + " aborted")
          .withRank(options.rank)
          .withPeer(peer);
  } catch (const std::exception &e) {
    return markBroken(
        fromException(e, ("send on channel " + std::to_string(channel)).c_str(), peer));
  }
  return Status::ok();
}

Status GlooCommunicator::recv(const Tensor &tensor, int peer, uint32_t channel) {
  STRAIT_RETURN_IF_ERROR(checkPeer(peer));
  MessageHeader header = {0, 0};
  std::string what = "recv on channel " + std::to_string(channel);
  try {
    auto hbuf = context->createUnboundBuffer(&header, sizeof(header));
    hbuf->recv(peer, 2ull * channel);
    if (!hbuf->waitRecv(options.timeout))
      return unavailable(what + " aborted").withRank(options.rank).withPeer(peer);
    if (header.magic != kHeaderMagic)
      return unavailable(what + ": peer did not send a Strait message header")
          .withRank(options.rank)
          .withPeer(peer);
    if (header.bytes != tensor.byteSize()) {
      // Drain the payload so the sender completes and the channel stays
      // consistent, then report the mismatch.
      if (header.bytes) {
        std::vector<char> scratch(header.bytes);
        auto pbuf = context->createUnboundBuffer(scratch.data(), header.bytes);
        pbuf->recv(peer, 2ull * channel + 1);
        pbuf->waitRecv(options.timeout);
      }
      return invalidArgument(what + ": peer sent " + std::to_string(header.bytes) +
                             " bytes, this rank expects " +
                             std::to_string(tensor.byteSize()) + " (" +
                             tensor.typeString() + ")")
          .withRank(options.rank)
          .withPeer(peer);
    }
    if (header.bytes) {
      auto pbuf = context->createUnboundBuffer(tensor.data, header.bytes);
      pbuf->recv(peer, 2ull * channel + 1);
      if (!pbuf->waitRecv(options.timeout))
        return unavailable(what + " aborted").withRank(options.rank).withPeer(peer);
    }
  } catch (const std::exception &e) {
    return markBroken(fromException(e, what.c_str(), peer));
  }
  return Status::ok();
}

Status GlooCommunicator::allReduceSum(const Tensor &tensor, uint32_t channel) {
  if (tensor.dtype != program::DTYPE_F32)
    return unimplemented("all-reduce of " + tensor.typeString() +
                         " (only f32 is supported)")
        .withRank(options.rank);
  if (options.worldSize == 1 || tensor.numel() == 0)
    return Status::ok();
  STRAIT_RETURN_IF_ERROR(checkPeer(options.rank == 0 ? 1 : 0));
  try {
    gloo::AllreduceOptions opts(context);
    opts.setOutput(tensor.as<float>(), static_cast<size_t>(tensor.numel()));
    opts.setReduceFunction(
        [](void *out, const void *a, const void *b, size_t n) {
          float *o = static_cast<float *>(out);
          const float *x = static_cast<const float *>(a);
          const float *y = static_cast<const float *>(b);
          for (size_t i = 0; i < n; ++i)
            o[i] = x[i] + y[i];
        });
    opts.setTag(channel);
    opts.setTimeout(options.timeout);
    gloo::allreduce(opts);
  } catch (const std::exception &e) {
    return markBroken(fromException(
        e, ("all-reduce on channel " + std::to_string(channel)).c_str(), -1));
  }
  return Status::ok();
}

/// Ring all-reduce over `ranks` on unbound buffers: k-1 reduce-scatter
/// steps then k-1 all-gather steps, each sending one chunk to the next rank
/// of the ring while receiving one from the previous. Slots live in a range
/// of their own (bits 48..55 = 'S'), apart from send/recv slots (< 2^33) and
/// Gloo's collective slots (prefix in bits 56..63).
Status GlooCommunicator::allReduceSumGroup(const Tensor &tensor,
                                           const std::vector<int> &ranks,
                                           uint32_t channel) {
  if (tensor.dtype != program::DTYPE_F32)
    return unimplemented("all-reduce of " + tensor.typeString()).withRank(options.rank);
  int k = static_cast<int>(ranks.size());
  int me = -1;
  for (int i = 0; i < k; ++i) {
    if (ranks[i] < 0 || ranks[i] >= options.worldSize || (i && ranks[i] <= ranks[i - 1]))
      return invalidArgument("all-reduce group must hold sorted distinct ranks")
          .withRank(options.rank);
    if (ranks[i] == options.rank)
      me = i;
  }
  if (me < 0)
    return invalidArgument("this rank is not in its all-reduce group").withRank(options.rank);
  if (k == options.worldSize)
    return allReduceSum(tensor, channel);
  if (k == 1 || tensor.numel() == 0)
    return Status::ok();
  int next = ranks[(me + 1) % k], prev = ranks[(me + k - 1) % k];
  STRAIT_RETURN_IF_ERROR(checkPeer(next));
  int64_t n = tensor.numel();
  auto chunkBegin = [&](int c) { return n * c / k; };
  float *data = tensor.as<float>();
  std::vector<float> incoming((n + k - 1) / k + 1);
  std::string what = "group all-reduce on channel " + std::to_string(channel);
  auto slot = [&](int step) {
    return (0x53ull << 48) | (uint64_t(channel) << 16) | uint64_t(step);
  };
  try {
    for (int step = 0; step < 2 * (k - 1); ++step) {
      bool gather = step >= k - 1;
      int s = gather ? step - (k - 1) : step;
      // Reduce-scatter: send chunk (me - s), receive chunk (me - s - 1).
      // All-gather: send chunk (me + 1 - s), receive chunk (me - s).
      int sendChunk = ((gather ? me + 1 - s : me - s) % k + k) % k;
      int recvChunk = ((gather ? me - s : me - s - 1) % k + k) % k;
      int64_t sb = chunkBegin(sendChunk), se = chunkBegin(sendChunk + 1);
      int64_t rb = chunkBegin(recvChunk), re = chunkBegin(recvChunk + 1);
      float *recvTo = gather ? data + rb : incoming.data();
      auto sbuf = context->createUnboundBuffer(data + sb, (se - sb) * sizeof(float));
      auto rbuf = context->createUnboundBuffer(recvTo, (re - rb) * sizeof(float));
      if (se > sb)
        sbuf->send(next, slot(step));
      if (re > rb)
        rbuf->recv(prev, slot(step));
      if ((re > rb && !rbuf->waitRecv(options.timeout)) ||
          (se > sb && !sbuf->waitSend(options.timeout)))
        return markBroken(unavailable(what + " aborted").withRank(options.rank));
      if (!gather)
        for (int64_t i = rb; i < re; ++i)
          data[i] += incoming[i - rb];
    }
  } catch (const std::exception &e) {
    return markBroken(fromException(e, what.c_str(), -1));
  }
  return Status::ok();
}

Status GlooCommunicator::barrier() {
  if (options.worldSize == 1)
    return Status::ok();
  STRAIT_RETURN_IF_ERROR(checkPeer(options.rank == 0 ? 1 : 0));
  try {
    gloo::BarrierOptions opts(context);
    opts.setTimeout(options.timeout);
    gloo::barrier(opts);
  } catch (const std::exception &e) {
    return markBroken(fromException(e, "barrier", -1));
  }
  return Status::ok();
}

} // namespace

StatusOr<std::unique_ptr<Communicator>>
createGlooCommunicator(const GlooOptions &options) {
  if (options.worldSize < 1 || options.rank < 0 || options.rank >= options.worldSize)
    return invalidArgument("rank " + std::to_string(options.rank) +
                           " outside world of " + std::to_string(options.worldSize));
  std::unique_ptr<gloo::rendezvous::Store> store;
  std::string where;
  try {
    if (options.store == StoreKind::File) {
      struct stat st;
      if (options.storePath.empty() || ::stat(options.storePath.c_str(), &st) != 0 ||
          !S_ISDIR(st.st_mode))
        return invalidArgument("file store folder '" + options.storePath +
                               "' does not exist")
            .withRank(options.rank);
      where = "file store " + options.storePath;
      store = std::make_unique<gloo::rendezvous::FileStore>(options.storePath);
    } else {
      where = "redis store " + options.redisHost + ":" + std::to_string(options.redisPort);
      store = std::make_unique<gloo::rendezvous::RedisStore>(options.redisHost,
                                                              options.redisPort);
    }
  } catch (const std::exception &e) {
    return unavailable("cannot open " + where + ": " + e.what()).withRank(options.rank);
  }
  auto prefixed = std::make_unique<gloo::rendezvous::PrefixStore>(options.prefix, *store);
  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.worldSize);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context->setTimeout(options.timeout);
    context->connectFullMesh(*prefixed, device);
  } catch (const std::exception &e) {
    std::string msg = e.what();
    bool timeout = msg.find("imeout") != std::string::npos ||
                   msg.find("imed out") != std::string::npos;
    std::string text = "rendezvous of " + std::to_string(options.worldSize) +
                       " ranks through " + where + " failed: " + msg;
    return (timeout ? deadlineExceeded(text) : unavailable(text)).withRank(options.rank);
  }
  return std::unique_ptr<Communicator>(new GlooCommunicator(
      options, std::move(store), std::move(prefixed), std::move(context)));
}

} // namespace rt
} // namespace strait
