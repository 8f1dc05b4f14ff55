//===- HostJoin.cpp - Hosts that join a running job -----------------------===//
//
// See HostJoin.h and docs/runtime.md, "A host joins".
//
//===----------------------------------------------------------------------===//
#include "HostJoin.h"
#include "Checkpoint.h"
#include "HostLoss.h"
#include "HostRestart.h"
#include "Replan.h"
#include "strait/runtime/Program.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace strait {
namespace run {

using rt::Status;
using rt::StatusOr;
using Clock = std::chrono::steady_clock;

namespace {

std::string join(const std::vector<std::string> &names) {
  std::string out;
  for (const std::string &n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string trimValue(std::string v) {
  size_t end = v.find_first_of(",}#");
  if (end != std::string::npos)
    v.resize(end);
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back())))
    v.pop_back();
  size_t from = v.find_first_not_of(" \t");
  v = from == std::string::npos ? "" : v.substr(from);
  if (v.size() >= 2 && (v[0] == '"' || v[0] == '\'') && v.back() == v[0])
    v = v.substr(1, v.size() - 2);
  return v;
}

/// The value of `key:` in `line` where the key stands alone (not
/// intra_host:, hosts:), or "".
std::string fieldOf(const std::string &line, const std::string &key) {
  for (size_t at = line.find(key + ":"); at != std::string::npos;
       at = line.find(key + ":", at + 1)) {
    char before = at ? line[at - 1] : ' ';
    if (std::isalnum(static_cast<unsigned char>(before)) || before == '_')
      continue;
    return trimValue(line.substr(at + key.size() + 1));
  }
  return "";
}

/// Host-name prefixes of device groups (`per_host` with `host_prefix`, or
/// `prefix` + "host"): their hosts are the prefix and a number.
std::vector<std::string> groupPrefixes(const std::string &path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    std::string hp = fieldOf(line, "host_prefix"), p = fieldOf(line, "prefix");
    if (!hp.empty())
      out.push_back(hp);
    else if (!p.empty() && !fieldOf(line, "per_host").empty())
      out.push_back(p + "host");
  }
  return out;
}

bool isHostOf(const std::string &host, const std::vector<std::string> &names,
              const std::vector<std::string> &prefixes) {
  if (std::find(names.begin(), names.end(), host) != names.end())
    return true;
  for (const std::string &p : prefixes)
    if (host.size() > p.size() && host.compare(0, p.size(), p) == 0 &&
        host.find_first_not_of("0123456789", p.size()) == std::string::npos)
      return true;
  return false;
}

/// Polls `key` every 100 ms until it exists, `abortKey` (when not empty)
/// exists, `stop`, or `timeout`. 1: key, 0: abortKey, error otherwise.
StatusOr<int> awaitKey(rt::KeyStore &keys, const std::string &key, const std::string &abortKey,
                       std::chrono::milliseconds timeout, const volatile std::sig_atomic_t &stop,
                       const std::string &what) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    STRAIT_ASSIGN_OR_RETURN(bool there, keys.has(key));
    if (there)
      return 1;
    if (!abortKey.empty()) {
      STRAIT_ASSIGN_OR_RETURN(bool abort, keys.has(abortKey));
      if (abort)
        return 0;
    }
    if (stop)
      return rt::unavailable("interrupted while waiting for " + what);
    if (Clock::now() >= deadline)
      return rt::deadlineExceeded("waited " + std::to_string(timeout.count()) +
                                  " ms (--timeout-ms) for " + what);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

StatusOr<std::unique_ptr<rt::KeyStore>> openLaunchStore(const RunOptions &o,
                                                        const program::PlanManifest &m,
                                                        std::string *where) {
  rt::GlooOptions g;
  STRAIT_RETURN_IF_ERROR(rt::setRendezvous(g, rendezvousUrl(o, m), o.planDir));
  setStoreAuth(o, g);
  *where = g.store == rt::StoreKind::Redis
               ? "redis store " + g.redisHost + ":" + std::to_string(g.redisPort)
               : "file store " + g.storePath;
  return rt::openKeyStore(g, "strait-launch/" + o.runId);
}

/// The value of `key`, or `fallback` when it cannot be read.
std::string valueOf(rt::KeyStore &keys, const std::string &key, const std::string &fallback) {
  StatusOr<std::string> v = keys.get(key, std::chrono::milliseconds(1000));
  return v.isOk() ? *v : fallback;
}

