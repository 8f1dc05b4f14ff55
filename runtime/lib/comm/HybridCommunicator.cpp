//===- HybridCommunicator.cpp - A fast transport inside domains, a slow one between ===//
//
// Routes every transfer by the domains of the ranks it involves (a domain is
// a set of ranks joined by the fast transport: the GPUs of one host on NCCL).
// Point-to-point transfers inside this rank's domain go to `fast`, all
// others to `slow` (Gloo/TCP, which also owns the codecs). An all-reduce over
// a group that spans several domains runs in three phases:
//   1. sum inside each domain's part of the group on `fast`;
//   2. the part leaders (lowest rank of each part) all-reduce on `slow`, with
//      the codec, its error feedback, and the islands restricted to leaders;
//   3. the leaders broadcast inside their part on `fast`.
// Every rank of the group ends with the same values, as with a flat
// all-reduce; only the leaders' traffic crosses the slow links.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Communicator.h"

#include <algorithm>
#include <map>

namespace strait {
namespace rt {
namespace {

class HybridCommunicator : public Communicator {
public:
  HybridCommunicator(std::unique_ptr<Communicator> slow, std::unique_ptr<Communicator> fast,
                     std::vector<int> domainOf)
      : slow(std::move(slow)), fast(std::move(fast)), domainOf(std::move(domainOf)) {}

  int getRank() const override { return slow->getRank(); }
  int getWorldSize() const override { return slow->getWorldSize(); }

  Status send(const Tensor &t, int peer, uint32_t channel) override {
    return route(peer).send(t, peer, channel);
  }
  Status recv(const Tensor &t, int peer, uint32_t channel) override {
    return route(peer).recv(t, peer, channel);
  }
  Status sendCoded(const Tensor &t, int peer, uint32_t channel,
                   const program::CodecParams &codec, ErrorFeedback *feedback) override {
    // Codecs are for slow links; a coded transfer inside a domain keeps
    // its codec (the receiver expects the payload) and takes the slow path.
    if (codec.codec() == program::CODEC_NONE)
      return route(peer).send(t, peer, channel);
    return slow->sendCoded(t, peer, channel, codec, feedback);
  }
  Status recvCoded(const Tensor &t, int peer, uint32_t channel,
                   const program::CodecParams &codec) override {
    if (codec.codec() == program::CODEC_NONE)
      return route(peer).recv(t, peer, channel);
    return slow->recvCoded(t, peer, channel, codec);
  }
  // Deferred transfers take the slow path on both sides, wherever the peer
  // is: NCCL's point-to-point calls block the stream until the peer's
  // matching call, which a 1F1B peer makes in its own order.
  Status sendDeferred(const Tensor &t, int peer, uint32_t channel,
                      const program::CodecParams &codec, ErrorFeedback *feedback) override {
    return slow->sendDeferred(t, peer, channel, codec, feedback);
  }
  Status recvDeferred(const Tensor &t, int peer, uint32_t channel,
                      const program::CodecParams &codec) override {
    return slow->recvDeferred(t, peer, channel, codec);
  }
  Status flushSends() override { return slow->flushSends(); }
  Status allReduceSum(const Tensor &t, uint32_t channel) override {
    return allReduce(t, channel, AllReduceOptions());
  }
  Status allReduceSumGroup(const Tensor &t, const std::vector<int> &ranks,
                           uint32_t channel) override {
    AllReduceOptions o;
    o.ranks = ranks;
    return allReduce(t, channel, o);
  }
  Status barrier() override { return slow->barrier(); }
  /// The slow transport's bytes: those are the ones that cross sites.
  TrafficCounters takeTraffic() override { return slow->takeTraffic(); }
  /// The Gloo side only: NCCL calls cannot be interrupted, and strait-run
  /// does not recover in process with NCCL (docs/runtime.md, "Flaky links").
  void abort(const std::string &reason) override { slow->abort(reason); }

