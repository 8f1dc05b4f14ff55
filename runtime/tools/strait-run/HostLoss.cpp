//===- HostLoss.cpp - Going on without a lost host ------------------------===//
//
// See HostLoss.h and docs/runtime.md, "Losing a host".
//
//===----------------------------------------------------------------------===//
#include "HostLoss.h"
#include "Checkpoint.h"
#include "HostRestart.h"
#include "strait/runtime/Program.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

namespace strait {
namespace run {

using rt::Status;
using rt::StatusOr;

namespace {

std::string join(const std::vector<std::string> &names) {
  std::string out;
  for (const std::string &n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

} // namespace

std::string planShape(const PlanFacts &f) {
  std::ostringstream out;
  size_t n = f.stageDevices.size();
  bool same = true;
  for (size_t d : f.stageDevices)
    same &= d == f.stageDevices.front();
  out << n << (n == 1 ? " stage" : " stages");
  if (n && same) {
    out << " x " << f.stageDevices.front() << " replica" << (f.stageDevices.front() == 1 ? "" : "s");
  } else {
    out << " of";
    for (size_t i = 0; i < n; ++i)
      out << (i ? ", " : " ") << f.stageDevices[i];
    out << " devices";
  }
  out << ", " << f.microBatches << " micro-batch" << (f.microBatches == 1 ? "" : "es");
  return out.str();
}

StatusOr<HostLoss> HostLoss::create(const RunOptions &o) {
  HostLoss h;
  h.options = o;
  STRAIT_ASSIGN_OR_RETURN(h.record, readJobRecord(o.planDir));
  h.options.straitcPath = findStraitc(o, h.record);
  return h;
}

bool HostLoss::failed(const std::string &host) {
  return ++failuresOf[host] > options.maxRestarts;
}

Status HostLoss::switched(const std::string &dir) {
  STRAIT_ASSIGN_OR_RETURN(record, readJobRecord(dir));
  failuresOf.clear(); // a new plan: every host's restarts again
  return Status::ok();
}

StatusOr<std::string> HostLoss::replanWithout(const std::string &planDir,
                                              const std::vector<std::string> &lost,
                                              const std::string &why) {
  std::set<std::string> gone(lost.begin(), lost.end());
  std::set<std::string> planned;
  for (const JobRecord::Rank &r : record.ranks)
    planned.insert(r.host);
  std::vector<std::string> remaining;
  for (const std::string &h : planned)
    if (!gone.count(h))
      remaining.push_back(h);
  std::string lostNames = join(lost);
  std::cout << "strait-run: host " << lostNames << " lost: " << why << std::endl;
  if (int(remaining.size()) < options.minHosts)
    return rt::invalidArgument(
        "host " + lostNames + " lost (" + why + "); " + std::to_string(remaining.size()) +
        " host(s) would remain (" + (remaining.empty() ? std::string("none") : join(remaining)) +
        "), fewer than --min-hosts " + std::to_string(options.minHosts) + ": the job ends");
  int k = ++losses;
  std::string tag = "host-loss " + std::to_string(k);
  std::string dir = jobFolderOf(planDir) + "/host-loss-" + std::to_string(k);
  makeDirs(dir);
  // The running plan's cluster file, and the hosts to leave out (straitc's
  // cluster parser drops their devices and the link rules naming them; a
  // file of an earlier loss already excludes that one's).
  std::string cluster = dir + "/without-lost-hosts.yaml";
  {
    std::ifstream in(record.clusterFile);
    std::ofstream out(cluster);
    if (in)
      out << in.rdbuf();
    out << "\n# strait-run --on-host-loss replan: " << why << "\nexclude_hosts: ["
        << lostNames << "]\n";
    if (!in || !out)
      return rt::unavailable(tag + ": cannot copy " + record.clusterFile + " to " + cluster +
                             "; the job ends");
  }
  std::cout << "strait-run: " << tag << ": re-planning for " << remaining.size() << " host(s) ("
            << join(remaining) << "; --min-hosts " << options.minHosts << ") without "
            << lostNames << ": straitc into " << dir << std::endl;
  double compileS = 0;
  StatusOr<JobRecord> next =
      runRecordedStraitc(options.straitcPath, record, cluster, dir, "", &compileS);
  if (!next.isOk())
    return rt::unavailable(tag + ": " + next.getStatus().getMessage() +
                           ": no plan for the remaining hosts; the job ends");
  StatusOr<PlanFacts> was = readPlanFacts(planDir);
  StatusOr<PlanFacts> now = readPlanFacts(dir);
  if (!now.isOk())
    return rt::unavailable(tag + ": " + now.getStatus().getMessage() + "; the job ends");
  std::ostringstream line;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "predicted step %.4g ms", now->iterationS * 1e3);
  line << "strait-run: " << tag << ": new plan (straitc ";
  std::snprintf(buf + 80, 80, "%.2f s", compileS);
  line << (buf + 80) << "): " << next->ranks.size() << " rank(s), " << planShape(*now) << ", "
       << buf;
  if (was.isOk()) {
    std::snprintf(buf, sizeof(buf), "%.4g ms", was->iterationS * 1e3);
    line << " (the lost plan: " << record.ranks.size() << " rank(s), " << planShape(*was) << ", "
         << buf << "); global batch " << now->globalBatch;
    if (now->globalBatch == was->globalBatch)
      line << " (unchanged)";
    else
      line << ": CHANGED from " << was->globalBatch
           << " (the planner could not keep it on the remaining devices; the loss scale and "
              "the data per step change with it)";
  } else {
    line << "; global batch " << now->globalBatch;
  }
  std::cout << line.str() << "\n" << planSummary(dir + "/straitc.log") << std::flush;
  return dir;
}

std::string HostLoss::hostOfFailure(const std::string &reason) {
  size_t at = reason.find(" on host ");
  if (reason.rfind("rank ", 0) != 0 || at == std::string::npos)
    return "";
  size_t from = at + 9, end = reason.find(' ', from);
  return reason.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

StatusOr<std::optional<HostLossSwitch>>
HostLoss::afterFailure(const std::string &planDir, const std::string &checkpointDir,
                       const std::string &firstResume, int g, const std::string &failedHost,
                       HostRestart *hosts, const volatile std::sig_atomic_t &stop) {
  using Found = std::optional<HostLossSwitch>;
  auto resumeAt = [&](int64_t step) {
    return step > 0 ? checkpointDir + "/step-" + std::to_string(step) : firstResume;
  };
  StatusOr<CheckpointRef> newest = findCheckpoint(checkpointDir);
  int64_t mine = newest.isOk() ? newest->step : 0;
  std::vector<std::string> lost;
  std::string why;
  const std::chrono::milliseconds timeout(options.timeoutMs);
  if (hosts) {
    // Every launcher publishes its step; one that does not answer is lost
    // (a dead machine), and so is one that announced it stopped.
    StatusOr<int64_t> step = hosts->agreeStep(g, mine, timeout, stop);
    if (!step.isOk()) {
      if (hosts->unanswered().empty() || stop)
        return step.getStatus();
      lost = hosts->unanswered();
      why = step.getStatus().getMessage();
      size_t cut = why.rfind("; giving up");
      if (cut != std::string::npos)
        why.resize(cut);
    }
  }
  if (lost.empty()) {
    if (failedHost.empty() || !failed(failedHost))
      return Found();
    lost = {failedHost};
    why = "its ranks failed " + std::to_string(failures(failedHost)) + " time(s), more than " +
          "--max-restarts " + std::to_string(options.maxRestarts);
  }
  if (!hosts) {
    STRAIT_ASSIGN_OR_RETURN(std::string dir, replanWithout(planDir, lost, why));
    return Found(HostLossSwitch{dir, resumeAt(mine)});
  }
  // Across machines: the first remaining host decides, the others follow.
  std::vector<std::string> remaining;
  for (const std::string &h : hosts->planHosts())
    if (std::find(lost.begin(), lost.end(), h) == lost.end())
      remaining.push_back(h);
  if (std::find(lost.begin(), lost.end(), hosts->self()) != lost.end())
    return rt::unavailable("this host (" + hosts->self() + ") is lost to the job (" + why +
                           "); the other hosts go on without it");
  if (!remaining.empty() && remaining.front() == hosts->self()) {
    StatusOr<std::string> dir = replanWithout(planDir, lost, why);
    std::string name = dir.isOk() ? dir->substr(dir->rfind('/') + 1) : "";
    Status told = hosts->publishHostLoss(g, mine, name,
                                         dir.isOk() ? "" : dir.getStatus().getMessage());
    STRAIT_RETURN_IF_ERROR(dir.getStatus());
    if (!told.isOk())
      return rt::unavailable("cannot tell the other hosts of the new plan: " +
                             told.getMessage());
    std::cout << "strait-run: host-loss: told the other host(s) to resume under " << name
              << " from step " << mine << std::endl;
    return Found(HostLossSwitch{*dir, resumeAt(mine)});
  }
  std::cout << "strait-run: host " << join(lost) << " lost (" << why << "); waiting for host "
            << remaining.front() << "'s launcher to re-plan" << std::endl;
  std::string refusal;
  // straitc runs meanwhile: three timeouts.
  STRAIT_ASSIGN_OR_RETURN(auto published, hosts->awaitHostLoss(g, 3 * timeout, stop, &refusal));
  if (published.second.empty())
    return rt::invalidArgument("host " + remaining.front() + "'s launcher: " + refusal);
  std::string dir = jobFolderOf(planDir) + "/" + published.second;
  std::string checkpoint = resumeAt(published.first);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!(rt::loadManifest(dir + "/" + options.manifest).isOk() &&
           (checkpoint.empty() || findCheckpoint(checkpoint).isOk())) &&
         std::chrono::steady_clock::now() < deadline && !stop)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::cout << "strait-run: host-loss: host " << remaining.front() << "'s launcher re-planned: "
            << dir << " from step " << published.first << std::endl;
  return Found(HostLossSwitch{dir, checkpoint});
}

} // namespace run
} // namespace strait