std::vector<std::string> split(const std::string &v) {
  std::vector<std::string> out;
  std::istringstream in(v);
  for (std::string f; std::getline(in, f, '\t');)
    out.push_back(f);
  return out;
}

} // namespace

std::vector<std::string> clusterFileHosts(const std::string &path) {
  std::ifstream in(path);
  std::set<std::string> hosts;
  for (std::string line; std::getline(in, line);) {
    std::string h = fieldOf(line, "host");
    if (!h.empty())
      hosts.insert(h);
  }
  return {hosts.begin(), hosts.end()};
}

bool isJoinPlan(const std::string &name) {
  std::string base = name.substr(name.rfind('/') + 1);
  return base.rfind("host-join-", 0) == 0;
}

StatusOr<JoinedPlan> joinRunningJob(const RunOptions &o,
                                    const volatile std::sig_atomic_t &stop) {
  const std::string flag = "--host " + o.host + " --join";
  STRAIT_ASSIGN_OR_RETURN(program::PlanManifest m, rt::loadManifest(o.planDir + "/" + o.manifest));
  StatusOr<JobRecord> record = readJobRecord(o.planDir);
  if (!record.isOk())
    return rt::invalidArgument(flag + ": " + record.getStatus().getMessage());
  // The host must be one of the cluster file's (a plan's, or one the file
  // leaves out); straitc checks it again when it re-plans.
  std::vector<std::string> names = clusterFileHosts(record->clusterFile);
  for (const JobRecord::Rank &r : record->ranks)
    if (std::find(names.begin(), names.end(), r.host) == names.end())
      names.push_back(r.host);
  std::sort(names.begin(), names.end());
  std::vector<std::string> prefixes = groupPrefixes(record->clusterFile);
  if (!isHostOf(o.host, names, prefixes))
    return rt::invalidArgument(flag + ": no device of the job's cluster file (" +
                               record->clusterFile + ") is on host " + o.host +
                               " (its hosts: " + join(names) +
                               (prefixes.empty() ? "" : " and the device groups' hosts") + ")");
  std::string store;
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<rt::KeyStore> keys, openLaunchStore(o, m, &store));
  // A running job: some other host's launcher claimed the run id.
  bool live = false;
  for (const std::string &h : names)
    if (h != o.host) {
      STRAIT_ASSIGN_OR_RETURN(bool there, keys->has("started/" + h));
      live |= there;
    }
  if (!live)
    return rt::invalidArgument(flag + ": no launcher of run id " + o.runId + " is in " + store +
                               " (none of hosts " + join(names) +
                               " started it): give the running job's --run-id and "
                               "--rendezvous");
  STRAIT_ASSIGN_OR_RETURN(bool ended, keys->has("end"));
  if (ended)
    return rt::invalidArgument(flag + ": the job of run id " + o.runId + " has finished");
  // Announce: the first free join/<host>/<n>.
  char machine[256] = "?";
  ::gethostname(machine, sizeof(machine) - 1);
  std::string token = std::string(machine) + ":" + std::to_string(::getpid()) + ":" +
                      std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  int n = 0;
  for (int i = 1; i <= 10000 && n == 0; ++i) {
    std::string key = "join/" + o.host + "/" + std::to_string(i);
    STRAIT_ASSIGN_OR_RETURN(bool taken, keys->has(key));
    if (taken)
      continue;
    STRAIT_RETURN_IF_ERROR(keys->set(key, token));
    STRAIT_ASSIGN_OR_RETURN(std::string v, keys->get(key, std::chrono::milliseconds(1000)));
    if (v == token)
      n = i;
  }
  if (n == 0)
    return rt::unavailable(flag + ": no free announcement key join/" + o.host + "/N in " + store);
  std::string id = o.host + "/" + std::to_string(n);
  std::cout << "strait-run: host-join: host " << o.host << " announced itself to run id "
            << o.runId << " (" << store << ", join/" << id
            << "); waiting for the deciding launcher" << std::endl;
  const std::chrono::milliseconds timeout(o.timeoutMs);
  StatusOr<int> acked = awaitKey(*keys, "joinack/" + id, "end", 2 * timeout, stop,
                                 "a launcher of the job to see this host");
  if (!acked.isOk())
    return rt::unavailable(flag + ": " + acked.getStatus().getMessage() +
                           ": do the job's launchers run with --on-host-join replan?");
  if (*acked == 0)
    return rt::invalidArgument(flag + ": the job of run id " + o.runId + " has finished");
  std::vector<std::string> ack =
      split(valueOf(*keys, "joinack/" + id, ""));
  std::cout << "strait-run: host-join: host " << (ack.size() > 2 ? ack[2] : "?")
            << "'s launcher saw it at step " << (ack.size() > 1 ? ack[1] : "?")
            << "; waiting for the new plan" << std::endl;
  STRAIT_ASSIGN_OR_RETURN(int replied, awaitKey(*keys, "joinreply/" + id, "end", 3 * timeout,
                                                stop, "the deciding launcher's new plan"));
  if (replied == 0)
    return rt::invalidArgument(flag + ": the job finished before host " + o.host +
                               " could join");
  STRAIT_ASSIGN_OR_RETURN(std::string value,
                          keys->get("joinreply/" + id, std::chrono::milliseconds(1000)));
  std::vector<std::string> r = split(value);
  if (r.size() == 2 && r[0] == "!")
    return rt::invalidArgument(flag + ": the job did not take host " + o.host + ": " + r[1]);
  if (r.size() != 3 || std::atoi(r[0].c_str()) < 1 || std::atoi(r[1].c_str()) < 1)
    return rt::invalidArgument(flag + ": malformed 'joinreply/" + id + "' in " + store + ": '" +
                               value + "'");
  JoinedPlan plan;
  plan.generation = std::atoi(r[0].c_str());
  plan.dir = jobFolderOf(o.planDir) + "/" + r[2];
  plan.checkpoint = o.checkpointDir + "/step-" + r[1];
  std::string g = std::to_string(plan.generation);
  std::string failKey = "fail/" + std::to_string(plan.generation - 1);
  std::cout << "strait-run: host-join: the job switches to " << plan.dir << " after step " << r[1]
            << "; waiting for the checkpoint " << plan.checkpoint << std::endl;
  // The others' ranks checkpoint the stop step (a few steps ahead); a
  // failure before it calls the switch off, as does the deciding launcher
  // when this host came too late.
  auto deadline = Clock::now() + 3 * timeout;
  for (;;) {
    if (rt::loadManifest(plan.dir + "/" + o.manifest).isOk() &&
        findCheckpoint(plan.checkpoint).isOk())
      break;
    STRAIT_ASSIGN_OR_RETURN(bool failed, keys->has(failKey));
    if (failed) {
      std::string why = valueOf(*keys, failKey, "?");
      return rt::unavailable(flag + ": the job failed before the switch (" + why +
                             "): host " + o.host + " did not join; start it again with --join");
    }
    STRAIT_ASSIGN_OR_RETURN(bool decided, keys->has("joinok/" + g));
    if (stop || decided || Clock::now() >= deadline)
      return rt::unavailable(
          flag + ": " +
          (stop ? std::string("interrupted")
                : decided ? std::string("the job went on without this host")
                          : "the checkpoint " + plan.checkpoint + " or the plan " + plan.dir +
                                " did not appear within " + std::to_string(3 * o.timeoutMs) +
                                " ms: are --checkpoint and DIR the running job's, on a file "
                                "system every machine shares?"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  STRAIT_RETURN_IF_ERROR(keys->set("joined/" + g + "/" + o.host, token));
  STRAIT_ASSIGN_OR_RETURN(int verdict, awaitKey(*keys, "joinok/" + g, "", 3 * timeout, stop,
                                                "the deciding launcher's verdict"));
  (void)verdict;
  std::string ok = valueOf(*keys, "joinok/" + g, "");
  if (ok != "1")
    return rt::unavailable(flag + ": the job went on without host " + o.host + " (" +
                           (split(ok).size() > 1 ? split(ok)[1] : ok) +
                           "); start it again with --join");
  return plan;
}

StatusOr<HostJoin> HostJoin::create(const RunOptions &o) {
  HostJoin j;
  j.options = o;
  STRAIT_ASSIGN_OR_RETURN(program::PlanManifest m, rt::loadManifest(o.planDir + "/" + o.manifest));
  STRAIT_ASSIGN_OR_RETURN(JobRecord record, readJobRecord(o.planDir));
  j.options.straitcPath = findStraitc(o, record);
  j.clusterHosts = clusterFileHosts(record.clusterFile);
  for (const JobRecord::Rank &r : record.ranks)
    if (std::find(j.clusterHosts.begin(), j.clusterHosts.end(), r.host) == j.clusterHosts.end())
      j.clusterHosts.push_back(r.host);
  std::sort(j.clusterHosts.begin(), j.clusterHosts.end());
  STRAIT_ASSIGN_OR_RETURN(j.keys, openLaunchStore(o, m, &j.store));
  return j;
}

void HostJoin::reply(const Announcement &a, const std::string &value) {
  Status s = keys->set("joinreply/" + a.host + "/" + std::to_string(a.n), value);
  if (!s.isOk())
    std::cout << "strait-run: host-join: cannot answer host " << a.host << " in " << store
              << ": " << s.getMessage() << std::endl;
}

void HostJoin::poll(int g, const std::string &planDir, const std::vector<std::string> &planHosts,
                    ReplanMonitor &monitor, HostRestart &hosts, int lastStep) {
  // New announcements: acknowledged at once (the joiner waits for that).
  for (const std::string &h : clusterHosts) {
    int &i = next.emplace(h, 1).first->second;
    for (;; ++i) {
      std::string id = h + "/" + std::to_string(i);
      StatusOr<bool> there = keys->has("join/" + id);
      if (!there.isOk() || !*there)
        break;
      StatusOr<bool> answered = keys->has("joinreply/" + id);
      if (!answered.isOk())
        break;
      if (*answered)
        continue;
      (void)keys->set("joinack/" + id, std::to_string(g) + "\t" +
                                            std::to_string(monitor.mergedStep()) + "\t" +
                                            hosts.self());
      std::cout << "strait-run: host-join: host " << h << "'s launcher announced itself (join/"
                << id << ") at step " << monitor.mergedStep() << std::endl;
      pending.push_back({h, i});
    }
  }
  if (pending.empty() || monitor.stopping() || monitor.mergedStep() == 0)
    return; // after the switch that is pending, or the first merged step
  std::vector<Announcement> admit;
  std::vector<std::string> joining;
  for (const Announcement &a : pending) {
    if (std::find(planHosts.begin(), planHosts.end(), a.host) != planHosts.end()) {
      std::string why = "host " + a.host + " runs ranks of the running plan (" + planDir +
                        "): its launcher is running, or the job has not yet noticed that it "
                        "stopped (--on-host-loss replan leaves it out after --timeout-ms); "
                        "join once it is left out";
      std::cout << "strait-run: host-join: refused: " << why << std::endl;
      reply(a, "!\t" + why);
    } else if (std::find(joining.begin(), joining.end(), a.host) != joining.end()) {
      reply(a, "!\tanother launcher of host " + a.host + " announced itself first");
    } else {
      admit.push_back(a);
      joining.push_back(a.host);
    }
  }
  pending.clear();
  if (admit.empty())
    return;
  int step = monitor.mergedStep();
  StatusOr<std::string> dir = replanWith(planDir, joining, step);
  StatusOr<int> stopStep = dir.isOk() ? monitor.switchTo(lastStep, *dir) : dir.getStatus();
  std::string name = dir.isOk() ? dir->substr(dir->rfind('/') + 1) : "";
  if (stopStep.isOk() && *stopStep == 0)
    stopStep = rt::invalidArgument("the job ends (step " + std::to_string(lastStep) +
                                   ") before a new plan could take over");
  Status told = stopStep.isOk() ? hosts.publishReplan(g, *stopStep, name) : Status::ok();
  if (!stopStep.isOk() || !told.isOk()) {
    std::string why = !stopStep.isOk() ? stopStep.getStatus().getMessage()
                                       : "cannot tell the other hosts: " + told.getMessage();
    std::cout << "strait-run: host-join: " << join(joining) << " not taken: " << why
              << "; the job keeps its plan" << std::endl;
    if (stopStep.isOk())
      monitor.cancel();
    for (const Announcement &a : admit)
      reply(a, "!\t" + why);
    return;
  }
  for (const Announcement &a : admit)
    reply(a, std::to_string(g + 1) + "\t" + std::to_string(*stopStep) + "\t" + name);
  admitted = admit;
  std::cout << "strait-run: " << name << ": switching; every rank checkpoints after step "
            << *stopStep << " and resumes under " << *dir << " (host " << join(joining)
            << " starts its ranks there)" << std::endl;
}

StatusOr<std::string> HostJoin::replanWith(const std::string &planDir,
                                           const std::vector<std::string> &joining, int step) {
  STRAIT_ASSIGN_OR_RETURN(JobRecord record, readJobRecord(planDir));
  std::set<std::string> now;
  for (const JobRecord::Rank &r : record.ranks)
    now.insert(r.host);
  std::vector<std::string> all(now.begin(), now.end());
  for (const std::string &h : joining)
    all.push_back(h);
  std::sort(all.begin(), all.end());
  std::string root = jobFolderOf(planDir);
  int k = 1;
  while (::access((root + "/host-join-" + std::to_string(k)).c_str(), F_OK) == 0)
    ++k;
  std::string tag = "host-join-" + std::to_string(k);
  std::string dir = root + "/" + tag;
  makeDirs(dir);
  std::string names = join(joining);
  std::string cluster = dir + "/with-joined-hosts.yaml";
  {
    std::ifstream in(record.clusterFile);
    std::ofstream out(cluster);
    if (in)
      out << in.rdbuf();
    out << "\n# strait-run --on-host-join replan: host " << names << " joined at step " << step
        << "\ninclude_hosts: [" << names << "]\n";
    if (!in || !out)
      return rt::unavailable("cannot copy " + record.clusterFile + " to " + cluster);
  }
  std::cout << "strait-run: " << tag << ": re-planning for " << all.size() << " host(s) ("
            << join(all) << ") with " << names << ": straitc into " << dir << std::endl;
  double compileS = 0;
  StatusOr<JobRecord> next =
      runRecordedStraitc(options.straitcPath, record, cluster, dir, "", &compileS);
  if (!next.isOk())
    return rt::unavailable(next.getStatus().getMessage() + ": no plan with host " + names);
  std::set<std::string> planned;
  for (const JobRecord::Rank &r : next->ranks)
    planned.insert(r.host);
  for (const std::string &h : joining)
    if (!planned.count(h))
      return rt::invalidArgument("straitc's plan with host " + h + " (" + dir +
                                 ") gives it no rank");
  StatusOr<PlanFacts> was = readPlanFacts(planDir);
  StatusOr<PlanFacts> facts = readPlanFacts(dir);
  if (!facts.isOk())
    return facts.getStatus();
  char buf[96];
  std::ostringstream line;
  std::snprintf(buf, sizeof(buf), "(straitc %.2f s): ", compileS);
  line << "strait-run: " << tag << ": new plan " << buf << next->ranks.size() << " rank(s), "
       << planShape(*facts);
  std::snprintf(buf, sizeof(buf), ", predicted step %.4g ms", facts->iterationS * 1e3);
  line << buf;
  if (was.isOk()) {
    std::snprintf(buf, sizeof(buf), "%.4g ms", was->iterationS * 1e3);
    line << " (the running plan: " << record.ranks.size() << " rank(s), " << planShape(*was)
         << ", " << buf << "); global batch " << facts->globalBatch;
    if (facts->globalBatch == was->globalBatch)
      line << " (unchanged)";
    else
      line << ": CHANGED from " << was->globalBatch;
  }
  std::cout << line.str() << "\n" << planSummary(dir + "/straitc.log") << std::flush;
  return dir;
}

StatusOr<bool> HostJoin::verdict(int next, bool deciding,
                                 const volatile std::sig_atomic_t &stop) {
  std::string key = "joinok/" + std::to_string(next);
  const std::chrono::milliseconds timeout(options.timeoutMs);
  if (deciding) {
    std::vector<std::string> missing;
    auto deadline = Clock::now() + timeout;
    for (;;) {
      missing.clear();
      for (const Announcement &a : admitted) {
        STRAIT_ASSIGN_OR_RETURN(bool there,
                                keys->has("joined/" + std::to_string(next) + "/" + a.host));
        if (!there)
          missing.push_back(a.host);
      }
      if (missing.empty() || stop || Clock::now() >= deadline)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::string why = missing.empty()
                          ? ""
                          : "the launcher of host " + join(missing) + " did not confirm within " +
                                std::to_string(options.timeoutMs) + " ms (--timeout-ms)";
    STRAIT_RETURN_IF_ERROR(keys->set(key, missing.empty() ? "1" : "0\t" + why));
    admitted.clear();
  } else {
    STRAIT_RETURN_IF_ERROR(
        awaitKey(*keys, key, "", 3 * timeout, stop, "the deciding launcher's word on the joining "
                                                    "host(s) (" + key + " in " + store + ")")
            .getStatus());
  }
  STRAIT_ASSIGN_OR_RETURN(std::string v, keys->get(key, std::chrono::milliseconds(1000)));
  if (v == "1")
    return true;
  std::vector<std::string> f = split(v);
  std::cout << "strait-run: host-join: " << (f.size() > 1 ? f[1] : v)
            << "; the job goes on under its running plan" << std::endl;
  return false;
}

} // namespace run
} // namespace strait
