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
#include "HostLoss.h"
#include "HostRestart.h"
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

/// One "rank R iteration N/M ..." line of a worker.
struct Progress {
  int steps = 0;
  double ms = 0;
  bool hasLoss = false;
  double loss = 0;
  std::string lr; // as the worker printed it (the schedule's value this step)
  std::string itemName;
  int64_t items = 0;
  std::string sent, recv;
  std::string links; // "link PEER:BYTES:SECONDS,..." (--replan)
  bool outerStep = false; // the local-steps outer step ran after this iteration
};

bool parseProgress(const std::string &line, int &rank, int &step, Progress &p) {
  std::istringstream in(line);
  std::string w, frac;
  if (!(in >> w) || w != "rank" || !(in >> rank) || !(in >> w) || w != "iteration" ||
      !(in >> frac))
    return false;
  if (std::sscanf(frac.c_str(), "%d/%d", &step, &p.steps) != 2)
    return false;
  while (in >> w) {
    if (w == "time")
      in >> p.ms;
    else if (w == "loss")
      p.hasLoss = static_cast<bool>(in >> p.loss);
    else if (w == "lr")
      in >> p.lr;
    else if (w == "tokens" || w == "samples") {
      p.itemName = w;
      in >> p.items;
    } else if (w == "outer-step")
      p.outerStep = true;
    else if (w == "sent")
      in >> p.sent;
    else if (w == "recv")
      in >> p.recv;
    else if (w == "link")
      in >> p.links;
  }
  return true;
}

std::string humanBytes(const std::string &list) {
  // "1:16384,2:0" -> "1:16.0KiB,2:0B"
  std::string out;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    size_t colon = item.find(':');
    if (colon == std::string::npos) {
      out += item;
      continue;
    }
    double b = std::atof(item.c_str() + colon + 1);
    const char *units[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (b >= 1024 && u < 3) {
      b /= 1024;
      ++u;
    }
    char buf[64];
    std::snprintf(buf, sizeof(buf), u ? "%.1f%s" : "%.0f%s", b, units[u]);
    out += (out.empty() ? "" : ",") + item.substr(0, colon + 1) + buf;
  }
  return out;
}

