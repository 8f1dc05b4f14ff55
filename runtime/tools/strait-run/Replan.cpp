//===- Replan.cpp - Re-planning when links change -------------------------===//
//
// See Replan.h and docs/runtime.md, "Re-planning when links change".
//
//===----------------------------------------------------------------------===//
#include "Replan.h"
#include "Checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace strait {
namespace run {

using rt::Status;
using rt::StatusOr;

std::string formatLinkTimings(const std::map<int, rt::LinkTiming> &timings) {
  std::ostringstream out;
  for (const auto &[peer, t] : timings) {
    if (out.tellp() > 0)
      out << ",";
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%d:%llu:%.6f", peer,
                  static_cast<unsigned long long>(t.bytes), t.seconds);
    out << buf;
  }
  return timings.empty() ? "-" : out.str();
}

bool parseLinkTimings(const std::string &text, std::map<int, rt::LinkTiming> &out) {
  if (text == "-")
    return true;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    int peer;
    unsigned long long bytes;
    double seconds;
    if (std::sscanf(item.c_str(), "%d:%llu:%lf", &peer, &bytes, &seconds) != 3)
      return false;
    rt::LinkTiming &t = out[peer];
    t.bytes += bytes;
    t.seconds += seconds;
    ++t.transfers;
  }
  return true;
}

int ReplanControl::allowed(int first) const {
  if (lease < 0)
    return std::numeric_limits<int>::max();
  int granted = lease > 0 ? lease : first + kReplanFirstLease;
  return stop > 0 ? std::max(stop, granted) : granted;
}

ReplanControl readReplanControl(const std::string &path) {
  std::ifstream in(path);
  ReplanControl c;
  if (!(in >> c.stop))
    return {};
  if (!(in >> c.lease))
    c.lease = 0;
  return c;
}

bool writeReplanControl(const std::string &path, const ReplanControl &c) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << c.stop << " " << c.lease << "\n";
    if (!out)
      return false;
  }
  return ::rename(tmp.c_str(), path.c_str()) == 0;
}

StatusOr<ReplanControl> awaitReplanLease(const RunOptions &o, int first, int done) {
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    ReplanControl c = readReplanControl(o.replanStopFile);
    if ((c.stop > 0 && c.stop <= done) || done >= o.steps || c.allowed(first) > done)
      return c;
    double waited = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - start).count();
    if (waited > o.timeoutMs)
      return rt::unavailable("rank " + std::to_string(o.rank) + " waited " +
                             std::to_string(o.timeoutMs) + " ms (--timeout-ms) for its "
                             "launcher to allow a step after " + std::to_string(done) +
                             " (--replan's lease in " + o.replanStopFile +
                             "): is the launcher running?");
    ::usleep(1000);
  }
}

namespace {

//===- A small JSON reader (straitc.json) ---------------------------------===//

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  double number = 0;
  bool boolean = false;
  std::string text;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> fields;
  const Json *get(const std::string &key) const {
    for (const auto &f : fields)
      if (f.first == key)
        return &f.second;
    return nullptr;
  }
};

