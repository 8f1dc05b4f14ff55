//===- Trace.cpp - Timestamped spans of what a rank ran -------------------===//
//
// The recorder (one table per process, guarded by a mutex: only touched
// while tracing is on), the Chrome trace writer and merger, and the clock
// offset estimate (Trace.h).
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Trace.h"
#include "strait/runtime/Communicator.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#include <unistd.h>

namespace strait {
namespace rt {
namespace trace {

std::atomic<bool> enabledFlag{false};

namespace {

std::mutex mutex;
std::vector<Event> events;
std::map<int, std::string> laneNames;
int nextTid = 100;
thread_local int threadTid = 0;

int currentTid() {
  if (threadTid == 0) {
    std::lock_guard<std::mutex> lock(mutex);
    threadTid = nextTid++;
    laneNames.emplace(threadTid, "thread " + std::to_string(threadTid - 99));
  }
  return threadTid;
}

/// Appends `text` as a JSON string literal to `out`.
void appendQuoted(std::string &out, const std::string &text) {
  out += '"';
  for (char c : text) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

/// `text` as a JSON string literal.
std::string quote(const std::string &text) {
  std::string out;
  appendQuoted(out, text);
  return out;
}

std::string number(double v) {
  if (!std::isfinite(v))
    return "0";
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

/// ns as microseconds with 3 decimals (Chrome's unit).
std::string micros(int64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(std::llabs(ns % 1000)));
  return ns < 0 && ns > -1000 ? "-" + std::string(buf) : buf;
}

void addMember(std::string &args, const char *key, const std::string &jsonValue) {
  if (args.empty())
    args.reserve(160);
  else
    args += ',';
  args += '"';
  args += key; // keys are identifiers
  args += "\":";
  args += jsonValue;
}

const char *codecName(program::Codec c) {
  switch (c) {
  case program::CODEC_NONE:
    return "none";
  case program::CODEC_TOPK:
    return "topk";
  case program::CODEC_FP16:
    return "fp16";
  case program::CODEC_INT8:
    return "int8";
  case program::CODEC_INT4:
    return "int4";
  case program::CODEC_BF16:
    return "bf16";
  case program::CODEC_TOPK_INT8:
    return "topk-int8";
  case program::CODEC_TOPK_INT4:
    return "topk-int4";
  default:
    return "other";
  }
}

/// Writes `text` to `path` through a temporary name in the same folder.
Status writeAtomically(const std::string &path, const std::string &text) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE *f = std::fopen(tmp.c_str(), "w");
  if (!f)
    return ioError("cannot write trace '" + path + "'");
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return ioError("cannot write trace '" + path + "'");
  }
  return Status::ok();
}

} // namespace

void setEnabled(bool on) { enabledFlag.store(on, std::memory_order_relaxed); }

int64_t nowNs() { return toNs(std::chrono::steady_clock::now()); }

void nameThread(const std::string &name, int tid) {
  threadTid = tid;
  std::lock_guard<std::mutex> lock(mutex);
  laneNames[tid] = name;
}

void record(std::string name, const char *cat, int64_t startNs, int64_t endNs,
            std::string args) {
  int tid = currentTid();
  std::lock_guard<std::mutex> lock(mutex);
  if (events.capacity() == 0)
    events.reserve(1 << 14);
  events.push_back({std::move(name), cat, startNs, endNs, tid, std::move(args)});
}

Span::Span(const char *cat, std::string name) {
  if (on())
    state.reset(new State{cat, std::move(name), {}, nowNs()});
}

void Span::finish() {
  int64_t end = nowNs();
  record(std::move(state->name), state->cat, state->start, end, std::move(state->args));
  state.reset();
}

void Span::restart() {
  if (state)
    state->start = nowNs();
}

Span &Span::arg(const char *key, double value) {
  if (state)
    addMember(state->args, key, number(value));
  return *this;
}

Span &Span::arg(const char *key, int64_t value) {
  if (state)
    addMember(state->args, key, std::to_string(value));
  return *this;
}

Span &Span::arg(const char *key, const std::string &value) {
  if (state) {
    addMember(state->args, key, "");
    appendQuoted(state->args, value);
  }
  return *this;
}

Span kernelSpanOf(const program::Kernel &kernel, int step, int microBatch) {
  const std::string &op = kernel.op();
  bool optimizer = op == "AdamW" || op == "Adam" || op == "Adagrad" || op == "Momentum" ||
                   op == "SGD" || op == "Sgd";
  Span span(optimizer ? "optimizer" : "kernel", kernel.name().empty() ? op : kernel.name());
  span.arg("op", op).arg("step", step);
  if (microBatch >= 0)
    span.arg("micro_batch", microBatch);
  auto ops = kernel.attrs().find("ops");
  if (ops != kernel.attrs().end() && ops->second.has_strings()) {
    std::string members;
    members.reserve(96);
    for (const std::string &m : ops->second.strings().v()) {
      if (!members.empty())
        members += ',';
      members += m;
    }
    span.arg("members", members);
  }
  span.restart();
  return span;
}

Span commSpanOf(const program::Step &step, int index, uint64_t bytes) {
  auto common = [&](Span &s, const program::CodecParams &codec) {
    s.arg("step", index).arg("bytes", static_cast<int64_t>(bytes)).arg("codec", codecName(codec.codec()));
    if (step.has_micro_batch() && step.micro_batch() >= 0)
      s.arg("micro_batch", step.micro_batch());
  };
  if (step.has_send()) {
    Span s("send", "send to " + std::to_string(step.send().peer()));
    s.arg("peer", step.send().peer());
    common(s, step.send().codec());
    s.restart();
    return s;
  }
  if (step.has_recv()) {
    Span s("recv", "recv from " + std::to_string(step.recv().peer()));
    s.arg("peer", step.recv().peer());
    common(s, step.recv().codec());
    s.restart();
    return s;
  }
  const program::AllReduce &ar = step.all_reduce();
  Span s("allreduce", "all-reduce");
  common(s, ar.codec());
  std::string ranks;
  for (int r : ar.ranks())
    ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  s.arg("ranks", ranks.empty() ? "all" : ranks).arg("values", ar.value_ids_size());
  std::string islands;
  for (const auto &island : ar.islands()) {
    islands += "{";
    for (int i = 0; i < island.ranks_size(); ++i)
      islands += (i ? "," : "") + std::to_string(island.ranks(i));
    islands += "}";
  }
  if (!islands.empty())
    s.arg("islands", islands);
  s.restart();
  return s;
}

Span codecSpanOf(const char *what, program::Codec codec, int64_t numel) {
  Span s("codec", std::string(what) + " " + codecName(codec));
  s.arg("codec", codecName(codec)).arg("elements", numel);
  s.restart();
  return s;
}

void phases(int64_t beginNs, int64_t midNs, int64_t endNs) {
  if (!on() || beginNs == 0 || midNs < beginNs || endNs < midNs)
    return;
  record("wait for peer", "wait", beginNs, midNs);
  record("transfer", "transfer", midNs, endNs);
}

std::vector<Event> take() {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<Event> out = std::move(events);
  events.clear();
  return out;
}

std::vector<std::pair<int, std::string>> lanes() {
  std::lock_guard<std::mutex> lock(mutex);
  return {laneNames.begin(), laneNames.end()};
}

Status parseStepRange(const std::string &text, int steps, int &first, int &last) {
  if (text.empty()) {
    first = steps >= 2 ? 2 : 1;
    last = std::min(steps, 4);
    return Status::ok();
  }
  char *end = nullptr;
  size_t colon = text.find(':');
  std::string a = text.substr(0, colon);
  std::string b = colon == std::string::npos ? a : text.substr(colon + 1);
  long x = std::strtol(a.c_str(), &end, 10);
  bool ok = !a.empty() && *end == '\0';
  long y = std::strtol(b.c_str(), &end, 10);
  ok = ok && !b.empty() && *end == '\0';
  if (!ok || x < 1 || y < x)
    return invalidArgument("--trace-steps '" + text +
                           "': expected A:B, the first and last iteration traced (1-based, "
                           "A <= B)");
  if (x > steps)
    return invalidArgument("--trace-steps '" + text + "' starts after the last step (--steps " +
                           std::to_string(steps) + ")");
  first = static_cast<int>(x);
  last = static_cast<int>(std::min<long>(y, steps));
  return Status::ok();
}

Status checkWritable(const std::string &path) {
  if (path.empty())
    return invalidArgument("--trace needs a file name");
  std::string probe = path + ".tmp." + std::to_string(::getpid());
  FILE *f = std::fopen(probe.c_str(), "w");
  if (!f)
    return ioError("cannot write trace '" + path + "' (does its folder exist?)");
  std::fclose(f);
  std::remove(probe.c_str());
  return Status::ok();
}

Status writeTrace(const std::string &path, const ProcessInfo &info,
                  const std::vector<Event> &spans,
                  const std::vector<std::pair<int, std::string>> &laneList) {
  std::ostringstream os;
  std::string pid = std::to_string(info.rank);
  std::string title = "rank " + pid + " (" + info.host + ", " + info.device + ")";
  os << "{\"traceEvents\":[\n";
  os << "{\"ph\":\"M\",\"pid\":" << pid << ",\"name\":\"process_name\",\"args\":{\"name\":"
     << quote(title) << "}},\n";
  os << "{\"ph\":\"M\",\"pid\":" << pid
     << ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":" << pid << "}}";
  for (const auto &[tid, name] : laneList) {
    os << ",\n{\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":" << tid
       << ",\"name\":\"thread_name\",\"args\":{\"name\":" << quote(name) << "}}";
    os << ",\n{\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":" << tid
       << ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":" << tid << "}}";
  }
  for (const Event &e : spans) {
    os << ",\n{\"ph\":\"X\",\"pid\":" << pid << ",\"tid\":" << e.tid
       << ",\"name\":" << quote(e.name) << ",\"cat\":" << quote(e.cat)
       << ",\"ts\":" << micros(e.startNs + info.clockOffsetNs)
       << ",\"dur\":" << micros(std::max<int64_t>(0, e.endNs - e.startNs)) << ",\"args\":{"
       << e.args << "}}";
  }
  os << "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"strait_trace\":1,\"ranks\":[{"
     << "\"rank\":" << pid << ",\"host\":" << quote(info.host)
     << ",\"device\":" << quote(info.device)
     << ",\"clock_offset_us\":" << micros(info.clockOffsetNs)
     << ",\"clock_precision_us\":" << micros(info.clockPrecisionNs)
     << ",\"same_clock_as_rank0\":" << (info.sameClock ? "true" : "false")
     << ",\"clock_estimate_us\":" << micros(info.clockEstimateNs)
     << ",\"estimate_precision_us\":" << micros(info.estimatePrecisionNs)
     << ",\"first_step\":" << info.firstStep << ",\"last_step\":" << info.lastStep << "}]}}\n";
  return writeAtomically(path, os.str());
}

namespace {
/// The deepest nesting of arrays and objects in JSON `text` (brackets inside
/// strings do not count). A Chrome trace nests 5 levels; protobuf's JSON
/// parser takes time cubic in the depth of nested arrays (32000 levels, a
/// 64 KB file: 110 s), so deep files are refused before it sees them.
size_t jsonDepth(const std::string &text) {
  size_t depth = 0, deepest = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}
constexpr size_t kMaxTraceDepth = 64;
} // namespace

Status mergeTraces(const std::vector<std::string> &inputs, const std::string &output) {
  namespace pb = google::protobuf;
  if (inputs.empty())
    return invalidArgument("--merge-traces needs at least one input trace");
  std::vector<pb::Struct> files(inputs.size());
  double origin = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::ifstream in(inputs[i]);
    if (!in)
      return notFound("cannot read trace '" + inputs[i] + "'");
    std::stringstream text;
    text << in.rdbuf();
    if (size_t depth = jsonDepth(text.str()); depth > kMaxTraceDepth)
      return invalidArgument("'" + inputs[i] + "' is not a Chrome trace: it nests " +
                             std::to_string(depth) + " levels of arrays and objects (at most " +
                             std::to_string(kMaxTraceDepth) + ")");
    pb::util::JsonParseOptions options;
    auto parsed = pb::util::JsonStringToMessage(text.str(), &files[i], options);
    auto events = files[i].fields().find("traceEvents");
    if (!parsed.ok() || events == files[i].fields().end() ||
        !events->second.has_list_value())
      return invalidArgument("'" + inputs[i] + "' is not a Chrome trace (no traceEvents list)" +
                             (parsed.ok() ? "" : ": " + std::string(parsed.message())));
    for (const pb::Value &e : events->second.list_value().values()) {
      auto ts = e.struct_value().fields().find("ts");
      if (ts != e.struct_value().fields().end())
        origin = std::min(origin, ts->second.number_value());
    }
  }
  if (!std::isfinite(origin))
    origin = 0;
  pb::Struct merged;
  pb::ListValue *all = (*merged.mutable_fields())["traceEvents"].mutable_list_value();
  pb::ListValue *ranks = (*(*merged.mutable_fields())["otherData"]
                               .mutable_struct_value()
                               ->mutable_fields())["ranks"]
                             .mutable_list_value();
  for (pb::Struct &f : files) {
    for (pb::Value &e : *(*f.mutable_fields())["traceEvents"].mutable_list_value()->mutable_values()) {
      auto &fields = *e.mutable_struct_value()->mutable_fields();
      auto ts = fields.find("ts");
      if (ts != fields.end())
        ts->second.set_number_value(ts->second.number_value() - origin);
      *all->add_values() = std::move(e);
    }
    auto other = f.fields().find("otherData");
    if (other != f.fields().end()) {
      auto r = other->second.struct_value().fields().find("ranks");
      if (r != other->second.struct_value().fields().end())
        for (const pb::Value &v : r->second.list_value().values())
          *ranks->add_values() = v;
    }
  }
  auto &other = *(*merged.mutable_fields())["otherData"].mutable_struct_value()->mutable_fields();
  other["strait_trace"].set_number_value(1);
  other["origin_us"].set_number_value(origin);
  (*merged.mutable_fields())["displayTimeUnit"].set_string_value("ms");
  std::string text;
  pb::util::JsonPrintOptions print;
  auto printed = pb::util::MessageToJsonString(merged, &text, print);
  if (!printed.ok())
    return internalError("cannot print the merged trace: " + std::string(printed.message()));
  return writeAtomically(output, text + "\n");
}

namespace {

/// This boot's id: processes with the same one read the same
/// CLOCK_MONOTONIC (steady_clock).
std::array<char, 40> bootId() {
  std::array<char, 40> id{};
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  in.read(id.data(), id.size() - 1);
  return id;
}

} // namespace

Status estimateClockOffset(Communicator &comm, uint32_t channel, ProcessInfo &info) {
  constexpr int kRounds = 16;
  std::array<char, 40> boot = bootId();
  Tensor bootTensor{program::DTYPE_U8, {static_cast<int64_t>(boot.size())}, boot.data()};
  int64_t stamp = 0;
  Tensor t{program::DTYPE_I64, {1}, &stamp};
  if (comm.getRank() == 0) {
    for (int r = 1; r < comm.getWorldSize(); ++r) {
      STRAIT_RETURN_IF_ERROR(comm.send(bootTensor, r, channel));
      for (int i = 0; i < kRounds; ++i) {
        STRAIT_RETURN_IF_ERROR(comm.recv(t, r, channel));
        stamp = nowNs();
        STRAIT_RETURN_IF_ERROR(comm.send(t, r, channel));
      }
    }
    return Status::ok();
  }
  std::array<char, 40> mine = boot;
  STRAIT_RETURN_IF_ERROR(comm.recv(bootTensor, 0, channel));
  int64_t best = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < kRounds; ++i) {
    int64_t t1 = nowNs();
    stamp = t1;
    STRAIT_RETURN_IF_ERROR(comm.send(t, 0, channel));
    STRAIT_RETURN_IF_ERROR(comm.recv(t, 0, channel));
    int64_t t3 = nowNs();
    if (t3 - t1 < best) {
      best = t3 - t1;
      info.clockEstimateNs = stamp - (t1 + (t3 - t1) / 2);
    }
  }
  info.estimatePrecisionNs = best / 2;
  info.sameClock = mine[0] != 0 && mine == boot;
  info.clockOffsetNs = info.sameClock ? 0 : info.clockEstimateNs;
  info.clockPrecisionNs = info.sameClock ? 0 : info.estimatePrecisionNs;
  return Status::ok();
}

} // namespace trace
} // namespace rt
} // namespace strait
