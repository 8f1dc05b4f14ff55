//===- Launcher.cpp - Starts and supervises the local ranks ---------------===//
//
// One worker process per rank (the same executable with --rank R), its
// stdout and stderr in <log-dir>/rank<R>.log. When a rank exits with an error
// or dies, the launcher sends SIGTERM to the others, escalates to SIGKILL
// after a grace period, prints the tail of the failed rank's log and returns
// 1. Ctrl-C (SIGINT) or SIGTERM to the launcher stops all ranks the same way
// and returns 130 / 143. While the ranks run, the launcher follows their logs
// and, once every rank reported iteration N, prints one merged progress line:
//   step N/M loss L tokens/s X time T ms [lr LR] | rank0 sent 1:16.0KiB recv 1:2.0KiB | ...
// (loss: mean of the ranks that report one; tokens or samples per second:
// items of all replicas over the slowest rank's time; bytes since the last
// line per peer).
//
//===----------------------------------------------------------------------===//
#include "StraitRun.h"
#include "TraceFiles.h"
#include "Checkpoint.h"
#include "HostJoin.h"
#include "HostLoss.h"
#include "HostRestart.h"
#include "ProgressMerger.h"
#include "Replan.h"
#include "strait/runtime/Communicator.h"
#include "strait/runtime/LinkSecret.h"
#include "strait/runtime/Program.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <cstdio>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace strait {
namespace run {

namespace {

volatile std::sig_atomic_t stopSignal = 0;
void onSignal(int sig) { stopSignal = sig; }

struct Child {
  int rank;
  pid_t pid;
  std::string log;
  bool running = true;
  int exitCode = 0;
};

pid_t spawnWorker(const RunOptions &o, int rank, int world, int localRank,
                  const std::string &log) {
  pid_t pid = ::fork();
  if (pid != 0)
    return pid;
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
  }
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(localRank).c_str(), 1);
  ::setenv("STRAIT_RUN_ID", o.runId.c_str(), 1);
  // OpenBLAS sizes its own pool from this; keep it to this rank's share.
  ::setenv("OPENBLAS_NUM_THREADS", std::to_string(o.threads).c_str(), 1);
  std::vector<std::string> args = {o.executable, o.planDir, "--rank", std::to_string(rank),
                                   "--steps", std::to_string(o.steps),
                                   "--timeout-ms", std::to_string(o.timeoutMs),
                                   "--manifest", o.manifest, "--run-id", o.runId};
  if (o.lrGiven) { // else the workers use the program's schedule
    args.push_back("--lr");
    args.push_back(o.lrText);
  }
  args.push_back("--threads");
  args.push_back(std::to_string(o.threads));
  auto pass = [&](const char *flag, const std::string &v) {
    if (!v.empty()) {
      args.push_back(flag);
      args.push_back(v);
    }
  };
  pass("--data", o.dataPath);
  pass("--data-format", o.dataFormat);
  pass("--labels", o.labelsPath);
  pass("--eval-data", o.evalDataPath);
  pass("--eval-labels", o.evalLabelsPath);
  if (!o.evalDataPath.empty()) {
    pass("--eval-every", std::to_string(o.evalEvery));
    pass("--eval-batches", std::to_string(o.evalBatches));
  }
  pass("--input-name", o.inputName);
  for (const auto &[flag, list] : {std::make_pair("--input", &o.inputFiles),
                                   std::make_pair("--eval-input", &o.evalInputFiles),
                                   std::make_pair("--input-fill", &o.inputFills)})
    for (const auto &[name, value] : *list)
      pass(flag, name + "=" + value);
  pass("--labels-name", o.labelsName);
  pass("--dump-outputs", o.dumpDir);
  pass("--save-params", o.saveParamsDir);
  pass("--link-secret", o.linkSecretFile); // the path: the secret stays off `ps`
  pass("--rendezvous", o.rendezvous);
  pass("--listen-address", o.listenAddress);
  if (!o.topkAdapt)
    pass("--topk-adapt", "off");
  pass("--seed", std::to_string(o.seed));
  pass("--device", o.device);
  pass("--comm", o.comm);
  pass("--matmul-precision", o.matmulPrecision);
  pass("--checkpoint", o.checkpointDir);
  if (o.checkpointEvery > 0)
    pass("--checkpoint-every", std::to_string(o.checkpointEvery));
  pass("--resume", o.resumePath);
  pass("--link-retries", std::to_string(o.linkRetries));
  pass("--link-retry-wait", std::to_string(o.linkRetryWaitMs));
  pass("--replan-stop-file", o.replanStopFile);
  if (!o.traceFile.empty()) { // each rank's part; runLauncher merges them
    pass("--trace", traceRankFile(o, rank));
    pass("--trace-steps", std::to_string(o.traceFirst) + ":" + std::to_string(o.traceLast));
  }
  if (o.profile)
    args.push_back("--profile");
  if (!o.finalOuterStep)
    args.push_back("--no-final-outer-step");
  std::vector<char *> argv;
  for (auto &a : args)
    argv.push_back(&a[0]);
  argv.push_back(nullptr);
  ::execv(o.executable.c_str(), argv.data());
  std::cerr << "strait-run: cannot exec " << o.executable << ": "
            << std::strerror(errno) << std::endl;
  ::_exit(127);
}