class JsonReader {
public:
  explicit JsonReader(const std::string &t) : t(t) {}
  bool parse(Json &out) {
    if (!value(out, 0))
      return false;
    space();
    return i == t.size();
  }
  size_t where() const { return i; }

private:
  const std::string &t;
  size_t i = 0;
  void space() {
    while (i < t.size() && std::isspace(static_cast<unsigned char>(t[i])))
      ++i;
  }
  bool literal(const char *word) {
    size_t n = std::strlen(word);
    if (t.compare(i, n, word) != 0)
      return false;
    i += n;
    return true;
  }
  bool string(std::string &out) {
    if (t[i] != '"')
      return false;
    for (++i; i < t.size() && t[i] != '"'; ++i) {
      if (t[i] != '\\') {
        out += t[i];
        continue;
      }
      if (++i >= t.size())
        return false;
      char c = t[i];
      if (c == 'n')
        out += '\n';
      else if (c == 't')
        out += '\t';
      else if (c == 'u') { // straitc writes ASCII paths; keep \uXXXX below 0x80
        if (i + 4 >= t.size())
          return false;
        out += static_cast<char>(std::strtol(t.substr(i + 1, 4).c_str(), nullptr, 16));
        i += 4;
      } else
        out += c; // \" \\ \/
    }
    if (i >= t.size())
      return false;
    ++i;
    return true;
  }
  bool value(Json &out, int depth) {
    space();
    if (i >= t.size() || depth > 32)
      return false;
    char c = t[i];
    if (c == '{') {
      out.kind = Json::Object;
      ++i;
      space();
      if (i < t.size() && t[i] == '}')
        return ++i, true;
      for (;;) {
        space();
        std::string key;
        if (i >= t.size() || !string(key))
          return false;
        space();
        if (i >= t.size() || t[i++] != ':')
          return false;
        out.fields.emplace_back(key, Json());
        if (!value(out.fields.back().second, depth + 1))
          return false;
        space();
        if (i < t.size() && t[i] == ',') {
          ++i;
          continue;
        }
        return i < t.size() && t[i++] == '}';
      }
    }
    if (c == '[') {
      out.kind = Json::Array;
      ++i;
      space();
      if (i < t.size() && t[i] == ']')
        return ++i, true;
      for (;;) {
        out.items.emplace_back();
        if (!value(out.items.back(), depth + 1))
          return false;
        space();
        if (i < t.size() && t[i] == ',') {
          ++i;
          continue;
        }
        return i < t.size() && t[i++] == ']';
      }
    }
    if (c == '"') {
      out.kind = Json::String;
      return string(out.text);
    }
    if (literal("true") || literal("false")) {
      out.kind = Json::Bool;
      out.boolean = t[i - 1] == 'e' && t[i - 2] == 'u';
      return true;
    }
    if (literal("null"))
      return true;
    char *end = nullptr;
    out.number = std::strtod(t.c_str() + i, &end);
    if (end == t.c_str() + i)
      return false;
    out.kind = Json::Number;
    i = end - t.c_str();
    return true;
  }
};

std::string absolute(const std::string &path) {
  if (char *abs = ::realpath(path.c_str(), nullptr)) {
    std::string out = abs;
    std::free(abs);
    return out;
  }
  return path;
}

bool isFile(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string mbits(double bytesPerSecond) {
  char buf[32];
  double m = bytesPerSecond * 8 / 1e6;
  std::snprintf(buf, sizeof(buf), m >= 1000 ? "%.2f Gbit/s" : m >= 10 ? "%.1f Mbit/s" : "%.2f Mbit/s",
                m >= 1000 ? m / 1000 : m);
  return buf;
}

} // namespace

std::string planSummary(const std::string &log) {
  std::ifstream in(log);
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("plan (", 0) == 0 || line.rfind("straitc: compressed", 0) == 0 ||
        line.rfind("  stage ", 0) == 0)
      out += "strait-run:   " + line + "\n";
  return out;
}

/// The JSON object of file `path`; NotFound (`missing` after the path) when
/// it does not exist.
static StatusOr<Json> readJsonObject(const std::string &path, const std::string &missing) {
  std::ifstream in(path);
  if (!in)
    return rt::notFound(path + " does not exist" + missing);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Json root;
  JsonReader reader(text);
  if (!reader.parse(root) || root.kind != Json::Object)
    return rt::invalidArgument(path + ": not a JSON object (at byte " +
                               std::to_string(reader.where()) + ")");
  return root;
}

