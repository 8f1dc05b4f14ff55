//===- TimelineTrace.cpp - The simulated timeline as a Chrome trace -------===//
//
// Reads SimulationResult::events; computes nothing of the schedule itself
// (bubbles are the gaps between a stage's compute events).
//
//===----------------------------------------------------------------------===//

#include "strait/Analysis/TimelineTrace.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <string>

using namespace strait;

namespace {

enum Lane { Compute = 1, SendActivation = 2, SendGradient = 3, AllReduce = 4 };

Lane laneOf(TimelineEvent::Kind kind) {
  switch (kind) {
  case TimelineEvent::Kind::Forward:
  case TimelineEvent::Kind::Backward:
    return Compute;
  case TimelineEvent::Kind::SendActivation:
    return SendActivation;
  case TimelineEvent::Kind::SendGradient:
    return SendGradient;
  case TimelineEvent::Kind::AllReduce:
    return AllReduce;
  }
  return Compute;
}

std::string nameOf(const TimelineEvent &e) {
  std::string m = std::to_string(e.microBatch);
  switch (e.kind) {
  case TimelineEvent::Kind::Forward:
    return "F" + m;
  case TimelineEvent::Kind::Backward:
    return "B" + m;
  case TimelineEvent::Kind::SendActivation:
    return "activations " + m + " -> stage " + std::to_string(e.stage + 1);
  case TimelineEvent::Kind::SendGradient:
    return "gradients " + m + " -> stage " + std::to_string(e.stage - 1);
  case TimelineEvent::Kind::AllReduce:
    return "all-reduce";
  }
  return "?";
}

std::string joinRanks(const std::vector<int> &ranks) {
  std::string out;
  for (int r : ranks)
    out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

} // namespace

llvm::Error strait::writeTimelineChromeTrace(const SimulationResult &result,
                                             const PartitionPlan &plan,
                                             const ClusterModel &cluster,
                                             const std::vector<std::vector<int>> &stageRanks,
                                             llvm::StringRef path) {
  std::string tmp = (path + ".tmp").str();
  std::error_code ec;
  {
    llvm::raw_fd_ostream os(tmp, ec, llvm::sys::fs::OF_Text);
    if (ec)
      return llvm::createStringError(ec, "cannot write '" + path + "': " + ec.message());
    llvm::json::OStream json(os);
    auto us = [](double seconds) { return seconds * 1e6; };
    auto span = [&](unsigned pid, int tid, llvm::StringRef name, llvm::StringRef cat,
                    double start, double end, const TimelineEvent *e) {
      json.object([&] {
        json.attribute("ph", "X");
        json.attribute("pid", pid);
        json.attribute("tid", tid);
        json.attribute("name", name);
        json.attribute("cat", cat);
        json.attribute("ts", us(start));
        json.attribute("dur", us(std::max(0.0, end - start)));
        json.attributeObject("args", [&] {
          json.attribute("stage", pid);
          if (e)
            json.attribute("micro_batch", e->microBatch);
        });
      });
    };
    auto meta = [&](unsigned pid, int tid, llvm::StringRef what, llvm::json::Value value) {
      json.object([&] {
        json.attribute("ph", "M");
        json.attribute("pid", pid);
        if (tid >= 0)
          json.attribute("tid", tid);
        json.attribute("name", what);
        json.attributeObject("args", [&] {
          json.attribute(what.ends_with("sort_index") ? "sort_index" : "name", std::move(value));
        });
      });
    };
    json.object([&] {
      json.attributeArray("traceEvents", [&] {
        for (auto [s, stage] : llvm::enumerate(plan.stages)) {
          std::string title = "stage " + std::to_string(s) + " predicted (" +
                              cluster.devices[stage.devices[0]].name;
          if (stage.devices.size() > 1)
            title += " x" + std::to_string(stage.devices.size());
          if (s < stageRanks.size() && !stageRanks[s].empty())
            title += ", ranks " + joinRanks(stageRanks[s]);
          meta(s, -1, "process_name", title + ")");
          meta(s, -1, "process_sort_index", int64_t(s));
          const char *lanes[] = {"", "compute", "send activations", "send gradients",
                                 "all-reduce"};
          for (int tid = Compute; tid <= AllReduce; ++tid) {
            meta(s, tid, "thread_name", lanes[tid]);
            meta(s, tid, "thread_sort_index", int64_t(tid));
          }
          // The stage's compute in time order; the gaps before its last
          // compute are its bubble.
          std::vector<const TimelineEvent *> compute;
          for (const TimelineEvent &e : result.events)
            if (e.stage == s && laneOf(e.kind) == Compute)
              compute.push_back(&e);
          llvm::sort(compute, [](const TimelineEvent *a, const TimelineEvent *b) {
            return a->start < b->start;
          });
          double at = 0;
          for (const TimelineEvent *e : compute) {
            if (e->start > at + 1e-12)
              span(s, Compute, "bubble", "bubble", at, e->start, nullptr);
            at = std::max(at, e->end);
          }
        }
        for (const TimelineEvent &e : result.events) {
          bool forward = e.kind == TimelineEvent::Kind::Forward;
          bool backward = e.kind == TimelineEvent::Kind::Backward;
          llvm::StringRef cat = forward ? "forward" : backward ? "backward"
                                                  : stringifyEventKind(e.kind);
          span(e.stage, laneOf(e.kind), nameOf(e), cat, e.start, e.end, &e);
        }
      });
      json.attribute("displayTimeUnit", "ms");
      json.attributeObject("otherData", [&] {
        json.attribute("strait_plan_trace", 1);
        // The steady-state period (what strait-run measures per step) and
        // one iteration from an empty pipeline (the span of the events).
        json.attribute("iteration_time_s", result.iterationTime);
        json.attribute("first_iteration_time_s", result.firstIterationTime);
        json.attribute("bubble_fraction", result.bubbleFraction);
        json.attribute("schedule", stringifySchedule(plan.schedule));
        json.attribute("micro_batches", plan.microBatches);
        json.attributeArray("stages", [&] {
          for (auto [s, stage] : llvm::enumerate(plan.stages))
            json.object([&] {
              json.attribute("stage", int64_t(s));
              json.attribute("device", cluster.devices[stage.devices[0]].name);
              json.attribute("replicas", int64_t(stage.devices.size()));
              json.attributeArray("ranks", [&] {
                if (s < stageRanks.size())
                  for (int r : stageRanks[s])
                    json.value(r);
              });
            });
        });
      });
    });
    os << "\n";
    os.close();
    if (os.has_error()) {
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "cannot write '" + path + "'");
    }
  }
  if (std::error_code rc = llvm::sys::fs::rename(tmp, path)) {
    llvm::sys::fs::remove(tmp);
    return llvm::createStringError(rc, "cannot write '" + path + "': " + rc.message());
  }
  return llvm::Error::success();
}
