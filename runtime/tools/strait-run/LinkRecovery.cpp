//===- LinkRecovery.cpp - In-process recovery from broken links -----------===//
//
// See LinkRecovery.h and docs/runtime.md, "Flaky links".
//
//===----------------------------------------------------------------------===//
#include "LinkRecovery.h"

#include <algorithm>
#include <cstring>
#include <iostream>
#include <sstream>

namespace strait {
namespace run {

using namespace strait::rt;

namespace {

bool snapshotted(const program::Value &v) {
  return v.role() == program::ROLE_PARAMETER || v.role() == program::ROLE_OPTIMIZER_STATE;
}

void copyOut(const Tensor &t, std::vector<uint8_t> &to) {
  const uint8_t *p = static_cast<const uint8_t *>(t.data);
  to.assign(p, p + t.byteSize());
}

Status copyIn(const std::vector<uint8_t> &from, const Tensor &t, const std::string &what) {
  if (from.size() != t.byteSize())
    return internalError("snapshot of " + what + " holds " + std::to_string(from.size()) +
                         " bytes, the value " + std::to_string(t.byteSize()));
  std::memcpy(t.data, from.data(), from.size());
  return Status::ok();
}

StatusOr<StateSnapshots::Feedback> saveFeedback(const ErrorFeedback &f) {
  StateSnapshots::Feedback out;
  STRAIT_ASSIGN_OR_RETURN(out.residual, f.residualValues()); // a device's downloaded
  for (size_t i = 0; i < f.numParts(); ++i) {
    out.parts.emplace_back();
    if (f.getPart(i)) {
      STRAIT_ASSIGN_OR_RETURN(out.parts.back(), saveFeedback(*f.getPart(i)));
    }
  }
  return out;
}

/// `saved` back into `f`; sub-streams it lacks start empty (as new ones).
Status restoreFeedback(const StateSnapshots::Feedback *saved, ErrorFeedback &f) {
  STRAIT_RETURN_IF_ERROR(f.restoreResidual(saved ? saved->residual : std::vector<float>{}));
  for (size_t i = 0; i < f.numParts(); ++i)
    if (f.getPart(i))
      STRAIT_RETURN_IF_ERROR(restoreFeedback(
          saved && i < saved->parts.size() ? &saved->parts[i] : nullptr, f.part(i)));
  return Status::ok();
}

uint64_t feedbackBytes(const StateSnapshots::Feedback &f) {
  uint64_t n = f.residual.size() * sizeof(float);
  for (const auto &p : f.parts)
    n += feedbackBytes(p);
  return n;
}

std::mutex deadMutex;
bool deadThread = false;        // since takeDeadTransportThread()
std::string deadWhat;           // for the abort the watcher posts
bool deadPosted = false;        // the watcher posted it
bool watching = false;          // a watcher runs

} // namespace

bool LinkRecovery::noteDeadTransportThread(const std::string &what) {
  std::lock_guard<std::mutex> lock(deadMutex);
  if (!watching)
    return false;
  deadThread = true;
  deadWhat = what;
  deadPosted = false;
  return true;
}

bool LinkRecovery::takeDeadTransportThread() {
  std::lock_guard<std::mutex> lock(deadMutex);
  bool was = deadThread;
  deadThread = false;
  return was;
}

Status StateSnapshots::take(const Executor &exec, const NamedTensors &extra, int it) {
  Slot &s = slots[static_cast<size_t>(it) % slots.size()];
  s.it = it;
  bytes = 0;
  size_t i = 0;
  for (const auto &v : exec.getProgram().values()) {
    if (!snapshotted(v))
      continue;
    StatusOr<Tensor> t = exec.getValue(v.id());
    if (i == s.values.size())
      s.values.emplace_back();
    if (t.isOk())
      copyOut(*t, s.values[i]);
    bytes += s.values[i++].size();
  }
  s.extra.resize(extra.size());
  for (size_t e = 0; e < extra.size(); ++e) {
    copyOut(extra[e].second, s.extra[e]);
    bytes += s.extra[e].size();
  }
  s.feedback.clear();
  for (const auto &[key, f] : exec.getFeedbackStreams()) {
    STRAIT_ASSIGN_OR_RETURN(s.feedback[key], saveFeedback(*f));
    bytes += feedbackBytes(s.feedback[key]);
  }
  return Status::ok();
}

uint64_t StateSnapshots::stateBytes(const Executor &exec, const NamedTensors &extra) {
  uint64_t n = 0;
  for (const auto &v : exec.getProgram().values())
    if (snapshotted(v))
      if (StatusOr<Tensor> t = exec.getValue(v.id()); t.isOk())
        n += t->byteSize();
  for (const auto &e : extra)
    n += e.second.byteSize();
  return n;
}

int StateSnapshots::oldest() const {
  int best = -1;
  for (const Slot &s : slots)
    if (s.it >= 0 && (best < 0 || s.it < best))
      best = s.it;
  return best;
}

Status StateSnapshots::restore(Executor &exec, const NamedTensors &extra, int it) const {
  const Slot *s = nullptr;
  for (const Slot &slot : slots)
    if (slot.it == it)
      s = &slot;
  if (!s)
    return internalError("no snapshot of step " + std::to_string(it + 1));
  size_t i = 0;
  for (const auto &v : exec.getProgram().values()) {
    if (!snapshotted(v))
      continue;
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec.getValue(v.id()));
    if (i >= s->values.size())
      return internalError("snapshot of step " + std::to_string(it + 1) + " lacks value " +
                           std::to_string(v.id()));
    STRAIT_RETURN_IF_ERROR(copyIn(s->values[i++], t, "value '" + v.name() + "'"));
  }
  if (extra.size() != s->extra.size())
    return internalError("snapshot of step " + std::to_string(it + 1) + " holds " +
                         std::to_string(s->extra.size()) + " outer-step tensors, not " +
                         std::to_string(extra.size()));
  for (size_t e = 0; e < extra.size(); ++e)
    STRAIT_RETURN_IF_ERROR(copyIn(s->extra[e], extra[e].second, "'" + extra[e].first + "'"));
  for (auto &[key, f] : exec.getFeedbackStreams()) {
    auto found = s->feedback.find(key);
    STRAIT_RETURN_IF_ERROR(
        restoreFeedback(found == s->feedback.end() ? nullptr : &found->second, *f));
  }
  exec.invalidateParameterCopies();
  return Status::ok();
}

StatusOr<std::unique_ptr<LinkRecovery>> LinkRecovery::create(const GlooOptions &gloo,
                                                             const std::string &runId,
                                                             const Options &options) {
  std::string prefix = runId + "/recovery";
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<KeyStore> protocol, openKeyStore(gloo, prefix));
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<KeyStore> watcher, openKeyStore(gloo, prefix));
  return std::unique_ptr<LinkRecovery>(
      new LinkRecovery(options, std::move(protocol), std::move(watcher)));
}