StatusOr<PlanFacts> readPlanFacts(const std::string &dir) {
  std::string path = dir + "/plan.json";
  STRAIT_ASSIGN_OR_RETURN(Json root, readJsonObject(path, ""));
  PlanFacts f;
  const Json *batch = root.get("global_batch"), *micro = root.get("micro_batches"),
             *iter = root.get("iteration_s"), *stages = root.get("stages");
  if (!batch || batch->kind != Json::Number || !micro || micro->kind != Json::Number ||
      !iter || iter->kind != Json::Number || !stages || stages->kind != Json::Array)
    return rt::invalidArgument(path + ": field 'global_batch', 'micro_batches', 'iteration_s' "
                               "or 'stages' is missing or has the wrong type");
  f.globalBatch = static_cast<int64_t>(batch->number);
  f.microBatches = static_cast<int>(micro->number);
  f.iterationS = iter->number;
  for (const Json &st : stages->items) {
    const Json *devices = st.get("devices");
    if (!devices || devices->kind != Json::Array)
      return rt::invalidArgument(path + ": a stage's field 'devices' is missing");
    f.stageDevices.push_back(devices->items.size());
  }
  return f;
}

std::string jobFolderOf(const std::string &planDir) {
  std::string root = absolute(planDir);
  size_t slash = root.rfind('/');
  if (slash != std::string::npos && slash > 0 &&
      (root.compare(slash, 8, "/replan-") == 0 || root.compare(slash, 11, "/host-loss-") == 0 ||
       root.compare(slash, 11, "/host-join-") == 0))
    return root.substr(0, slash);
  return root;
}

std::string findStraitc(const RunOptions &o, const JobRecord &record) {
  if (!o.straitcPath.empty())
    return o.straitcPath;
  // Next to strait-run (an install), then the build tree's bin/, then the
  // recorded argv[0], then $PATH.
  std::string self = absolute(o.executable);
  std::string dir = self.substr(0, self.rfind('/'));
  for (std::string c : {dir + "/straitc", dir + "/../../../bin/straitc",
                        record.argv[0][0] == '/' ? record.argv[0]
                                                 : record.cwd + "/" + record.argv[0]})
    if (isFile(c))
      return absolute(c);
  return "straitc";
}

StatusOr<JobRecord> runRecordedStraitc(const std::string &straitc, const JobRecord &record,
                                       const std::string &cluster, const std::string &dir,
                                       const std::string &evaluatePlan, double *seconds) {
  // The recorded straitc command with the new cluster and the new folder,
  // in the folder it ran in; a recorded --evaluate-plan (a re-plan's
  // command) is dropped, `evaluatePlan` (when given) added.
  std::vector<std::string> args = {straitc};
  for (size_t i = 1; i < record.argv.size(); ++i) {
    const std::string &a = record.argv[i];
    bool flag = a == "--evaluate-plan" || a == "-evaluate-plan";
    if (flag || a.rfind("--evaluate-plan=", 0) == 0 || a.rfind("-evaluate-plan=", 0) == 0) {
      i += flag;
      continue;
    }
    if ((a == "--cluster" || a == "-cluster" || a == "-o") && i + 1 < record.argv.size()) {
      args.push_back(a);
      args.push_back(a == "-o" ? dir : cluster);
      ++i;
    } else if (a.rfind("--cluster=", 0) == 0 || a.rfind("-cluster=", 0) == 0) {
      args.push_back("--cluster=" + cluster);
    } else if (a.rfind("-o=", 0) == 0 || (a.rfind("-o", 0) == 0 && a.size() > 2 && a[2] != '-')) {
      args.push_back("-o=" + dir);
    } else {
      args.push_back(a);
    }
  }
  if (!evaluatePlan.empty())
    args.push_back("--evaluate-plan=" + evaluatePlan);
  std::string log = dir + "/straitc.log";
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    if (!record.cwd.empty() && ::chdir(record.cwd.c_str()) != 0)
      std::cerr << "strait-run: cannot enter " << record.cwd << ": " << std::strerror(errno)
                << std::endl;
    std::vector<char *> argv;
    for (auto &a : args)
      argv.push_back(&a[0]);
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::cerr << "strait-run: cannot run " << args[0] << ": " << std::strerror(errno)
              << std::endl;
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0)
    return rt::unavailable(
        "straitc failed (" +
        (pid < 0 ? std::string(std::strerror(errno))
                 : "exit " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status)
                                                             : 128 + WTERMSIG(status))) +
        "; " + straitc + ", log " + log + ")");
  if (seconds)
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return readJobRecord(dir);
}

