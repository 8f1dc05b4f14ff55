//===- GlooCollectives.cpp - The Gloo communicator's collectives -----------===//
//
// All-reduce over a group: the ring (reduce-scatter + all-gather on unbound
// buffers), the compressed variant (every rank encodes once, the group
// exchanges the payloads, each rank decodes and sums them in rank order),
// the hierarchical one over islands; and the barriers (Gloo's, or a sealed
// one over the sealed point-to-point buffers). docs/runtime.md, "All-reduce".
//
//===----------------------------------------------------------------------===//
#include "GlooCommunicatorImpl.h"
#include "strait/runtime/LinkTiming.h"

#include <chrono>

namespace strait {
namespace rt {
namespace gloo_impl {

Status GlooCommunicator::checkGroup(const std::vector<int> &ranks, int &me) const {
  me = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= options.worldSize || (i && ranks[i] <= ranks[i - 1]))
      return invalidArgument("all-reduce group must hold sorted distinct ranks")
          .withRank(options.rank);
    if (ranks[i] == options.rank)
      me = static_cast<int>(i);
  }
  if (me < 0)
    return invalidArgument("this rank is not in its all-reduce group").withRank(options.rank);
  return Status::ok();
}

/// Slots of the collectives: bits 56..63 = 0 (Gloo's own collectives use a
/// prefix there), bits 48..55 = the phase prefix ('S' ring reduce-scatter,
/// 'T' ring all-gather, 'U'/'V' exchange header/payload, 'W' island
/// broadcast, 'B' sealed barrier), bits 16..47 = channel, bits 0..15 = step. Send/recv slots are
/// < 2^33.
uint64_t collectiveSlot(uint8_t prefix, uint32_t channel, uint64_t step) {
  return (uint64_t(prefix) << 48) | (uint64_t(channel) << 16) | (step & 0xFFFF);
}

Status GlooCommunicator::ringPhase(float *data, int64_t n,
                                   const std::vector<int> &ranks, int me,
                                   uint32_t channel, uint8_t prefix, bool gather) {
  int k = static_cast<int>(ranks.size());
  if (k == 1 || n == 0)
    return Status::ok();
  int next = ranks[(me + 1) % k], prev = ranks[(me + k - 1) % k];
  STRAIT_RETURN_IF_ERROR(checkPeer(next));
  auto chunkBegin = [&](int c) { return n * c / k; };
  // The reduce-scatter's incoming chunk: one buffer per thread, kept and
  // grown, not zeroed (each receive overwrites what it adds): a fresh one
  // per call faulted a GPT-2's 250 MB chunk in page by page every step.
  static thread_local std::vector<float> incomingBuffer;
  if (!gather && incomingBuffer.size() < static_cast<size_t>((n + k - 1) / k + 1))
    incomingBuffer.resize((n + k - 1) / k + 1);
  float *incoming = incomingBuffer.data();
  std::string what = std::string(gather ? "all-gather" : "reduce-scatter") +
                     " of the all-reduce on channel " + std::to_string(channel);
  try {
    for (int s = 0; s < k - 1; ++s) {
      // Reduce-scatter: send chunk (me - s), receive chunk (me - s - 1).
      // All-gather: send chunk (me + 1 - s), receive chunk (me - s).
      int sendChunk = ((gather ? me + 1 - s : me - s) % k + k) % k;
      int recvChunk = ((gather ? me - s : me - s - 1) % k + k) % k;
      int64_t sb = chunkBegin(sendChunk), se = chunkBegin(sendChunk + 1);
      int64_t rb = chunkBegin(recvChunk), re = chunkBegin(recvChunk + 1);
      float *recvTo = gather ? data + rb : incoming;
      // The receive first: sealed, the previous rank's chunks then flow
      // while this rank seals its own.
      Buf sbuf, rbuf;
      auto begin = std::chrono::steady_clock::now();
      if (re > rb)
        rbuf = postRecv(recvTo, (re - rb) * sizeof(float), prev,
                        collectiveSlot(prefix, channel, s));
      if (se > sb)
        sbuf = postSend(data + sb, (se - sb) * sizeof(float), next,
                        collectiveSlot(prefix, channel, s));
      STRAIT_RETURN_IF_ERROR(waitRecv(rbuf, what, prev));
      STRAIT_RETURN_IF_ERROR(waitSend(sbuf, what, next));
      // All-gather steps start after every rank's reduce-scatter: both ends
      // are in the collective, the time is the link's (strait-run --replan).
      if (gather)
        recordLinkTiming(next, (se - sb) * sizeof(float),
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
                             .count());
      if (!gather)
        for (int64_t i = rb; i < re; ++i)
          data[i] += incoming[i - rb];
    }
  } catch (const std::exception &e) {
    return markBroken(fromException(e, what.c_str(), -1));
  }
  return Status::ok();
}

Status GlooCommunicator::ringAllReduce(float *data, int64_t n,
                                       const std::vector<int> &ranks,
                                       uint32_t channel) {
  int me;
  STRAIT_RETURN_IF_ERROR(checkGroup(ranks, me));
  STRAIT_RETURN_IF_ERROR(ringPhase(data, n, ranks, me, channel, 'S', false));
  return ringPhase(data, n, ranks, me, channel, 'T', true);
}

Status GlooCommunicator::allReduceSum(const Tensor &tensor, uint32_t channel) {
  std::vector<int> all(options.worldSize);
  for (int r = 0; r < options.worldSize; ++r)
    all[r] = r;
  return allReduceSumGroup(tensor, all, channel);
}

/// A ring reduce-scatter + all-gather over `ranks` (the whole world
/// included): each rank sends 2 (k-1)/k of the tensor to the next rank.
/// Disjoint groups may reduce concurrently on one channel.
Status GlooCommunicator::allReduceSumGroup(const Tensor &tensor,
                                           const std::vector<int> &ranks,
                                           uint32_t channel) {
  if (tensor.dtype != program::DTYPE_F32)
    return unimplemented("all-reduce of " + tensor.typeString() +
                         " (only f32 is supported)")
        .withRank(options.rank);
  return ringAllReduce(tensor.as<float>(), tensor.numel(), ranks, channel);
}

Status GlooCommunicator::swapPayloads(
    const std::vector<const std::vector<uint8_t> *> &out,
    std::vector<std::vector<uint8_t>> &in, const std::vector<int> &peers, int me,
    uint32_t channel, uint8_t prefix, uint64_t step, uint64_t maxBytes) {
  int k = static_cast<int>(peers.size());
  std::string what = "compressed all-reduce exchange on channel " + std::to_string(channel);
  std::vector<uint64_t> outSizes(k, 0), sizes(k, 0);
  in.assign(k, {});
  try {
    // The sizes are posted before anything is waited for: no ordering
    // between the pairs can deadlock. The payloads are sent only once this
    // rank has posted every payload receive: a Gloo send waits for the
    // receiver's ready notice, which travels behind whatever the receiver
    // already sends on the pair, so a payload posted earlier delayed the
    // peer's payload by its own transmission time on a slow link (a
    // 3-leader int4 exchange over 8 Mbit/s took twice its bytes' time).
    std::vector<Buf> sends, sizeRecvs(k);
    for (int i = 0; i < k; ++i) {
      if (i == me)
        continue;
      STRAIT_RETURN_IF_ERROR(checkPeer(peers[i]));
      outSizes[i] = out[i]->size();
      sizeRecvs[i] = postRecv(&sizes[i], 8, peers[i], collectiveSlot(prefix, channel, step));
      sends.push_back(postSend(&outSizes[i], 8, peers[i], collectiveSlot(prefix, channel, step)));
    }
    std::vector<Buf> recvs(k);
    std::vector<std::chrono::steady_clock::time_point> sizeAt(k);
    for (int i = 0; i < k; ++i) {
      if (i == me)
        continue;
      STRAIT_RETURN_IF_ERROR(waitRecv(sizeRecvs[i], what, peers[i]));
      sizeAt[i] = std::chrono::steady_clock::now();
      if (sizes[i] < kCodecHeaderBytes || sizes[i] > maxBytes)
        return markBroken(unavailable(what + ": peer announced a payload of " +
                                      std::to_string(sizes[i]) + " bytes (at most " +
                                      std::to_string(maxBytes) + ")")
                              .withRank(options.rank)
                              .withPeer(peers[i]));
      in[i].resize(sizes[i]);
      recvs[i] = postRecv(in[i].data(), sizes[i], peers[i],
                          collectiveSlot(prefix + 1, channel, step));
    }
    for (int i = 0; i < k; ++i)
      if (i != me)
        sends.push_back(postSend(out[i]->data(), out[i]->size(), peers[i],
                                 collectiveSlot(prefix + 1, channel, step)));
    for (int i = 0; i < k; ++i)
      if (i != me) {
        STRAIT_RETURN_IF_ERROR(waitRecv(recvs[i], what, peers[i]));
        // As a message's payload: from its size's arrival on, the link's
        // time (strait-run --replan; LinkTiming.h).
        recordLinkTiming(peers[i], sizes[i],
                         std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                       sizeAt[i])
                             .count());
      }
    for (auto &b : sends)
      STRAIT_RETURN_IF_ERROR(waitSend(b, what, -1));
  } catch (const std::exception &e) {
    return markBroken(fromException(e, what.c_str(), -1));
  }
  return Status::ok();
}