void printTail(const std::string &path, size_t lines) {
  std::ifstream in(path);
  std::deque<std::string> tail;
  for (std::string line; std::getline(in, line);) {
    tail.push_back(line);
    if (tail.size() > lines)
      tail.pop_front();
  }
  for (const auto &l : tail)
    std::cerr << "  | " << l << "\n";
}

/// Reaps exited children; returns the first failed one (or nullptr).
Child *reap(std::vector<Child> &children, std::vector<Child *> *order = nullptr) {
  Child *failed = nullptr;
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    for (Child &c : children) {
      if (c.pid != pid)
        continue;
      c.running = false;
      c.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (c.exitCode != 0 && !failed)
        failed = &c;
      if (c.exitCode != 0 && order)
        order->push_back(&c);
    }
  }
  return failed;
}

void stopAll(std::vector<Child> &children) {
  for (Child &c : children)
    if (c.running)
      ::kill(c.pid, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    reap(children);
    bool any = false;
    for (Child &c : children)
      any |= c.running;
    if (!any)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (Child &c : children)
    if (c.running) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, nullptr, 0);
      c.running = false;
    }
}

/// Collects the failures of a short window after the first one, reports the
/// root cause first (a rank that failed on its own, exit code 1, before one
/// that lost a peer, exit code 3) and stops the remaining ranks.
void reportFailure(std::vector<Child> &children, std::vector<Child *> &failures) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until) {
    reap(children, &failures);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::stable_partition(failures.begin(), failures.end(),
                        [](const Child *c) { return c->exitCode != 3; });
  const Child *root = failures.front();
  std::cerr << "strait-run: rank " << root->rank << " failed (exit code "
            << root->exitCode << "); stopping the other ranks. Last lines of "
            << root->log << ":\n";
  printTail(root->log, 5);
  for (size_t i = 1; i < failures.size(); ++i)
    std::cerr << "strait-run: rank " << failures[i]->rank
              << " also failed (exit code " << failures[i]->exitCode << "), see "
              << failures[i]->log << "\n";
  stopAll(children);
}

/// --replan with --host on a machine other than the leader's (the host of
/// rank 0): the re-plan the leader published, which this launcher passes on
/// to its ranks through their stop file.
struct FollowedReplan {
  std::string stopFile;
  int stopStep = 0;  // 0: none yet
  std::string plan;  // the new plan's folder, under the job folder
};