StatusOr<JobRecord> readJobRecord(const std::string &dir) {
  std::string path = dir + "/straitc.json";
  STRAIT_ASSIGN_OR_RETURN(Json root,
                          readJsonObject(path, ": --replan and --on-host-loss need the record "
                                               "straitc writes with every job compiled with "
                                               "--cluster (recompile the job)"));
  auto field = [&](const Json &o, const char *key, Json::Kind kind,
                   const std::string &where) -> StatusOr<const Json *> {
    const Json *v = o.get(key);
    if (!v || v->kind != kind)
      return rt::invalidArgument(path + ": " + where + "field '" + key + "' is missing or has "
                                 "the wrong type");
    return v;
  };
  JobRecord r;
  STRAIT_ASSIGN_OR_RETURN(const Json *argv, field(root, "argv", Json::Array, ""));
  for (const Json &a : argv->items)
    r.argv.push_back(a.text);
  if (r.argv.empty())
    return rt::invalidArgument(path + ": field 'argv' is empty");
  STRAIT_ASSIGN_OR_RETURN(const Json *cwd, field(root, "cwd", Json::String, ""));
  r.cwd = cwd->text;
  STRAIT_ASSIGN_OR_RETURN(const Json *cluster, field(root, "cluster_file", Json::String, ""));
  r.clusterFile = cluster->text[0] == '/' ? cluster->text : absolute(dir) + "/" + cluster->text;
  STRAIT_ASSIGN_OR_RETURN(const Json *pred,
                          field(root, "predicted_iteration_s", Json::Number, ""));
  r.predictedIterationS = pred->number;
  if (const Json *e = root.get("evaluated_plan_iteration_s")) {
    if (e->kind != Json::Number)
      return rt::invalidArgument(path + ": field 'evaluated_plan_iteration_s' is not a number");
    r.evaluatedIterationS = e->number;
  }
  STRAIT_ASSIGN_OR_RETURN(const Json *ranks, field(root, "ranks", Json::Array, ""));
  for (const Json &x : ranks->items) {
    STRAIT_ASSIGN_OR_RETURN(const Json *d, field(x, "device", Json::String, "a rank's "));
    STRAIT_ASSIGN_OR_RETURN(const Json *h, field(x, "host", Json::String, "a rank's "));
    // Records of older straitc lack these.
    auto number = [&](const char *name) {
      const Json *v = x.get(name);
      return v && v->kind == Json::Number ? v->number : 0.0;
    };
    r.ranks.push_back({d->text, h->text, number("memory_bytes"), number("error_feedback_bytes")});
  }
  STRAIT_ASSIGN_OR_RETURN(const Json *links, field(root, "links", Json::Array, ""));
  for (const Json &x : links->items) {
    STRAIT_ASSIGN_OR_RETURN(const Json *pair, field(x, "ranks", Json::Array, "a link's "));
    STRAIT_ASSIGN_OR_RETURN(const Json *bw, field(x, "bandwidth_bytes_s", Json::Number, "a link's "));
    STRAIT_ASSIGN_OR_RETURN(const Json *lat, field(x, "latency_s", Json::Number, "a link's "));
    if (pair->items.size() != 2)
      return rt::invalidArgument(path + ": a link's field 'ranks' must hold two ranks");
    JobRecord::Link l;
    l.a = static_cast<int>(pair->items[0].number);
    l.b = static_cast<int>(pair->items[1].number);
    l.bandwidth = bw->number;
    l.latency = lat->number;
    if (l.a < 0 || l.b < 0 || l.a >= int(r.ranks.size()) || l.b >= int(r.ranks.size()) ||
        !(l.bandwidth > 0))
      return rt::invalidArgument(path + ": a link names a rank outside 0.." +
                                 std::to_string(r.ranks.size() - 1) +
                                 " or has no positive bandwidth");
    if (l.a > l.b)
      std::swap(l.a, l.b);
    r.links.push_back(l);
  }
  return r;
}