/// Follows the rank logs and prints a merged line per completed step.
class ProgressMerger {
public:
  ProgressMerger(const program::PlanManifest &m, bool quiet) : quiet(quiet) {
    bool layout = false;
    for (const auto &r : m.ranks())
      layout |= r.stage() > 0 || r.replica() != 0;
    for (const auto &r : m.ranks())
      replicaOf[r.rank()] = layout ? r.replica() : r.rank();
  }
  void add(int rank, const std::string &log) { files.push_back({rank, log, 0, ""}); }
  /// Called with every step once all ranks reported it (--replan).
  std::function<void(int, const std::map<int, Progress> &)> onStep;
  void poll(bool final) {
    for (File &f : files) {
      std::ifstream in(f.path, std::ios::binary);
      if (!in)
        continue;
      in.seekg(static_cast<std::streamoff>(f.offset));
      std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      f.offset += chunk.size();
      f.partial += chunk;
      for (size_t nl; (nl = f.partial.find('\n')) != std::string::npos;) {
        std::string line = f.partial.substr(0, nl);
        f.partial.erase(0, nl + 1);
        int rank, step;
        Progress p;
        if (parseProgress(line, rank, step, p) && rank == f.rank) {
          pending[step][rank] = p;
          if (latestTopk.count(rank))
            topkAt[step][rank] = latestTopk[rank];
        }
        // "rank R eval N/M time MS [loss L] [tokens|samples K]": --eval-data.
        std::string evalPrefix = "rank " + std::to_string(f.rank) + " eval ";
        if (line.rfind(evalPrefix, 0) == 0) {
          std::istringstream in(line.substr(evalPrefix.size()));
          std::string frac, w;
          in >> frac;
          auto &slot = evals[std::atoi(frac.c_str())];
          slot.first = frac;
          EvalReport &e = slot.second[f.rank];
          while (in >> w) {
            if (w == "loss")
              e.hasLoss = static_cast<bool>(in >> e.loss);
            else if (w == "tokens" || w == "samples") {
              e.itemName = w;
              in >> e.items;
            }
          }
        }
        // "rank R topk ...": the adaptive top-k ratios after R's next
        // iteration (Executor::run prints them before the iteration line).
        std::string prefix = "rank " + std::to_string(f.rank) + " topk ";
        if (line.rfind(prefix, 0) == 0)
          latestTopk[f.rank] = line.substr(prefix.size());
      }
    }
    for (auto it = evals.begin(); it != evals.end();) {
      if (it->second.second.size() < files.size() && !final) {
        ++it;
        continue;
      }
      printEval(it->second.first, it->second.second);
      it = evals.erase(it);
    }
    while (!pending.empty() &&
           (pending.begin()->second.size() == files.size() || final)) {
      print(pending.begin()->first, pending.begin()->second);
      if (onStep && pending.begin()->second.size() == files.size())
        onStep(pending.begin()->first, pending.begin()->second);
      pending.erase(pending.begin());
    }
  }

private:
  struct File {
    int rank;
    std::string path;
    size_t offset;
    std::string partial;
  };
  struct EvalReport {
    bool hasLoss = false;
    double loss = 0;
    std::string itemName;
    int64_t items = 0;
  };
  /// The mean loss over the ranks that report one (each replica's last
  /// stage) and the items of each replica once (its ranks share a batch).
  struct Totals {
    double loss = 0;
    int losses = 0;
    std::string itemName;
    int64_t items = 0;
  };
  template <typename Report> Totals totals(const std::map<int, Report> &ranks) {
    Totals t;
    std::map<int, int64_t> itemsPerReplica;
    for (const auto &[rank, r] : ranks) {
      if (r.hasLoss) {
        t.loss += r.loss;
        ++t.losses;
      }
      if (r.items > 0) {
        t.itemName = r.itemName;
        int64_t &n = itemsPerReplica[replicaOf.count(rank) ? replicaOf[rank] : rank];
        n = std::max(n, r.items);
      }
    }
    for (const auto &kv : itemsPerReplica)
      t.items += kv.second;
    if (t.losses)
      t.loss /= t.losses;
    return t;
  }
  /// "eval after step N/M: loss L (K tokens)".
  void printEval(const std::string &frac, const std::map<int, EvalReport> &ranks) {
    if (quiet)
      return;
    Totals t = totals(ranks);
    std::ostringstream line;
    line << "eval after step " << frac << ":";
    if (t.losses)
      line << " loss " << t.loss;
    else // a machine whose ranks run no last pipeline stage (--host)
      line << " no loss on this machine's ranks (the last pipeline stage's machine prints it)";
    if (t.items > 0)
      line << " (" << t.items << " " << t.itemName << ")";
    std::cout << line.str() << std::endl;
  }
  // step N -> ("N/M", rank -> report)
  std::map<int, std::pair<std::string, std::map<int, EvalReport>>> evals;
  void print(int step, const std::map<int, Progress> &ranks) {
    if (quiet || ranks.empty())
      return;
    double ms = 0;
    std::string lr;
    for (const auto &kv : ranks) {
      ms = std::max(ms, kv.second.ms);
      if (lr.empty())
        lr = kv.second.lr;
    }
    Totals sum = totals(ranks);
    std::ostringstream line;
    line << "step " << step << "/" << ranks.begin()->second.steps;
    if (sum.losses)
      line << " loss " << sum.loss;
    if (sum.items > 0)
      line << " " << sum.itemName << "/s "
           << static_cast<int64_t>(sum.items / std::max(ms, 1e-3) * 1000);
    char t[32];
    std::snprintf(t, sizeof(t), ms < 10 ? "%.3f" : "%.1f", ms);
    line << " time " << t << " ms";
    if (!lr.empty())
      line << " lr " << lr;
    if (std::any_of(ranks.begin(), ranks.end(), [](const auto &kv) { return kv.second.outerStep; }))
      line << " outer-step";
    for (const auto &kv : ranks)
      if (!kv.second.sent.empty())
        line << " | rank" << kv.first << " sent " << humanBytes(kv.second.sent) << " recv "
             << humanBytes(kv.second.recv);
    for (const auto &[rank, text] : topkAt[step])
      line << " | rank" << rank << " topk " << text;
    topkAt.erase(step);
    std::cout << line.str() << std::endl;
  }
  bool quiet;
  std::vector<File> files;
  std::map<int, std::map<int, Progress>> pending;
  std::map<int, std::string> latestTopk;              // rank -> its last topk line
  std::map<int, std::map<int, std::string>> topkAt;   // step -> rank -> topk text
  std::map<int, int> replicaOf;
};

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
                  FollowedReplan *follow = nullptr, int *failedRank = nullptr) {
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
        std::cout << "strait-run: re-plan (host " << m.ranks(0).host()
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
    std::string refused = !hosts.count(o.host) ? "no rank of the plan is on it"
                          : options.runId.empty()
                              ? "--run-id ID is required (the same on every machine)"
                              : "";
    if (!refused.empty()) {
      std::string names;
      for (const std::string &h : hosts)
        names += (names.empty() ? "" : ", ") + h;
      std::cerr << "strait-run: --host " << o.host << ": " << refused
                << " (the plan's hosts: " << names << ")" << std::endl;
      return 2;
    }
    // A run id is used once per store: its keys stay (HostRestart.h).
    rt::Status claimed = claimRunId(o, *m);
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
  if (o.replan && !o.host.empty() && m->ranks(0).host() != o.host) {
    if (o.checkpointDir.empty())
      o.checkpointDir = o.planDir + "/replan-checkpoints";
    follow.emplace();
    char *abs = ::realpath(o.logDir.c_str(), nullptr);
    follow->stopFile = std::string(abs ? abs : o.logDir.c_str()) + "/replan.stop";
    std::free(abs);
    ::unlink(follow->stopFile.c_str());
    o.replanStopFile = follow->stopFile;
  } else if (o.replan) {
    if (o.checkpointDir.empty())
      o.checkpointDir = o.planDir + "/replan-checkpoints";
    rt::StatusOr<ReplanMonitor> r = ReplanMonitor::create(o);
    if (!r.isOk()) {
      std::cerr << "strait-run: --replan: " << r.getStatus().getMessage() << std::endl;
      return 2;
    }
    replan = r.takeValue();
    replan->clearStop();
    o.replanStopFile = replan->stopFile();
  }
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
  if (!o.host.empty() && (o.maxRestarts > 0 || o.replan || o.onHostLossReplan)) {
    rt::StatusOr<HostRestart> h = HostRestart::open(o, *m);
    if (!h.isOk()) {
      std::cerr << "strait-run: "
                << (o.replan ? "--replan: " : o.maxRestarts ? "--max-restarts: " : "--on-host-loss: ")
                << h.getStatus().getMessage() << std::endl;
      return 2;
    }
    hosts = h.takeValue();
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
  for (int attempt = 0, restarts = 0;; ++attempt) {
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
    if (hosts && localRanks(o, *m) == 0) { // a re-plan left this host out
      std::cout << "strait-run: the plan " << o.planDir << " has no rank on host " << o.host
                << "; this launcher is done" << std::endl;
      return 0;
    }
    int failedRank = -1;
    int code = superviseOnce(o, *m, attempt, replan ? &*replan : nullptr,
                             hosts ? &*hosts : nullptr, follow ? &*follow : nullptr, &failedRank);
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
      if (follow) {
        follow->stopStep = 0;
        ::unlink(follow->stopFile.c_str());
      }
      rt::StatusOr<program::PlanManifest> next = rt::loadManifest(dir + "/" + o.manifest);
      rt::Status s = !next.isOk() ? next.getStatus()
                     : replan     ? replan->switched()
                                  : rt::Status::ok();
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
      std::cout << "strait-run: re-planned: resuming " << m->ranks_size() << " rank(s) from "
                << checkpoint << " under " << dir << std::endl;
      continue;
    }
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