LinkRecovery::~LinkRecovery() {
  {
    std::lock_guard<std::mutex> lock(deadMutex);
    watching = false;
  }
  {
    std::lock_guard<std::mutex> lock(stopMutex);
    stopping = true;
  }
  stopCv.notify_all();
  if (watcher.joinable())
    watcher.join();
}

void LinkRecovery::watch(Communicator *target) {
  {
    std::lock_guard<std::mutex> lock(deadMutex);
    watching = true;
  }
  watcher = std::thread([this, target] { watchLoop(target); });
}

void LinkRecovery::watchLoop(Communicator *target) {
  int aborted = -1; // the epoch this thread aborted last
  std::unique_lock<std::mutex> lock(stopMutex);
  while (!stopping) {
    lock.unlock();
    int e = getEpoch();
    std::string key = "abort/" + std::to_string(e);
    std::string died;
    {
      std::lock_guard<std::mutex> dead(deadMutex);
      if (deadThread && !deadPosted) {
        deadPosted = true;
        died = "rank " + std::to_string(options.rank) + ": a transport thread failed: " + deadWhat;
      }
    }
    if (!died.empty()) { // this rank's links went silent: everybody recovers
      (void)watcherStore->set(key, died);
      std::lock_guard<std::mutex> current(epochMutex);
      if (epoch == e)
        target->abort(died);
    }
    StatusOr<bool> seen = false;
    if (e != aborted)
      seen = watcherStore->has(key);
    if (seen.isOk() && *seen) {
      StatusOr<std::string> text = watcherStore->get(key, std::chrono::milliseconds(1000));
      std::lock_guard<std::mutex> current(epochMutex);
      if (epoch == e)
        target->abort(text.isOk() ? *text : "abort of epoch " + std::to_string(e));
      aborted = e;
    }
    lock.lock();
    stopCv.wait_for(lock, std::chrono::milliseconds(50));
  }
}