StatusOr<ReplanMonitor> ReplanMonitor::create(const RunOptions &o) {
  if (!(o.replanFactor > 1) || !std::isfinite(o.replanFactor))
    return rt::invalidArgument("--replan-factor must be a number above 1 (a link off by more "
                               "than that factor counts)");
  if (o.replanAfter < 1 || o.replanWindow < 1 || o.replanMax < 0)
    return rt::invalidArgument("--replan-after and --replan-window must be at least 1, "
                               "--replan-max at least 0");
  ReplanMonitor m;
  m.options = o;
  m.planDir = o.planDir;
  STRAIT_ASSIGN_OR_RETURN(m.record, readJobRecord(o.planDir));
  m.options.straitcPath = findStraitc(o, m.record);
  m.stopPath = absolute(o.logDir) + "/replan.stop";
  if (m.record.links.empty() && o.replan)
    std::cout << "strait-run: --replan: the plan has no link between hosts; nothing to watch"
              << std::endl;
  return m;
}

void ReplanMonitor::clearStop() {
  ::unlink(stopPath.c_str());
  stopAt = 0;
}

void ReplanMonitor::extendLease(int step, double ms) {
  // A tenth of a second of steps ahead of the last merged one, at least 3 (the
  // stop step is at least the lease: 3 slow steps after the decision, as
  // before the lease) and at most 8 (the stop step comes at most 8 steps
  // after a decision; steps under 12 ms may wait briefly for the launcher's
  // next extension). A decision comes after two merged steps or more, when
  // the lease already exceeds the implicit one (kReplanFirstLease after the
  // first step), so no rank is beyond it either.
  int ahead = 3;
  if (ms > 0)
    ahead = std::clamp(static_cast<int>(std::ceil(100.0 / ms)), 3, 8);
  int lease = step + ahead;
  if (lease <= leaseGranted)
    return;
  if (!writeReplanControl(stopPath, {0, lease})) {
    std::cout << "strait-run: --replan: cannot write " << stopPath << ": "
              << std::strerror(errno) << std::endl;
    return;
  }
  leaseGranted = lease;
}

bool ReplanMonitor::observe(const StepReport &step, int lastStep) {
  if (stopAt > 0)
    return false;
  double ms = 0;
  for (const auto &kv : step.ms)
    ms = std::max(ms, kv.second);
  extendLease(step.step, ms); // also with nothing to watch: the ranks wait for it
  lastMerged = std::max(lastMerged, step.step);
  if (ms > 0)
    lastStepMs = ms;
  if (record.links.empty() || !options.replan)
    return false;
  if (skipUntil == 0)
    skipUntil = step.step; // the first step of a run allocates: not a sample
  if (step.step <= skipUntil)
    return false;
  windowMs.push_back(ms);
  for (const auto &l : record.links) {
    // Both directions of the pair: bytes over the time they took.
    rt::LinkTiming sum;
    for (auto [from, to] : {std::pair<int, int>{l.a, l.b}, {l.b, l.a}}) {
      auto r = step.links.find(from);
      if (r == step.links.end())
        continue;
      auto t = r->second.find(to);
      if (t == r->second.end())
        continue;
      sum.bytes += t->second.bytes;
      sum.seconds += t->second.seconds;
    }
    if (sum.bytes > 0 && sum.seconds > 0)
      window[{l.a, l.b}].throughput.push_back(sum.bytes / sum.seconds);
  }
  if (++windowSteps < options.replanWindow)
    return false;
  return closeWindow(step.step, lastStep);
}

