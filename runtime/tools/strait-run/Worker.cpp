//===- Worker.cpp - One rank of a strait-run job --------------------------===//
//
// Loads the manifest, this rank's program and parameter shard, connects to
// the other ranks, and runs the program's steps once per iteration, printing
// one progress line per iteration (time, and the value named "loss" when the
// program outputs one).
//
//===----------------------------------------------------------------------===//
#include "StraitRun.h"
#include "strait/runtime/Communicator.h"
#include "strait/runtime/Executor.h"
#include "strait/runtime/Program.h"
#include "strait/runtime/ThreadPool.h"

#include <chrono>
#include <iostream>

namespace strait {
namespace run {

using namespace strait::rt;

namespace {

std::string resolvePath(const std::string &dir, const std::string &path) {
  return !path.empty() && path[0] == '/' ? path : dir + "/" + path;
}

StatusOr<std::unique_ptr<Communicator>>
connect(const RunOptions &o, const program::PlanManifest &m) {
  GlooOptions g;
  g.rank = o.rank;
  g.worldSize = m.world_size();
  g.timeout = std::chrono::milliseconds(o.timeoutMs);
  g.prefix = o.runId.empty() ? "strait" : o.runId;
  const program::RankEntry *self = nullptr;
  for (const auto &r : m.ranks())
    if (r.rank() == o.rank)
      self = &r;
  if (self && !self->address().empty())
    g.hostname = self->address().substr(0, self->address().find(':'));
  if (m.rendezvous() == program::RENDEZVOUS_REDIS) {
    g.store = StoreKind::Redis;
    const std::string &addr = m.rendezvous_address();
    size_t colon = addr.find(':');
    g.redisHost = addr.substr(0, colon);
    if (colon != std::string::npos)
      g.redisPort = std::stoi(addr.substr(colon + 1));
  } else {
    g.store = StoreKind::File;
    g.storePath = resolvePath(o.planDir, m.rendezvous_address().empty()
                                             ? "rendezvous"
                                             : m.rendezvous_address());
  }
  return createGlooCommunicator(g);
}

Status runRank(const RunOptions &o) {
  STRAIT_ASSIGN_OR_RETURN(program::PlanManifest m,
                          loadManifest(resolvePath(o.planDir, o.manifest)));
  const program::RankEntry *entry = nullptr;
  for (const auto &r : m.ranks())
    if (r.rank() == o.rank)
      entry = &r;
  if (!entry)
    return notFound("rank not in the manifest").withRank(o.rank);
  STRAIT_ASSIGN_OR_RETURN(program::Program p,
                          loadProgram(resolvePath(o.planDir, entry->program_file())));
  if (p.rank() != o.rank || p.world_size() != m.world_size())
    return invalidArgument("program file '" + entry->program_file() +
                           "' is for rank " + std::to_string(p.rank()) +
                           " of " + std::to_string(p.world_size()))
        .withRank(o.rank);
  if (o.threads > 0)
    setNumThreads(o.threads);
  std::unique_ptr<Communicator> comm;
  if (m.world_size() > 1) {
    STRAIT_ASSIGN_OR_RETURN(comm, connect(o, m));
  }
  BackendRegistry registry;
  registerCpuBackend(registry);
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec,
                          Executor::create(p, registry, comm.get()));
  if (!entry->parameter_file().empty()) {
    STRAIT_ASSIGN_OR_RETURN(program::ParameterShardFile shards,
                            loadShardFile(resolvePath(o.planDir, entry->parameter_file())));
    STRAIT_RETURN_IF_ERROR(exec->loadParameters(shards));
  }
  // Inputs by convention: "step" (i64 scalar) = 1-based iteration, "lr"
  // (f32 scalar) = --lr; other inputs wait for the data loaders.
  StatusOr<Tensor> stepIn = exec->getValueByName("step");
  StatusOr<Tensor> lrIn = exec->getValueByName("lr");
  bool stepOk = stepIn.isOk() && stepIn->dtype == program::DTYPE_I64 && stepIn->numel() == 1;
  if (lrIn.isOk() && lrIn->dtype == program::DTYPE_F32 && lrIn->numel() == 1)
    lrIn->as<float>()[0] = o.learningRate;
  bool otherInputs = false;
  for (const auto &v : p.values())
    otherInputs |= v.role() == program::ROLE_INPUT && v.name() != "step" && v.name() != "lr";
  if (otherInputs)
    std::cerr << "rank " << o.rank
              << ": warning: no data loader yet; data inputs are zero\n";
  StatusOr<Tensor> loss = exec->getValueByName("loss");
  for (int it = 0; it < o.steps; ++it) {
    if (stepOk)
      stepIn->as<int64_t>()[0] = it + 1;
    auto start = std::chrono::steady_clock::now();
    STRAIT_RETURN_IF_ERROR(exec->run());
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - start).count();
    std::cout << "rank " << o.rank << " iteration " << it + 1 << "/" << o.steps
              << " time " << ms << " ms";
    if (loss.isOk() && loss->dtype == program::DTYPE_F32 && loss->numel() == 1)
      std::cout << " loss " << loss->as<float>()[0];
    std::cout << std::endl;
  }
  if (comm)
    STRAIT_RETURN_IF_ERROR(comm->barrier());
  return Status::ok();
}

} // namespace

int runWorker(const RunOptions &options) {
  Status s = runRank(options);
  if (!s.isOk()) {
    s.withRank(options.rank);
    std::cerr << "strait-run: " << s.toString() << std::endl;
    // 3 marks a failure to reach a peer, usually the echo of another rank's
    // failure; the launcher reports the other kind first.
    bool comm = s.getCode() == StatusCode::Unavailable ||
                s.getCode() == StatusCode::DeadlineExceeded;
    return comm ? 3 : 1;
  }
  std::cout << "rank " << options.rank << " done" << std::endl;
  return 0;
}

} // namespace run
} // namespace strait
