//===- NcclCommunicator.cpp - Communicator over NCCL ----------------------===//
//
// Bootstrap: rank 0 creates the ncclUniqueId and sends it to every rank over
// the bootstrap communicator (Gloo, connected through the job's file or Redis
// rendezvous). A group all-reduce gets its own NCCL communicator the first
// time the group is used: its lowest rank creates the id and sends it to the
// other members, so only the group's ranks take part. Every operation runs
// on the communicator's stream and is waited for (the Communicator interface
// is blocking); one that exceeds the timeout aborts the NCCL communicator.
// The NCCL communicators are non-blocking (ncclConfig_t::blocking = 0), so
// that joining one is bounded by the same timeout: a member that never joins
// (its process died, or it waits elsewhere) gives DeadlineExceeded instead of
// a hang in ncclCommInitRank. Every call may then return ncclInProgress;
// wait() polls the communicators' state until the work is done.
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

namespace strait {
namespace rt {
namespace cuda {
namespace {

/// Bootstrap channels, above any channel a compiled program uses.
constexpr uint32_t kIdChannel = 0x7fff0000u;

Status ncclStatus(ncclResult_t r, const std::string &what) {
  if (r == ncclSuccess || r == ncclInProgress) // in progress: wait() polls
    return Status::ok();
  return unavailable("nccl: " + what + ": " + ncclGetErrorString(r));
}

/// Text of a group of global ranks: "{0, 2, 3}".
std::string rankList(const std::vector<int> &ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "}";
}

class NcclCommunicator : public Communicator {
public:
  NcclCommunicator(Communicator &bootstrap, const NcclOptions &options)
      : bootstrap(bootstrap), options(options) {}
  ~NcclCommunicator() override {
    for (auto &g : groups)
      release(g.second);
    release(world);
    if (stream)
      cudaStreamDestroy(stream);
  }