Status GlooCommunicator::exchangeSum(float *data, int64_t n,
                                     const std::vector<int> &peers, int me,
                                     uint32_t channel, uint8_t prefix,
                                     const AllReduceOptions &opts) {
  int k = static_cast<int>(peers.size());
  if (k > 2)
    return reduceScatterGatherCoded(data, n, peers, me, channel, prefix, opts);
  CodecEngine &engine = opts.engine ? *opts.engine : hostCodecEngine();
  std::vector<uint8_t> mine;
  Status s = engine.encode(opts.codec, data, n, opts.feedback, mine);
  if (!s.isOk())
    return s.withRank(options.rank);
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<const std::vector<uint8_t> *> out(k, &mine);
  STRAIT_RETURN_IF_ERROR(
      swapPayloads(out, payloads, peers, me, channel, prefix, 0, maxPayloadBytes(n)));
  payloads[me] = std::move(mine);
  // Sum in group order, this rank's own payload decoded like the others, so
  // every rank computes the same floats.
  for (int i = 0; i < k; ++i) {
    Status d = engine.decode(payloads[i].data(), payloads[i].size(), data, n, i > 0);
    if (!d.isOk())
      return d.withRank(options.rank).withPeer(peers[i]);
  }
  return Status::ok();
}

Status GlooCommunicator::reduceScatterGatherCoded(
    float *data, int64_t n, const std::vector<int> &peers, int me,
    uint32_t channel, uint8_t prefix, const AllReduceOptions &opts) {
  int k = static_cast<int>(peers.size());
  CodecEngine &engine = opts.engine ? *opts.engine : hostCodecEngine();
  ErrorFeedback *feedback = opts.feedback;
  auto lo = [&](int c) { return n * c / k; };
  auto len = [&](int c) { return lo(c + 1) - lo(c); };
  auto encodeInto = [&](const float *x, int64_t count, ErrorFeedback *fb,
                        std::vector<uint8_t> &out) {
    Status st = engine.encode(opts.codec, x, count, fb, out);
    return st.isOk() ? st : st.withRank(options.rank);
  };
  // 1. Chunk c of every rank, encoded (with its own feedback stream), goes
  //    to rank c, which decodes the k payloads and sums them in rank order.
  std::vector<std::vector<uint8_t>> chunks(k), in;
  std::vector<const std::vector<uint8_t> *> out(k);
  for (int c = 0; c < k; ++c) {
    STRAIT_RETURN_IF_ERROR(encodeInto(data + lo(c), len(c),
                                      feedback ? &feedback->part(c) : nullptr, chunks[c]));
    out[c] = &chunks[c];
  }
  uint64_t maxBytes = maxPayloadBytes((n + k - 1) / k);
  STRAIT_RETURN_IF_ERROR(swapPayloads(out, in, peers, me, channel, prefix, 0, maxBytes));
  in[me] = std::move(chunks[me]);
  for (int r = 0; r < k; ++r) {
    Status d = engine.decode(in[r].data(), in[r].size(), data + lo(me), len(me), r > 0);
    if (!d.isOk())
      return d.withRank(options.rank).withPeer(peers[r]);
  }
  // 2. The reduced chunk, encoded once more (a second feedback stream),
  //    goes to every rank; all ranks, this one included, decode the same
  //    payloads.
  std::vector<uint8_t> reduced;
  STRAIT_RETURN_IF_ERROR(encodeInto(data + lo(me), len(me),
                                    feedback ? &feedback->part(k) : nullptr, reduced));
  std::vector<const std::vector<uint8_t> *> all(k, &reduced);
  STRAIT_RETURN_IF_ERROR(swapPayloads(all, in, peers, me, channel, prefix, 1, maxBytes));
  in[me] = std::move(reduced);
  for (int r = 0; r < k; ++r) {
    Status d = engine.decode(in[r].data(), in[r].size(), data + lo(r), len(r), false);
    if (!d.isOk())
      return d.withRank(options.rank).withPeer(peers[r]);
  }
  return Status::ok();
}