bool ReplanMonitor::closeWindow(int step, int lastStep) {
  double ms = median(windowMs);
  lastWindowMs = ms;
  std::map<std::pair<int, int>, double> measured;
  std::string why;
  bool trigger = false;
  for (const auto &l : record.links) {
    std::pair<int, int> pair{l.a, l.b};
    const std::vector<double> &samples = window[pair].throughput;
    // A window needs a timed transfer in at least half of its steps.
    if (int(samples.size()) * 2 < options.replanWindow) {
      if (!warnedNoSample[pair])
        std::cout << "strait-run: --replan: link " << l.a << "-" << l.b << " ("
                  << record.ranks[l.a].host << "-" << record.ranks[l.b].host
                  << ") carried no timed transfer (none of " << rt::kLinkTimingMinBytes / 1024
                  << " KiB or more) in most steps of the window ending at step " << step
                  << ": no estimate" << std::endl;
      warnedNoSample[pair] = true;
      outside[pair] = 0;
      continue;
    }
    double bw = median(samples);
    measured[pair] = bw;
    // Against the plan's bandwidth, or against what a declined re-plan saw.
    double base = declinedAt.count(pair) ? declinedAt[pair] : l.bandwidth;
    double ratio = bw / base;
    bool off = ratio < 1 / options.replanFactor || ratio > options.replanFactor;
    outside[pair] = off ? outside[pair] + 1 : 0;
    if (outside[pair] >= options.replanAfter) {
      trigger = true;
      char buf[64];
      std::snprintf(buf, sizeof(buf), " (x%.3g)", bw / l.bandwidth);
      why += (why.empty() ? "" : "; ") + std::string("link ") + std::to_string(l.a) + "-" +
             std::to_string(l.b) + " (" + record.ranks[l.a].host + "-" +
             record.ranks[l.b].host + ") delivers " + mbits(bw) + ", the plan assumed " +
             mbits(l.bandwidth) + buf + " for " + std::to_string(outside[pair]) +
             " windows of " + std::to_string(options.replanWindow) + " steps";
    }
  }
  window.clear();
  windowMs.clear();
  windowSteps = 0;
  if (!trigger)
    return false;
  for (auto &kv : outside)
    kv.second = 0;
  if (replans >= options.replanMax) {
    std::cout << "strait-run: --replan: " << why << "; not re-planning (--replan-max "
              << options.replanMax << " reached)" << std::endl;
    return false;
  }
  return replan(step, lastStep, measured, why);
}

/// The job's --local-steps H (1 without), from its recorded command.
static int localStepsOf(const JobRecord &r) {
  int h = 1;
  for (size_t i = 1; i < r.argv.size(); ++i) {
    const std::string &a = r.argv[i];
    for (const char *flag : {"--local-steps", "-local-steps"}) {
      std::string f = flag;
      if (a == f && i + 1 < r.argv.size())
        h = std::atoi(r.argv[i + 1].c_str());
      else if (a.rfind(f + "=", 0) == 0)
        h = std::atoi(a.c_str() + f.size() + 1);
    }
  }
  return std::max(1, h);
}