  Status init() {
    STRAIT_RETURN_IF_ERROR(cudaStatus(cudaSetDevice(options.device), "set device"));
    STRAIT_RETURN_IF_ERROR(
        cudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"));
    members = options.ranks;
    if (members.empty())
      for (int r = 0; r < bootstrap.getWorldSize(); ++r)
        members.push_back(r);
    STRAIT_ASSIGN_OR_RETURN(world, createComm(members));
    return Status::ok();
  }

  int getRank() const override { return bootstrap.getRank(); }
  int getWorldSize() const override { return bootstrap.getWorldSize(); }

  Status send(const Tensor &t, int peer, uint32_t) override {
    STRAIT_RETURN_IF_ERROR(usable());
    STRAIT_ASSIGN_OR_RETURN(int local, localRank(peer));
    STRAIT_RETURN_IF_ERROR(
        ncclStatus(ncclSend(t.data, t.byteSize(), ncclUint8, local, world, stream), "send")
            .withRank(getRank())
            .withPeer(peer));
    return wait("send to " + std::to_string(peer));
  }

  Status recv(const Tensor &t, int peer, uint32_t) override {
    STRAIT_RETURN_IF_ERROR(usable());
    STRAIT_ASSIGN_OR_RETURN(int local, localRank(peer));
    STRAIT_RETURN_IF_ERROR(
        ncclStatus(ncclRecv(t.data, t.byteSize(), ncclUint8, local, world, stream), "recv")
            .withRank(getRank())
            .withPeer(peer));
    return wait("recv from " + std::to_string(peer));
  }

  Status allReduceSum(const Tensor &t, uint32_t) override {
    if (members.size() != static_cast<size_t>(getWorldSize()))
      return invalidArgument("nccl: an all-reduce over every rank on a communicator of " +
                             std::to_string(members.size()) + " of the " +
                             std::to_string(getWorldSize()) + " ranks")
          .withRank(getRank());
    return allReduceOn(world, t);
  }

  Status allReduceSumGroup(const Tensor &t, const std::vector<int> &ranks, uint32_t) override {
    STRAIT_RETURN_IF_ERROR(usable());
    STRAIT_ASSIGN_OR_RETURN(ncclComm_t comm, commOf(ranks));
    return allReduceOn(comm, t);
  }

  Status broadcastGroup(const Tensor &t, int root, const std::vector<int> &ranks,
                        uint32_t) override {
    auto at = std::lower_bound(ranks.begin(), ranks.end(), root);
    if (at == ranks.end() || *at != root)
      return invalidArgument("nccl: broadcast root " + std::to_string(root) +
                             " is not in its group")
          .withRank(getRank());
    STRAIT_RETURN_IF_ERROR(usable());
    STRAIT_ASSIGN_OR_RETURN(ncclComm_t comm, commOf(ranks));
    STRAIT_RETURN_IF_ERROR(
        ncclStatus(ncclBroadcast(t.data, t.data, t.byteSize(), ncclUint8,
                                 static_cast<int>(at - ranks.begin()), comm, stream),
                   "broadcast")
            .withRank(getRank()));
    return wait("broadcast from " + std::to_string(root), comm);
  }

  Status barrier() override { return bootstrap.barrier(); }

private:
  /// Finalizes (non-blocking: polled, within the timeout) and destroys a
  /// communicator; one that does not finish in time is aborted.
  void release(ncclComm_t comm) const {
    if (!comm)
      return;
    ncclResult_t r = ncclCommFinalize(comm);
    auto deadline = std::chrono::steady_clock::now() + options.timeout;
    while (r == ncclInProgress && std::chrono::steady_clock::now() <= deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (ncclCommGetAsyncError(comm, &r) != ncclSuccess)
        r = ncclInternalError;
    }
    if (r == ncclSuccess)
      ncclCommDestroy(comm);
    else
      ncclCommAbort(comm);
  }

  /// The communicator's index of global rank `peer`.
  StatusOr<int> localRank(int peer) const {
    auto it = std::lower_bound(members.begin(), members.end(), peer);
    if (it == members.end() || *it != peer)
      return invalidArgument("nccl: rank " + std::to_string(peer) +
                             " is outside this NCCL communicator's ranks")
          .withRank(getRank())
          .withPeer(peer);
    return static_cast<int>(it - members.begin());
  }

  /// Before every operation: fails fast after an earlier failure, and makes
  /// this rank's GPU current on the calling thread (the executor's
  /// communication thread may never have set it: a stream query on another
  /// device's context would make one there).
  Status usable() const {
    if (!failure.empty())
      return unavailable("nccl communicator unusable after an earlier failure: " + failure)
          .withRank(getRank());
    return cudaStatus(cudaSetDevice(options.device), "set device").withRank(getRank());
  }

  /// The NCCL communicator of a group: the world's, or the group's own
  /// (made on first use).
  StatusOr<ncclComm_t> commOf(const std::vector<int> &ranks) {
    if (ranks == members)
      return world;
    for (int r : ranks)
      STRAIT_RETURN_IF_ERROR(localRank(r).getStatus());
    auto it = groups.find(ranks);
    if (it == groups.end()) {
      STRAIT_ASSIGN_OR_RETURN(ncclComm_t comm, createComm(ranks));
      it = groups.emplace(ranks, comm).first;
    }
    return it->second;
  }

  /// A communicator over `ranks` (sorted, containing this rank); the lowest
  /// rank creates the id and sends it to the others over the bootstrap.
  StatusOr<ncclComm_t> createComm(const std::vector<int> &ranks) {
    int me = -1;
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == getRank())
        me = static_cast<int>(i);
    if (me < 0)
      return invalidArgument("nccl: rank " + std::to_string(getRank()) +
                             " is not in the group it reduces over");
    OwnedTensor id(program::DTYPE_U8, {static_cast<int64_t>(sizeof(ncclUniqueId))});
    ncclUniqueId uid;
    if (me == 0) {
      STRAIT_RETURN_IF_ERROR(ncclStatus(ncclGetUniqueId(&uid), "get unique id"));
      std::memcpy(id.tensor.data, &uid, sizeof(uid));
      for (size_t i = 1; i < ranks.size(); ++i)
        STRAIT_RETURN_IF_ERROR(bootstrap.send(id.tensor, ranks[i], kIdChannel));
    } else {
      STRAIT_RETURN_IF_ERROR(bootstrap.recv(id.tensor, ranks[0], kIdChannel));
      std::memcpy(&uid, id.tensor.data, sizeof(uid));
    }
    ncclComm_t comm = nullptr;
    STRAIT_RETURN_IF_ERROR(cudaStatus(cudaSetDevice(options.device), "set device"));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    std::string what = "joining the NCCL communicator of ranks " + rankList(ranks) + " (as " +
                       std::to_string(me) + " of " + std::to_string(ranks.size()) + ")";
    ncclResult_t r =
        ncclCommInitRankConfig(&comm, static_cast<int>(ranks.size()), uid, me, &config);
    auto deadline = std::chrono::steady_clock::now() + options.timeout;
    while (r == ncclInProgress) {
      if (std::chrono::steady_clock::now() > deadline) {
        ncclCommAbort(comm);
        return deadlineExceeded("nccl: " + what + ": timed out after " +
                                std::to_string(options.timeout.count()) +
                                " ms; a member never joined (its process failed or waits "
                                "elsewhere)")
            .withRank(getRank());
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (ncclCommGetAsyncError(comm, &r) != ncclSuccess)
        r = ncclInternalError;
    }
    if (r != ncclSuccess) {
      if (comm)
        ncclCommAbort(comm);
      return unavailable("nccl: " + what + ": " + ncclGetErrorString(r)).withRank(getRank());
    }
    return comm;
  }

  Status allReduceOn(ncclComm_t comm, const Tensor &t) {
    STRAIT_RETURN_IF_ERROR(usable());
    if (t.dtype != program::DTYPE_F32)
      return unimplemented("nccl: all-reduce of " + t.typeString() + " (f32 only)")
          .withRank(getRank());
    STRAIT_RETURN_IF_ERROR(
        ncclStatus(ncclAllReduce(t.data, t.data, t.numel(), ncclFloat32, ncclSum, comm, stream),
                   "all-reduce")
            .withRank(getRank()));
    return wait("all-reduce of " + t.typeString(), comm);
  }

  /// Polls the communicators' state and the stream until both are done or
  /// the timeout, then aborts. A group's operation polls its own
  /// communicator too (`comm`). ncclInProgress (a non-blocking communicator
  /// still enqueueing the work) is not a failure.
  Status wait(const std::string &what, ncclComm_t comm = nullptr) {
    auto deadline = std::chrono::steady_clock::now() + options.timeout;
    for (;;) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(world, &async);
      if ((async == ncclSuccess || async == ncclInProgress) && comm && comm != world) {
        ncclResult_t own = ncclSuccess;
        ncclCommGetAsyncError(comm, &own);
        if (own != ncclSuccess)
          async = own;
      }
      bool failed = async != ncclSuccess && async != ncclInProgress;
      if (!failed && async == ncclSuccess) {
        cudaError_t q = cudaStreamQuery(stream);
        if (q == cudaSuccess)
          return Status::ok();
        if (q != cudaErrorNotReady) {
          failure = what + ": " + cudaGetErrorString(q);
          return internalError("nccl: " + failure).withRank(getRank());
        }
      }
      if (failed || std::chrono::steady_clock::now() > deadline) {
        failure = what +
                  (failed ? std::string(": ") + ncclGetErrorString(async)
                          : ": timed out after " + std::to_string(options.timeout.count()) + " ms");
        ncclCommAbort(world);
        world = nullptr;
        for (auto &g : groups) {
          ncclCommAbort(g.second);
          g.second = nullptr;
        }
        return deadlineExceeded("nccl: " + failure).withRank(getRank());
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  Communicator &bootstrap;
  NcclOptions options;
  cudaStream_t stream = nullptr;
  ncclComm_t world = nullptr;
  std::vector<int> members; ///< global ranks of `world`, sorted
  std::map<std::vector<int>, ncclComm_t> groups;
  std::string failure;
};

} // namespace
} // namespace cuda

StatusOr<std::unique_ptr<Communicator>> createNcclCommunicator(Communicator &bootstrap,
                                                               const NcclOptions &options) {
  if (options.device < 0 || options.device >= cudaDeviceCount())
    return unavailable("nccl: device " + std::to_string(options.device) + " not available (" +
                       cudaUnavailableReason() + ")")
        .withRank(bootstrap.getRank());
  const std::vector<int> &r = options.ranks;
  if (!r.empty() && (!std::is_sorted(r.begin(), r.end()) ||
                     std::adjacent_find(r.begin(), r.end()) != r.end() || r.front() < 0 ||
                     r.back() >= bootstrap.getWorldSize() ||
                     !std::binary_search(r.begin(), r.end(), bootstrap.getRank())))
    return invalidArgument("nccl: the communicator's ranks must be sorted, distinct, within "
                           "the world of " + std::to_string(bootstrap.getWorldSize()) +
                           " and contain this rank")
        .withRank(bootstrap.getRank());
  auto comm = std::make_unique<cuda::NcclCommunicator>(bootstrap, options);
  STRAIT_RETURN_IF_ERROR(comm->init());
  return std::unique_ptr<Communicator>(std::move(comm));
}

} // namespace rt
} // namespace strait
