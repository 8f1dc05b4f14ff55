//===- ProgressMerger.h - The launcher's merged progress lines -*- C++ -*-===//
//
// The launcher follows its ranks' logs and, once every rank reported
// iteration N, prints one merged line (Launcher.cpp's header describes it);
// --replan's monitor sees each merged step through onStep.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TOOLS_STRAITRUN_PROGRESSMERGER_H
#define STRAIT_RUNTIME_TOOLS_STRAITRUN_PROGRESSMERGER_H

#include "strait/runtime/Program.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace strait {
namespace run {

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

inline bool parseProgress(const std::string &line, int &rank, int &step, Progress &p) {
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

inline std::string humanBytes(const std::string &list) {
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

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_STRAITRUN_PROGRESSMERGER_H