bool ReplanMonitor::replan(int step, int lastStep,
                           const std::map<std::pair<int, int>, double> &measured,
                           const std::string &why) {
  ++replans;
  int stop = earliestStop(step);
  std::cout << "strait-run: re-plan " << replans << " at step " << step << ": " << why
            << std::endl;
  if (stop >= lastStep) {
    std::cout << "strait-run: re-plan " << replans << ": the job ends (step " << lastStep
              << ") before a new plan could take over; not re-planning" << std::endl;
    return false;
  }
  // 1. The measured cluster: the job's cluster file and a second links
  //    section whose rules the parser reads last (they win): the measured
  //    device pairs and their host pairs, latency as the plan assumed it.
  std::string root = absolute(options.planDir);
  // A re-plan of a re-plan writes next to the first one (DIR/replan-K).
  std::string dir = jobFolderOf(root) + "/replan-" + std::to_string(replans);
  makeDirs(dir);
  std::string clusterPath = dir + "/measured-cluster.yaml";
  {
    std::ifstream in(record.clusterFile);
    if (!in) {
      std::cout << "strait-run: re-plan " << replans << ": cannot read " << record.clusterFile
                << "; not re-planning" << std::endl;
      return false;
    }
    std::ofstream out(clusterPath);
    out << in.rdbuf() << "\n# measured by strait-run --replan: the median throughput of the "
        << options.replanWindow << " steps up to step " << step << "\nlinks:\n  hosts:\n";
    std::ostringstream devices;
    for (const auto &[pair, bw] : measured) {
      const JobRecord::Link *l = nullptr;
      for (const auto &x : record.links)
        if (x.a == pair.first && x.b == pair.second)
          l = &x;
      char rule[256];
      std::snprintf(rule, sizeof(rule), "bandwidth_mbps: %.6g, latency_ms: %.6g}\n",
                    bw * 8 / 1e6, l ? l->latency * 1e3 : 0.0);
      out << "    - {between: [" << record.ranks[pair.first].host << ", "
          << record.ranks[pair.second].host << "], " << rule;
      devices << "    - {between: [" << record.ranks[pair.first].device << ", "
              << record.ranks[pair.second].device << "], " << rule;
    }
    out << "  devices:\n" << devices.str();
    if (!out) {
      std::cout << "strait-run: re-plan " << replans << ": cannot write " << clusterPath
                << "; not re-planning" << std::endl;
      return false;
    }
  }
  // 2. The recorded straitc command with the measured cluster and the new
  //    folder, in the folder it ran in, with --evaluate-plan: straitc also
  //    re-simulates the current plan on the measured cluster (the
  //    calibration below).
  std::string log = dir + "/straitc.log";
  double compileS = 0;
  StatusOr<JobRecord> next =
      runRecordedStraitc(options.straitcPath, record, clusterPath, dir, root, &compileS);
  if (!next.isOk()) {
    bool failed = next.getStatus().getMessage().rfind("straitc failed", 0) == 0;
    std::cout << "strait-run: re-plan " << replans << ": " << next.getStatus().getMessage()
              << (failed ? "; the job keeps its plan. Give straitc's path with --straitc PATH"
                         : "; the job keeps its plan")
              << std::endl;
    return false;
  }
  // 3. Compare in this machine's time: the simulator is off by a factor
  //    (docs/planner.md), so the new plan's prediction is scaled by the step
  //    time measured now over the current plan's prediction on the same
  //    measured cluster (straitc re-simulated it: same stages, replicas,
  //    devices, micro-batches and codecs). Both predictions are the same
  //    simulator's on the same links: a link's cost is in both.
  double oldMeasured = next->evaluatedIterationS;
  if (!(oldMeasured > 0) || !(lastWindowMs > 0)) {
    std::cout << "strait-run: re-plan " << replans << ": "
              << (lastWindowMs > 0 ? dir + "/straitc.json has no evaluated_plan_iteration_s "
                                           "(a straitc without --evaluate-plan?): cannot "
                                           "calibrate the new plan's prediction"
                                   : std::string("no step time measured"))
              << "; the job keeps its plan" << std::endl;
    return false;
  }
  double calibration = lastWindowMs / 1e3 / oldMeasured;
  double predictedMs = next->predictedIterationS * 1e3 * calibration;
  char buf[400];
  std::snprintf(buf, sizeof(buf),
                "new plan (straitc %.2f s, %s): predicted %.4g s x %.3g = %.4g ms a step, "
                "measured now %.4g ms (calibration: the measured step over the current "
                "plan's %.4g s re-simulated on the measured links)",
                compileS, dir.c_str(), next->predictedIterationS, calibration, predictedMs,
                lastWindowMs, oldMeasured);
  std::cout << "strait-run: re-plan " << replans << ": " << buf << "\n"
            << "strait-run:   ranks " << record.ranks.size() << " -> " << next->ranks.size()
            << "\n" << planSummary(log) << std::flush;
  if (!(predictedMs * 1.1 < lastWindowMs)) {
    std::cout << "strait-run: re-plan " << replans
              << ": the new plan is not predicted to be at least 10% faster; keeping the "
                 "current plan"
              << std::endl;
    for (const auto &kv : measured)
      declinedAt[kv.first] = kv.second;
    return false;
  }
  if (stop >= lastStep) {
    std::cout << "strait-run: re-plan " << replans << ": the job ends (step " << lastStep
              << ") before the new plan could take over; keeping the current plan" << std::endl;
    return false;
  }
  if (!writeReplanControl(stopPath, {stop, std::max(stop, leaseGranted)})) {
    std::cout << "strait-run: re-plan " << replans << ": cannot write " << stopPath << ": "
              << std::strerror(errno) << "; the job keeps its plan" << std::endl;
    return false;
  }
  std::cout << "strait-run: re-plan " << replans << ": switching; every rank checkpoints after "
            << "step " << stop << " and resumes under " << dir << std::endl;
  stopAt = stop;
  pendingDir = dir;
  return true;
}