  Status allReduce(const Tensor &t, uint32_t channel, const AllReduceOptions &options) override {
    std::vector<int> group = options.ranks;
    if (group.empty())
      for (int r = 0; r < getWorldSize(); ++r)
        group.push_back(r);
    int me = getRank();
    // The group's parts by domain, in rank order.
    std::map<int, std::vector<int>> parts;
    for (int r : group) {
      if (r < 0 || r >= static_cast<int>(domainOf.size()))
        return invalidArgument("all-reduce group names rank " + std::to_string(r) +
                               " outside the world of " + std::to_string(domainOf.size()))
            .withRank(me);
      parts[domainOf[r]].push_back(r);
    }
    const std::vector<int> &mine = parts[domainOf[me]];
    if (std::find(mine.begin(), mine.end(), me) == mine.end())
      return invalidArgument("rank is not in the all-reduce group").withRank(me);
    if (parts.size() == 1 && options.codec.codec() == program::CODEC_NONE)
      return fastSum(t, mine, channel);
    bool allSingle = std::all_of(parts.begin(), parts.end(),
                                 [](const auto &p) { return p.second.size() == 1; });
    if (allSingle)
      return slow->allReduce(t, channel, options);
    // Phase 1: sum inside the part.
    if (mine.size() > 1)
      STRAIT_RETURN_IF_ERROR(fastSum(t, mine, channel));
    // Phase 2: the leaders across domains.
    std::vector<int> leaders;
    for (const auto &p : parts)
      leaders.push_back(p.second.front());
    std::sort(leaders.begin(), leaders.end());
    bool leader = mine.front() == me;
    if (leader && leaders.size() > 1) {
      AllReduceOptions across = options;
      across.ranks = leaders;
      across.islands.clear();
      if (!options.islands.empty()) {
        for (const std::vector<int> &island : options.islands) {
          std::vector<int> kept;
          for (int r : island)
            if (std::binary_search(leaders.begin(), leaders.end(), r))
              kept.push_back(r);
          if (!kept.empty())
            across.islands.push_back(kept);
        }
        // Islands that no longer split the leaders mean a flat exchange.
        if (across.islands.size() < 2)
          across.islands.clear();
      }
      STRAIT_RETURN_IF_ERROR(slow->allReduce(t, channel, across));
    }
    // Phase 3: broadcast the leader's result inside the part.
    if (mine.size() > 1)
      return fast->broadcastGroup(t, mine.front(), mine, channel);
    return Status::ok();
  }

private:
  Communicator &route(int peer) {
    bool near = peer >= 0 && peer < static_cast<int>(domainOf.size()) &&
                domainOf[peer] == domainOf[getRank()];
    return near ? *fast : *slow;
  }
  Status fastSum(const Tensor &t, const std::vector<int> &ranks, uint32_t channel) {
    if (ranks.size() <= 1)
      return Status::ok();
    return fast->allReduceSumGroup(t, ranks, channel);
  }

  // Declared in this order so `fast` (which may borrow `slow` as its
  // bootstrap) is destroyed first.
  std::unique_ptr<Communicator> slow;
  std::unique_ptr<Communicator> fast;
  std::vector<int> domainOf;
};

} // namespace

StatusOr<std::unique_ptr<Communicator>>
createHybridCommunicator(std::unique_ptr<Communicator> slow, std::unique_ptr<Communicator> fast,
                         std::vector<int> domainOf) {
  if (!slow || !fast)
    return invalidArgument("hybrid communicator: both transports are required");
  int world = slow->getWorldSize(), me = slow->getRank();
  if (fast->getRank() != me || fast->getWorldSize() != world)
    return invalidArgument("hybrid communicator: the fast transport is rank " +
                           std::to_string(fast->getRank()) + " of " +
                           std::to_string(fast->getWorldSize()) + ", the slow one rank " +
                           std::to_string(me) + " of " + std::to_string(world))
        .withRank(me);
  if (static_cast<int>(domainOf.size()) != world)
    return invalidArgument("hybrid communicator: " + std::to_string(domainOf.size()) +
                           " domain entries for a world of " + std::to_string(world))
        .withRank(me);
  return std::unique_ptr<Communicator>(
      new HybridCommunicator(std::move(slow), std::move(fast), std::move(domainOf)));
}

} // namespace rt
} // namespace strait