Status GlooCommunicator::allReduce(const Tensor &tensor, uint32_t channel,
                                   const AllReduceOptions &opts) {
  if (tensor.dtype != program::DTYPE_F32)
    return unimplemented("all-reduce of " + tensor.typeString() +
                         " (only f32 is supported)")
        .withRank(options.rank);
  STRAIT_RETURN_IF_ERROR(validateCodecParams(opts.codec, "all_reduce.codec").withRank(options.rank));
  std::vector<int> group = opts.ranks;
  if (group.empty())
    for (int r = 0; r < options.worldSize; ++r)
      group.push_back(r);
  int me;
  STRAIT_RETURN_IF_ERROR(checkGroup(group, me));
  float *data = tensor.as<float>();
  int64_t n = tensor.numel();
  if (!opts.islands.empty())
    return hierarchicalAllReduce(data, n, group, channel, opts);
  if (opts.codec.codec() == program::CODEC_NONE)
    return ringAllReduce(data, n, group, channel);
  return exchangeSum(data, n, group, me, channel, 'U', opts);
}

Status GlooCommunicator::hierarchicalAllReduce(float *data, int64_t n,
                                               const std::vector<int> &group,
                                               uint32_t channel,
                                               const AllReduceOptions &opts) {
  // The islands must partition the group; find this rank's island.
  std::vector<int> seen;
  int myIsland = -1, myPos = -1;
  bool equalSizes = true;
  for (size_t i = 0; i < opts.islands.size(); ++i) {
    const auto &island = opts.islands[i];
    if (island.empty())
      return invalidArgument("all-reduce island " + std::to_string(i) + " is empty")
          .withRank(options.rank);
    equalSizes &= island.size() == opts.islands[0].size();
    for (size_t j = 0; j < island.size(); ++j) {
      if (j && island[j] <= island[j - 1])
        return invalidArgument("all-reduce island " + std::to_string(i) +
                               " must hold sorted distinct ranks")
            .withRank(options.rank);
      seen.push_back(island[j]);
      if (island[j] == options.rank) {
        myIsland = static_cast<int>(i);
        myPos = static_cast<int>(j);
      }
    }
  }
  std::sort(seen.begin(), seen.end());
  if (seen != group)
    return invalidArgument("all-reduce islands do not partition the group of " +
                           std::to_string(group.size()) + " ranks")
        .withRank(options.rank);
  const std::vector<int> &island = opts.islands[myIsland];
  int s = static_cast<int>(island.size());
  if (equalSizes) {
    // 1. Reduce-scatter inside the island: member j holds the island's sum
    //    of chunk (j+1) % s.  2. Member j of every island reduces that chunk
    //    across the islands (the codec applies here; the slow links run in
    //    parallel over the s members).  3. All-gather inside the island.
    STRAIT_RETURN_IF_ERROR(ringPhase(data, n, island, myPos, channel, 'S', false));
    int chunk = (myPos + 1) % s;
    int64_t lo = n * chunk / s, hi = n * (chunk + 1) / s;
    std::vector<int> peers;
    for (const auto &other : opts.islands)
      peers.push_back(other[myPos]);
    if (hi > lo)
      STRAIT_RETURN_IF_ERROR(exchangeSum(data + lo, hi - lo, peers, myIsland, channel,
                                         'U', opts));
    return ringPhase(data, n, island, myPos, channel, 'T', true);
  }
  // Unequal islands: reduce inside each island, the leaders (first rank of
  // each island) reduce across, and each leader sends the result to its
  // island.
  STRAIT_RETURN_IF_ERROR(ringAllReduce(data, n, island, channel));
  std::string what = "island broadcast of the all-reduce on channel " + std::to_string(channel);
  try {
    if (myPos == 0) {
      std::vector<int> leaders;
      for (const auto &other : opts.islands)
        leaders.push_back(other[0]);
      STRAIT_RETURN_IF_ERROR(exchangeSum(data, n, leaders, myIsland, channel, 'U', opts));
      std::vector<Buf> sends;
      for (int j = 1; j < s && n; ++j)
        sends.push_back(postSend(data, n * sizeof(float), island[j],
                                 collectiveSlot('W', channel, 0)));
      for (size_t j = 0; j < sends.size(); ++j)
        STRAIT_RETURN_IF_ERROR(waitSend(sends[j], what, island[j + 1]));
    } else if (n) {
      Buf r = postRecv(data, n * sizeof(float), island[0], collectiveSlot('W', channel, 0));
      STRAIT_RETURN_IF_ERROR(waitRecv(r, what, island[0]));
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
  return bufferBarrier();
}

/// Gloo's barrier sends messages of its own, outside postSend/postRecv
/// (unsealed, and out of abort()'s reach); every rank instead sends a byte
/// (sealed on sealed links) to every other rank and waits for theirs
/// (world - 1 buffers each way, on slot 'B').
Status GlooCommunicator::bufferBarrier() {
  std::string what = "barrier";
  uint8_t token = 1;
  std::vector<uint8_t> in(options.worldSize);
  try {
    std::vector<Buf> sends, recvs;
    for (int r = 0; r < options.worldSize; ++r)
      if (r != options.rank) {
        sends.push_back(postSend(&token, 1, r, collectiveSlot('B', 0, 0)));
        recvs.push_back(postRecv(&in[r], 1, r, collectiveSlot('B', 0, 0)));
      }
    for (Buf &b : recvs)
      STRAIT_RETURN_IF_ERROR(waitRecv(b, what, b.peer));
    for (Buf &b : sends)
      STRAIT_RETURN_IF_ERROR(waitSend(b, what, b.peer));
  } catch (const std::exception &e) {
    return markBroken(fromException(e, what.c_str(), -1));
  }
  return Status::ok();
}

} // namespace gloo_impl
} // namespace rt
} // namespace strait