int ReplanMonitor::earliestStop(int step) const {
  // At least the lease: no rank is past it (it may be a step or two ahead
  // of the merged line, and the ranks go on while straitc runs).
  // Other hosts' ranks (--host) run without a lease: one step beyond it
  // at most, as they exchange data with this host's ranks every step; with
  // straitc --local-steps H, islands synchronize every H steps: H beyond.
  int stop = std::max(step + 3, leaseGranted + (options.host.empty() ? 0 : localStepsOf(record)));
  // That bound is in steps; the other machines' launchers need time
  // (kStopNoticeMs) to tell their ranks, which otherwise run past the stop
  // into a step whose peers have left (a loaded CI machine: 9 steps of
  // 6-13 ms were not enough for a host join).
  if (!options.host.empty() && lastStepMs > 0)
    stop = std::max(stop, step + std::min(kStopNoticeMaxSteps,
                                          static_cast<int>(std::ceil(kStopNoticeMs / lastStepMs))));
  return stop;
}

StatusOr<int> ReplanMonitor::switchTo(int lastStep, const std::string &dir) {
  if (stopAt > 0)
    return rt::invalidArgument("a switch to " + pendingDir + " after step " +
                                  std::to_string(stopAt) + " is pending");
  int stop = earliestStop(lastMerged);
  if (stop >= lastStep)
    return 0;
  if (!writeReplanControl(stopPath, {stop, std::max(stop, leaseGranted)}))
    return rt::unavailable("cannot write " + stopPath + ": " + std::strerror(errno));
  stopAt = stop;
  pendingDir = dir;
  return stop;
}

void ReplanMonitor::cancel() {
  // The lease stays granted: ranks may be at it now (a cancel while they
  // run), and a restart's ranks resume from a step at or before it.
  stopAt = 0;
  pendingDir.clear();
  lastMerged = 0;
  if (leaseGranted > 0)
    (void)writeReplanControl(stopPath, {0, leaseGranted});
  else
    ::unlink(stopPath.c_str());
}

Status ReplanMonitor::switched() {
  STRAIT_ASSIGN_OR_RETURN(record, readJobRecord(pendingDir));
  planDir = pendingDir;
  options.planDir = pendingDir;
  clearStop();
  pendingDir.clear();
  skipUntil = 0;
  window.clear();
  windowMs.clear();
  windowSteps = 0;
  outside.clear();
  declinedAt.clear();
  leaseGranted = 0;
  lastMerged = 0;
  return Status::ok();
}

} // namespace run
} // namespace strait