void LinkRecovery::fatal(const Status &failure, int it) {
  std::string why = "rank " + std::to_string(options.rank) + " failed in step " +
                    std::to_string(it + 1) + " (not a link failure: no recovery): " +
                    failure.toString();
  // Best effort: the rank fails with `failure` whatever the store says.
  (void)store->set("fatal", why);
  (void)store->set("abort/" + std::to_string(getEpoch()), why);
}

StatusOr<int> LinkRecovery::agree(const Status &failure, int it, int oldest) {
  int e = getEpoch();
  auto entered = std::chrono::steady_clock::now();
  auto fail = [&](const std::string &why) {
    Status s = failure;
    std::cerr << "rank " << options.rank << ": in-process recovery of epoch " << e
              << " failed: " << why << "; giving up (--max-restarts takes over)" << std::endl;
    return s;
  };
  ++inARow;
  std::string abortKey = "abort/" + std::to_string(e);
  // The first rank's cause names the link for all (a set keeps the first).
  std::string cause = "rank " + std::to_string(options.rank) + " in step " +
                      std::to_string(it + 1) + ": " + failure.toString();
  STRAIT_RETURN_IF_ERROR(store->set(abortKey, cause));
  StatusOr<std::string> first = store->get(abortKey, options.timeout);
  std::cerr << "rank " << options.rank << ": link failure in step " << it + 1 << " ("
            << failure.toString() << "); recovery epoch " << e << " started by "
            << (first.isOk() ? *first : cause) << std::endl;
  std::ostringstream mine;
  mine << it << " " << oldest << " " << inARow;
  STRAIT_RETURN_IF_ERROR(store->set("state/" + std::to_string(e) + "/" +
                                        std::to_string(options.rank),
                                    mine.str()));
  int resume = it, most = inARow;
  std::vector<std::pair<int, int>> spans(options.worldSize); // (step, oldest)
  auto deadline = std::chrono::steady_clock::now() + options.timeout;
  for (int r = 0; r < options.worldSize; ++r) {
    std::string key = "state/" + std::to_string(e) + "/" + std::to_string(r);
    StatusOr<std::string> got = store->get(key, std::chrono::milliseconds(1));
    // Waits in slices, to see a rank that failed for good (`fatal`).
    while (!got.isOk() && std::chrono::steady_clock::now() < deadline) {
      StatusOr<bool> ended = store->has("fatal");
      if (ended.isOk() && *ended) {
        StatusOr<std::string> why = store->get("fatal", std::chrono::milliseconds(1000));
        return fail(why.isOk() ? *why : "a rank failed");
      }
      got = store->get(key, std::chrono::milliseconds(100));
    }
    if (!got.isOk())
      return fail("rank " + std::to_string(r) + " did not join within " +
                  std::to_string(options.timeout.count()) + " ms (its process may be gone)");
    std::istringstream in(*got);
    int step = 0, from = 0, count = 0;
    in >> step >> from >> count;
    spans[r] = {step, from};
    resume = std::min(resume, step);
    most = std::max(most, count);
  }
  if (most > options.retries)
    return fail(std::to_string(most) + " recoveries in a row, more than --link-retries " +
                std::to_string(options.retries));
  for (int r = 0; r < options.worldSize; ++r)
    if (spans[r].second < 0 || spans[r].second > resume)
      return fail("rank " + std::to_string(r) + " holds snapshots from step " +
                  std::to_string(spans[r].second + 1) + " on, the job resumes at step " +
                  std::to_string(resume + 1));
  if (inARow > 1 && options.wait.count() > 0)
    std::this_thread::sleep_for(options.wait);
  {
    std::lock_guard<std::mutex> lock(epochMutex);
    epoch = e + 1;
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - entered)
                  .count();
  std::cerr << "rank " << options.rank << ": recovery epoch " << e << ": every rank resumes at step "
            << resume + 1 << " (this rank was in step " << it + 1 << ", replays "
            << it - resume + 1 << " step" << (it - resume ? "s" : "") << "; agreed in " << ms
            << " ms)" << std::endl;
  return resume;
}

} // namespace run
} // namespace strait