/// Starts every rank of `m` and waits for them: 0 when all finished, 1 when
/// one failed (the others are stopped), 128 + signal when interrupted, 4
/// when all stopped for a re-plan. Attempt k > 0 (a restart) logs to
/// rank<R>.restart<k>.log. With `hosts` (--host with --max-restarts or
/// --replan): a local failure is published as attempt's failure, and one
/// another host published stops the local ranks (1); the leader's monitor
/// publishes its re-plan, which a `follow`er passes on to its ranks.
int superviseOnce(const RunOptions &o, const program::PlanManifest &m, int attempt,
                  ReplanMonitor *replan = nullptr, HostRestart *hosts = nullptr,
                  FollowedReplan *follow = nullptr, int *failedRank = nullptr,
                  HostJoin *join = nullptr) {
  std::vector<Child> children;
  ProgressMerger progress(m, o.quietProgress);
  if (replan)
    progress.onStep = [&](int step, const std::map<int, Progress> &ranks) {
      StepReport r;
      r.step = step;
      for (const auto &[rank, p] : ranks) {
        r.ms[rank] = p.ms;
        parseLinkTimings(p.links, r.links[rank]);
      }
      if (replan->observe(r, o.steps) && hosts) {
        const std::string &dir = replan->newPlanDir();
        rt::Status s = hosts->publishReplan(attempt, replan->stopStep(),
                                            dir.substr(dir.rfind('/') + 1));
        if (!s.isOk())
          std::cerr << "strait-run: cannot tell the other hosts of the re-plan: "
                    << s.getMessage() << std::endl;
      }
    };
  auto stopping = [&] {
    return (replan && replan->stopping()) || (follow && follow->stopStep > 0);
  };
  // A follower's ranks run without a lease (Replan.h): they exchange data
  // with the leader's ranks every step, whose lease bounds them.
  if (follow && !writeReplanControl(follow->stopFile, {0, -1}))
    std::cerr << "strait-run: cannot write " << follow->stopFile << ": " << std::strerror(errno)
              << std::endl;
  int local = 0;
  for (const auto &r : m.ranks()) {
    if (!o.host.empty() && r.host() != o.host)
      continue; // another machine's launcher starts it
    std::string log = o.logDir + "/rank" + std::to_string(r.rank()) +
                      (attempt ? ".restart" + std::to_string(attempt) : "") + ".log";
    // Emptied here, before the merger reads it: a log of an earlier run in
    // this folder would otherwise be read as this run's progress.
    std::ofstream(log, std::ios::trunc).close();
    pid_t pid = spawnWorker(o, r.rank(), m.world_size(), local++, log);
    if (pid < 0) {
      std::cerr << "strait-run: fork failed: " << std::strerror(errno) << std::endl;
      stopAll(children);
      return 1;
    }
    children.push_back({r.rank(), pid, log});
    progress.add(r.rank(), log);
    std::cout << "strait-run: rank " << r.rank() << " pid " << pid << " log " << log
              << std::endl;
  }
  for (int polls = 0;; ++polls) {
    std::vector<Child *> failures;
    reap(children, &failures);
    if (follow && follow->stopStep == 0) { // the leader's re-plan, if any
      rt::StatusOr<std::optional<std::pair<int, std::string>>> r = hosts->replanOf(attempt);
      if (r.isOk() && *r) {
        follow->stopStep = (*r)->first;
        follow->plan = (*r)->second;
        bool written = writeReplanControl(follow->stopFile, {follow->stopStep,
                                                             follow->stopStep});
        std::cout << "strait-run: " << (isJoinPlan(follow->plan) ? "host-join" : "re-plan")
                  << " (host " << m.ranks(0).host()
                  << "'s launcher): every rank checkpoints after step " << follow->stopStep
                  << " and resumes under " << follow->plan << std::endl;
        if (!written)
          std::cerr << "strait-run: cannot write " << follow->stopFile << ": "
                    << std::strerror(errno) << std::endl;
      }
    }
    if (stopping()) // exit 4: stopped for the re-plan
      failures.erase(std::remove_if(failures.begin(), failures.end(),
                                    [](const Child *c) {
                                      return c->exitCode == kExitStoppedForReplan;
                                    }),
                     failures.end());
    if (!failures.empty()) {
      reportFailure(children, failures); // the root cause first
      if (failedRank)
        *failedRank = failures.front()->rank;
      if (hosts) {
        // A rank that only lost a peer (exit code 3) is rarely the cause:
        // give the peer's host a second to publish its own failure first.
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (failures.front()->exitCode == 3 && std::chrono::steady_clock::now() < until) {
          rt::StatusOr<std::optional<std::string>> f = hosts->failure(attempt);
          if (!f.isOk() || *f)
            break;
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        rt::StatusOr<std::string> stands = hosts->publishFailure(
            attempt, "rank " + std::to_string(failures.front()->rank) + " on host " +
                         hosts->self() + " failed (exit code " +
                         std::to_string(failures.front()->exitCode) + ")");
        if (!stands.isOk())
          std::cerr << "strait-run: cannot tell the other hosts: "
                    << stands.getStatus().getMessage() << std::endl;
      }
      return 1;
    }
    if (join && replan && hosts && polls % 10 == 4) // every 200 ms: a host that joins
      join->poll(attempt, o.planDir, hosts->planHosts(), *replan, *hosts, o.steps);
    if (hosts && polls % 10 == 9) { // every 200 ms: another host's failure
      rt::StatusOr<std::optional<std::string>> f = hosts->failure(attempt);
      if (f.isOk() && *f) {
        std::cerr << "strait-run: " << **f << " (the store says); stopping the ranks of host "
                  << hosts->self() << std::endl;
        stopAll(children);
        return 1;
      }
    }
    if (stopSignal) {
      std::cerr << "strait-run: " << (stopSignal == SIGINT ? "interrupted" : "terminated")
                << "; stopping all ranks" << std::endl;
      int sig = stopSignal;
      stopAll(children);
      return 128 + sig;
    }
    bool any = false;
    for (const Child &c : children)
      any |= c.running;
    progress.poll(!any);
    if (!any)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (stopping() && !children.empty() &&
      std::all_of(children.begin(), children.end(),
                  [](const Child &c) { return c.exitCode == kExitStoppedForReplan; }))
    return kExitStoppedForReplan;
  std::cout << "strait-run: all " << children.size() << " ranks finished" << std::endl;
  if (o.profile) // the workers' tables, rank by rank
    for (const Child &c : children) {
      std::ifstream in(c.log);
      for (std::string line; std::getline(in, line);)
        if (line.rfind("rank " + std::to_string(c.rank) + " profile:", 0) == 0)
          std::cout << line << "\n";
    }
  return 0;
}

/// The ranks this launcher starts: all, or those of --host.
int localRanks(const RunOptions &o, const program::PlanManifest &m) {
  return static_cast<int>(std::count_if(m.ranks().begin(), m.ranks().end(), [&](const auto &r) {
    return o.host.empty() || r.host() == o.host;
  }));
}

/// Checks the rendezvous (--rendezvous, else the manifest's) before any rank
/// starts: its URL, and that a Redis store answers and takes the password
/// (AUTH); creates a file store's folder; false after saying why.
bool prepareStore(const RunOptions &o, const program::PlanManifest &m) {
  rt::GlooOptions g;
  std::string url = rendezvousUrl(o, m);
  rt::Status s = rt::setRendezvous(g, url, o.planDir);
  setStoreAuth(o, g);
  if (s.isOk() && g.store == rt::StoreKind::Redis)
    s = rt::openKeyStore(g, "strait-launch").getStatus();
  if (!s.isOk()) {
    std::cerr << "strait-run: " << (o.rendezvous.empty() ? o.planDir + "/" + o.manifest + ": " : "--rendezvous: ")
              << s.getMessage() << std::endl;
    return false;
  }
  if (g.store == rt::StoreKind::File)
    makeDirs(g.storePath);
  return true;
}

} // namespace

int runLauncher(const RunOptions &options) {
  RunOptions o = options;
  rt::StatusOr<program::PlanManifest> m = rt::loadManifest(o.planDir + "/" + o.manifest);
  if (!m.isOk()) {
    std::cerr << "strait-run: " << m.getStatus().toString() << std::endl;
    return 2;
  }
  if (!o.linkSecretFile.empty()) { // a bad key file fails before any rank starts
    rt::StatusOr<rt::LinkSecret> secret = rt::readLinkSecretFile(o.linkSecretFile);
    if (!secret.isOk()) {
      std::cerr << "strait-run: " << secret.getStatus().toString() << std::endl;
      return 2;
    }
    if (char *abs = ::realpath(o.linkSecretFile.c_str(), nullptr)) {
      o.linkSecretFile = abs;
      std::free(abs);
    }
  }
  if (o.logDir.empty())
    o.logDir = o.planDir + "/logs";
  makeDirs(o.logDir);
  if (o.runId.empty())
    o.runId = "strait-" + std::to_string(::getpid()) + "-" +
              std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  if (!prepareStore(o, *m))
    return 2;
  if (!o.host.empty()) { // one machine of a job: only its ranks
    std::set<std::string> hosts;
    for (const auto &r : m->ranks())
      hosts.insert(r.host());
    std::string refused =
        !hosts.count(o.host) && !o.join
            ? "no rank of the plan is on it (a host the running job leaves out joins it with "
              "--join)"
        : options.runId.empty() ? "--run-id ID is required (the same on every machine)"
                                : "";
    if (!refused.empty()) {
      std::string names;
      for (const std::string &h : hosts)
        names += (names.empty() ? "" : ", ") + h;
      std::cerr << "strait-run: --host " << o.host << ": " << refused
                << " (the plan's hosts: " << names << ")" << std::endl;
      return 2;
    }
    // A run id is used once per store: its keys stay (HostRestart.h). A
    // joiner (HostJoin.h) comes to a run id in use.
    rt::Status claimed = o.join ? rt::Status::ok() : claimRunId(o, *m);
    if (!claimed.isOk()) {
      std::cerr << "strait-run: --host " << o.host << ": " << claimed.getMessage() << std::endl;
      return 2;
    }
  }
  bool threadsGiven = o.threads > 0;
  if (o.threads <= 0) // share the cores between the local ranks
    o.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                std::max(1, localRanks(o, *m)));
  // --replan auto (Replan.h): the ranks checkpoint into --checkpoint DIR, or
  // DIR/replan-checkpoints, and stop when the monitor writes the stop file.
  // With --host only the leader (the host of rank 0) watches and re-plans;
  // the others follow it through the store (HostRestart.h).
  std::optional<ReplanMonitor> replan;
  std::optional<FollowedReplan> follow;
  const std::string jobDir = o.planDir;
  // --replan auto (Replan.h): the ranks checkpoint into --checkpoint DIR, or
  // DIR/replan-checkpoints, and stop when the monitor writes the stop file.
  // --on-host-join replan and --join (HostJoin.h) use the same lease and
  // stop, with or without watching the links.
  const bool leased = o.replan || o.onHostJoinReplan || o.join;
  if (leased && o.checkpointDir.empty())
    o.checkpointDir = o.planDir + "/replan-checkpoints";
  // With --host only the leader (the host of rank 0) watches, re-plans and
  // takes joins; the others follow it through the store (HostRestart.h).
  // Decided for every plan the ranks run: a new one may move rank 0.
  auto assignRoles = [&]() {
    if (!leased)
      return true;
    bool leading = o.host.empty() || m->ranks(0).host() == o.host;
    if (leading && !replan) {
      follow.reset();
      rt::StatusOr<ReplanMonitor> r = ReplanMonitor::create(o);
      if (!r.isOk()) {
        std::cerr << "strait-run: " << (o.replan ? "--replan: " : "--on-host-join: ")
                  << r.getStatus().getMessage() << std::endl;
        return false;
      }
      replan = r.takeValue();
      replan->clearStop();
      o.replanStopFile = replan->stopFile();
    } else if (!leading && !follow) {
      replan.reset();
      follow.emplace();
      char *abs = ::realpath(o.logDir.c_str(), nullptr);
      follow->stopFile = std::string(abs ? abs : o.logDir.c_str()) + "/replan.stop";
      std::free(abs);
      ::unlink(follow->stopFile.c_str());
      o.replanStopFile = follow->stopFile;
    }
    return true;
  };
  if (!o.join && !assignRoles()) // a joiner's come with the plan it joins
    return 2;
  // --on-host-loss replan (HostLoss.h): a host lost for good is left out
  // of a new plan, and the remaining ranks go on.
  std::optional<HostLoss> hostLoss;
  if (o.onHostLossReplan) {
    rt::StatusOr<HostLoss> h = HostLoss::create(o);
    if (!h.isOk()) {
      std::cerr << "strait-run: --on-host-loss: " << h.getStatus().getMessage() << std::endl;
      return 2;
    }
    hostLoss = h.takeValue();
  }
  // --max-restarts, --replan and --on-host-loss across machines
  // (HostRestart.h): the launchers agree through the store on every
  // restart, the step to resume from and the plan to resume under.
  std::optional<HostRestart> hosts;
  if (!o.host.empty() &&
      (o.maxRestarts > 0 || o.replan || o.onHostLossReplan || o.onHostJoinReplan || o.join)) {
    rt::StatusOr<HostRestart> h = HostRestart::open(o, *m);
    if (!h.isOk()) {
      std::cerr << "strait-run: "
                << (o.replan ? "--replan: " : o.maxRestarts ? "--max-restarts: " : "--on-host-loss: ")
                << h.getStatus().getMessage() << std::endl;
      return 2;
    }
    hosts = h.takeValue();
  }
  // --on-host-join replan and --join (HostJoin.h): hosts that join.
  std::optional<HostJoin> join;
  if (o.onHostJoinReplan || o.join) {
    rt::StatusOr<HostJoin> j = HostJoin::create(o);
    if (!j.isOk()) {
      std::cerr << "strait-run: " << (o.join ? "--join: " : "--on-host-join: ")
                << j.getStatus().getMessage() << std::endl;
      return 2;
    }
    join = j.takeValue();
  }
  const std::chrono::milliseconds hostTimeout(o.timeoutMs);
  const std::string firstResume = o.resumePath;
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  std::string runId = o.runId;
  // The ranks run the plan in `dir` from now on, from `checkpoint`.
  auto adoptPlan = [&](program::PlanManifest next, const std::string &dir,
                       const std::string &checkpoint) {
    if (hosts)
      hosts->setHosts(next);
    m = std::move(next);
    o.planDir = dir;
    o.resumePath = checkpoint;
    if (!threadsGiven)
      o.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                  std::max(1, localRanks(o, *m)));
    rt::Status s = hostLoss ? hostLoss->switched(dir) : rt::Status::ok();
    if (!s.isOk())
      std::cerr << "strait-run: " << s.getMessage() << std::endl;
    return s.isOk() && prepareStore(o, *m);
  };
  int firstAttempt = 0;
  if (o.join) { // announce this host, and start with the plan that takes it
    rt::StatusOr<JoinedPlan> j = joinRunningJob(o, stopSignal);
    rt::StatusOr<program::PlanManifest> next =
        j.isOk() ? rt::loadManifest(j->dir + "/" + o.manifest)
                 : rt::StatusOr<program::PlanManifest>(j.getStatus());
    if (!next.isOk()) {
      std::cerr << "strait-run: " << next.getStatus().getMessage() << std::endl;
      return stopSignal ? 128 + stopSignal
             : next.getStatus().getCode() == rt::StatusCode::InvalidArgument ? 2
                                                                             : 1;
    }
    if (!adoptPlan(next.takeValue(), j->dir, j->checkpoint))
      return 1;
    firstAttempt = j->generation;
    std::cout << "strait-run: host-join: resuming " << localRanks(o, *m) << " of "
              << m->ranks_size() << " rank(s) from " << o.resumePath << " under " << o.planDir
              << std::endl;
  }
  for (int attempt = firstAttempt, restarts = 0;; ++attempt) {
    if (attempt > 0) // a fresh rendezvous: the failed attempt's keys stay behind
      o.runId = runId + "-restart" + std::to_string(attempt);
    // Stops this launcher for good; the other hosts' learn why at once.
    auto leave = [&](int code) {
      if (hosts)
        hosts->leave(attempt, code > 128 ? "the launcher of host " + o.host + " was " +
                                               (code == 128 + SIGINT ? "interrupted"
                                                                     : "terminated")
                                         : "the launcher of host " + o.host + " gave up");
      return code;
    };
    if (!assignRoles())
      return leave(1);
    if (hosts && localRanks(o, *m) == 0) { // a re-plan left this host out
      std::cout << "strait-run: the plan " << o.planDir << " has no rank on host " << o.host
                << "; this launcher is done" << std::endl;
      return 0;
    }
    int failedRank = -1;
    int code = superviseOnce(o, *m, attempt, replan ? &*replan : nullptr,
                             hosts ? &*hosts : nullptr, follow ? &*follow : nullptr, &failedRank,
                             join && o.onHostJoinReplan ? &*join : nullptr);
    if (code > 128)
      return leave(code);
    if (code == 0 && hosts) { // done when every host is, else restart with them
      rt::StatusOr<bool> all = hosts->finish(attempt, hostTimeout, stopSignal);
      if (!all.isOk()) {
        std::cerr << "strait-run: this host's ranks finished, but "
                  << all.getStatus().getMessage() << std::endl;
        return leave(stopSignal ? 128 + stopSignal : 1);
      }
      if (!*all) {
        std::cerr << "strait-run: this host's ranks finished, but another host's failed"
                  << std::endl;
        code = 1;
      }
    }
    if (code == kExitStoppedForReplan && (replan || follow)) {
      // Every rank checkpointed the stop step: resume under the new plan.
      int step = replan ? replan->stopStep() : follow->stopStep;
      std::string dir = replan ? replan->newPlanDir() : jobDir + "/" + follow->plan;
      std::string checkpoint = o.checkpointDir + "/step-" + std::to_string(step);
      if (hosts) {
        // Across machines: nobody failed meanwhile, and the new plan and
        // the checkpoint (rank 0 writes checkpoint.json last) are there.
        rt::StatusOr<std::optional<std::string>> failed = hosts->failure(attempt);
        if (failed.isOk() && *failed) {
          std::cerr << "strait-run: " << **failed << " while the job switched plans; giving up"
                    << std::endl;
          return leave(1);
        }
        auto deadline = std::chrono::steady_clock::now() + hostTimeout;
        while (!(rt::loadManifest(dir + "/" + o.manifest).isOk() &&
                 findCheckpoint(checkpoint).isOk()) &&
               std::chrono::steady_clock::now() < deadline && !stopSignal)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      // A host joins (HostJoin.h): the new plan only if it came, else the
      // running plan resumes from the same checkpoint.
      bool joining = join && isJoinPlan(dir);
      if (joining) {
        rt::StatusOr<bool> go = join->verdict(attempt + 1, replan.has_value(), stopSignal);
        if (!go.isOk()) {
          std::cerr << "strait-run: host-join: " << go.getStatus().getMessage() << std::endl;
          return leave(stopSignal ? 128 + stopSignal : 1);
        }
        if (!*go)
          dir = o.planDir;
      }
      if (follow) {
        follow->stopStep = 0;
        ::unlink(follow->stopFile.c_str());
      }
      rt::StatusOr<program::PlanManifest> next = rt::loadManifest(dir + "/" + o.manifest);
      rt::Status s = next.isOk() ? rt::Status::ok() : next.getStatus();
      if (s.isOk() && replan && dir == o.planDir)
        replan->cancel();
      else if (s.isOk() && replan)
        s = replan->switched();
      if (!s.isOk()) {
        std::cerr << "strait-run: re-plan: " << s.toString()
                  << (follow ? " (--replan with --host needs the job folder on a file system "
                               "every machine shares)"
                             : "")
                  << std::endl;
        return leave(1);
      }
      if (!adoptPlan(next.takeValue(), dir, checkpoint))
        return 1;
      if (joining)
        std::cout << "strait-run: host-join: resuming " << localRanks(o, *m) << " of "
                  << m->ranks_size() << " rank(s) from " << checkpoint << " under " << dir
                  << std::endl;
      else
        std::cout << "strait-run: re-planned: resuming " << m->ranks_size() << " rank(s) from "
                  << checkpoint << " under " << dir << std::endl;
      continue;
    }
    if (code == 1 && join && replan && join->switching()) { // the join is off
      join->abandon();
      replan->cancel();
      std::cout << "strait-run: host-join: the ranks failed before the switch; the joining "
                   "host's launcher gives up (start it again with --join)"
                << std::endl;
    }
    if (code == 1 && follow && isJoinPlan(follow->plan))
      follow->stopStep = 0;
    std::string budget; // with --on-host-loss: each host has --max-restarts
    if (code == 1 && hostLoss) {
      std::string failedHost;
      if (hosts) {
        rt::StatusOr<std::optional<std::string>> f = hosts->failure(attempt);
        if (f.isOk() && *f)
          failedHost = HostLoss::hostOfFailure(**f);
      } else if (failedRank >= 0 && failedRank < m->ranks_size()) {
        failedHost = m->ranks(failedRank).host();
      }
      rt::StatusOr<std::optional<HostLossSwitch>> lost = hostLoss->afterFailure(
          o.planDir, o.checkpointDir, firstResume, attempt, failedHost,
          hosts ? &*hosts : nullptr, stopSignal);
      rt::StatusOr<program::PlanManifest> next =
          lost.isOk() && *lost ? rt::loadManifest((*lost)->dir + "/" + o.manifest)
                               : rt::StatusOr<program::PlanManifest>(rt::notFound(""));
      if (!lost.isOk() || (*lost && !next.isOk())) {
        std::cerr << "strait-run: --on-host-loss: "
                  << (lost.isOk() ? next.getStatus() : lost.getStatus()).getMessage()
                  << std::endl;
        return leave(stopSignal ? 128 + stopSignal : 1);
      }
      if (*lost) {
        rt::Status s = replan ? replan->adopt((*lost)->dir) : rt::Status::ok();
        if (!s.isOk() || !adoptPlan(next.takeValue(), (*lost)->dir, (*lost)->checkpoint)) {
          std::cerr << "strait-run: --on-host-loss: " << s.getMessage() << std::endl;
          return leave(1);
        }
        std::cout << "strait-run: host-loss: resuming " << localRanks(o, *m) << " of "
                  << m->ranks_size() << " rank(s) from "
                  << (o.resumePath.empty() ? "the start" : o.resumePath) << " under "
                  << o.planDir << std::endl;
        continue;
      }
      if (!failedHost.empty())
        budget = "host " + failedHost + "'s failure " +
               std::to_string(hostLoss->failures(failedHost)) + " of " +
               std::to_string(o.maxRestarts + 1) + " before it is lost";
    }
    if (code != 1 || (budget.empty() && restarts >= o.maxRestarts)) {
      rt::StatusOr<std::optional<std::string>> why = std::optional<std::string>();
      if (hosts && code == 1)
        why = hosts->failure(attempt);
      if (why.isOk() && *why)
        std::cerr << "strait-run: giving up after " << restarts << " restart(s) (--max-restarts "
                  << o.maxRestarts << "): " << **why << std::endl;
      if (code == 0 && join)
        join->ended();
      return code == 0 ? mergeRankTraces(o, *m) : leave(code);
    }
    ++restarts;
    if (hosts) {
      rt::StatusOr<CheckpointRef> newest = findCheckpoint(o.checkpointDir);
      rt::StatusOr<int64_t> step =
          hosts->agreeStep(attempt, newest.isOk() ? newest->step : 0, hostTimeout, stopSignal);
      rt::StatusOr<CheckpointRef> at =
          step.isOk() && *step > 0
              ? findCheckpoint(o.checkpointDir + "/step-" + std::to_string(*step))
              : rt::StatusOr<CheckpointRef>(rt::notFound("none"));
      if (!step.isOk() || (*step > 0 && !at.isOk())) {
        std::cerr << "strait-run: cannot restart with the other hosts: "
                  << (step.isOk() ? at.getStatus() : step.getStatus()).getMessage() << std::endl;
        return leave(stopSignal ? 128 + stopSignal : 1);
      }
      o.resumePath = *step > 0 ? at->dir : firstResume;
      std::cerr << "strait-run: restarting the ranks of host " << o.host << " from "
                << (o.resumePath.empty() ? "the start" : o.resumePath) << " (step " << *step
                << (*step > 0 ? ", the newest checkpoint every host finds complete"
                              : ", no checkpoint every host finds complete")
                << "), restart " << restarts
                << (budget.empty() ? " of " + std::to_string(o.maxRestarts) : " (" + budget + ")")
                << std::endl;
      continue;
    }
    rt::StatusOr<CheckpointRef> c = findCheckpoint(o.checkpointDir);
    if (c.isOk()) {
      o.resumePath = c->dir;
      std::cerr << "strait-run: restarting every rank from " << c->dir << " (step " << c->step
                << "), restart " << restarts
                << (budget.empty() ? " of " + std::to_string(o.maxRestarts) : " (" + budget + ")")
                << std::endl;
    } else {
      std::cerr << "strait-run: restarting every rank from "
                << (o.resumePath.empty() ? "the start" : o.resumePath) << " ("
                << c.getStatus().getMessage() << "), restart " << restarts
                << (budget.empty() ? " of " + std::to_string(o.maxRestarts) : " (" + budget + ")")
                << std::endl;
    }
  }
}

} // namespace run
} // namespace strait
