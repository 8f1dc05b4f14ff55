//===- TraceTest.cpp - The execution trace recorder (Trace.h) -------------===//
#include "CommTestUtil.h"
#include "strait/runtime/Trace.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <sys/stat.h>

namespace strait {
namespace rt {
namespace {

namespace pb = google::protobuf;

pb::Struct readJson(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  pb::Struct s;
  EXPECT_TRUE(pb::util::JsonStringToMessage(text.str(), &s).ok()) << path;
  return s;
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

/// Clears the recorder around each test.
class TraceTest : public ::testing::Test {
protected:
  void SetUp() override {
    trace::setEnabled(false);
    trace::take();
  }
  void TearDown() override {
    trace::setEnabled(false);
    trace::take();
  }
};

TEST_F(TraceTest, OffRecordsNothing) {
  {
    trace::Span s("kernel", "k");
    EXPECT_FALSE(s.active());
    s.arg("x", 1.0);
    program::Kernel k;
    k.set_op("MatMul");
    trace::Span ks = trace::kernelSpan(k, 3, -1);
    EXPECT_FALSE(ks.active());
    trace::phases(1, 2, 3);
  }
  EXPECT_TRUE(trace::take().empty());
}

TEST_F(TraceTest, SpansNestOnTheirThreadsLane) {
  trace::setEnabled(true);
  trace::nameThread("compute", 1);
  {
    trace::Span outer("iteration", "iteration 2");
    {
      program::Kernel k;
      k.set_op("FusedElementwise");
      k.set_name("gelu");
      auto &ops = (*k.mutable_attrs())["ops"];
      ops.mutable_strings()->add_v("Mul");
      ops.mutable_strings()->add_v("Tanh");
      trace::Span inner = trace::kernelSpan(k, 7, 1);
      EXPECT_TRUE(inner.active());
    }
    std::thread([] { trace::Span other("send", "send to 1"); }).join();
  }
  std::vector<trace::Event> events = trace::take();
  ASSERT_EQ(events.size(), 3u);
  const trace::Event &kernel = events[0], &other = events[1], &outer = events[2];
  EXPECT_EQ(kernel.name, "gelu");
  EXPECT_EQ(kernel.cat, "kernel");
  EXPECT_EQ(kernel.tid, 1);
  EXPECT_EQ(outer.tid, 1);
  EXPECT_NE(other.tid, 1);
  EXPECT_GE(other.tid, 100);
  EXPECT_LE(outer.startNs, kernel.startNs);
  EXPECT_GE(outer.endNs, kernel.endNs);
  EXPECT_NE(kernel.args.find("\"members\":\"Mul,Tanh\""), std::string::npos) << kernel.args;
  EXPECT_NE(kernel.args.find("\"step\":7"), std::string::npos) << kernel.args;
  EXPECT_NE(kernel.args.find("\"micro_batch\":1"), std::string::npos) << kernel.args;
  bool named = false;
  for (const auto &[tid, name] : trace::lanes())
    named |= tid == 1 && name == "compute";
  EXPECT_TRUE(named);
}

TEST_F(TraceTest, CommSpanNamesPeerBytesAndCodec) {
  trace::setEnabled(true);
  program::Step step;
  step.mutable_send()->set_peer(3);
  step.mutable_send()->mutable_codec()->set_codec(program::CODEC_INT8);
  { trace::Span s = trace::commSpan(step, 5, [] { return uint64_t(4096); }); }
  program::Step ar;
  ar.mutable_all_reduce()->add_ranks(0);
  ar.mutable_all_reduce()->add_ranks(2);
  bool called = false;
  trace::setEnabled(false);
  { trace::Span s = trace::commSpan(ar, 6, [&] { called = true; return uint64_t(1); }); }
  EXPECT_FALSE(called) << "the byte count is computed only while tracing";
  std::vector<trace::Event> events = trace::take();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "send to 3");
  EXPECT_EQ(events[0].cat, "send");
  EXPECT_NE(events[0].args.find("\"bytes\":4096"), std::string::npos) << events[0].args;
  EXPECT_NE(events[0].args.find("\"codec\":\"int8\""), std::string::npos) << events[0].args;
  EXPECT_NE(events[0].args.find("\"peer\":3"), std::string::npos) << events[0].args;
}

TEST_F(TraceTest, WritesAndMergesChromeTraces) {
  std::string dir = test::makeTempDir("strait-trace");
  std::vector<std::string> parts;
  for (int rank = 0; rank < 2; ++rank) {
    trace::ProcessInfo info;
    info.rank = rank;
    info.host = "h\"ost";
    info.device = "cpu";
    info.clockOffsetNs = rank * 1000000; // 1 ms later on rank 1's axis
    std::vector<trace::Event> events = {
        {"MatMul", "kernel", 5000000, 6000000, 1, "\"op\":\"MatMul\""},
        {"send to 1", "send", 6000000, 6500000, 2, ""}};
    parts.push_back(dir + "/r" + std::to_string(rank) + ".json");
    ASSERT_TRUE(trace::writeTrace(parts.back(), info, events, {{1, "compute"}, {2, "comm"}})
                    .isOk());
    pb::Struct one = readJson(parts.back());
    EXPECT_EQ(one.fields().at("traceEvents").list_value().values_size(), 2 + 4 + 2);
  }
  std::string merged = dir + "/merged.json";
  ASSERT_TRUE(trace::mergeTraces(parts, merged).isOk());
  pb::Struct m = readJson(merged);
  double minTs = 1e300;
  std::map<int, double> matmulTs;
  int processNames = 0;
  for (const pb::Value &v : m.fields().at("traceEvents").list_value().values()) {
    const auto &f = v.struct_value().fields();
    int pid = static_cast<int>(f.at("pid").number_value());
    if (f.at("ph").string_value() == "M" && f.at("name").string_value() == "process_name") {
      ++processNames;
      EXPECT_EQ(f.at("args").struct_value().fields().at("name").string_value(),
                "rank " + std::to_string(pid) + " (h\"ost, cpu)");
    }
    if (f.at("ph").string_value() != "X")
      continue;
    minTs = std::min(minTs, f.at("ts").number_value());
    if (f.at("name").string_value() == "MatMul") {
      matmulTs[pid] = f.at("ts").number_value();
      EXPECT_DOUBLE_EQ(f.at("dur").number_value(), 1000.0);
    }
  }
  EXPECT_EQ(processNames, 2);
  EXPECT_DOUBLE_EQ(minTs, 0.0);
  ASSERT_EQ(matmulTs.size(), 2u);
  EXPECT_DOUBLE_EQ(matmulTs[1] - matmulTs[0], 1000.0); // the offset, in us
  EXPECT_EQ(m.fields().at("otherData").struct_value().fields().at("ranks").list_value()
                .values_size(),
            2);
}

TEST_F(TraceTest, BadFilesAreErrorsAndLeaveNothing) {
  std::string dir = test::makeTempDir("strait-trace-bad");
  std::string missing = dir + "/no/such/folder/t.json";
  EXPECT_FALSE(trace::checkWritable(missing).isOk());
  Status s = trace::writeTrace(missing, {}, {}, {});
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.getMessage().find(missing), std::string::npos) << s.getMessage();
  EXPECT_FALSE(exists(missing));
  std::string notTrace = dir + "/x.json";
  std::ofstream(notTrace) << "{\"hello\": 1}";
  std::string out = dir + "/merged.json";
  s = trace::mergeTraces({notTrace}, out);
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.getMessage().find(notTrace), std::string::npos) << s.getMessage();
  EXPECT_FALSE(exists(out));
  EXPECT_FALSE(trace::mergeTraces({dir + "/absent.json"}, out).isOk());
  EXPECT_FALSE(exists(out));
  // 40000 nested arrays (80 KB): refused at once, naming the file and the
  // depth. protobuf's JSON parser, which reads traces, takes time cubic in
  // the depth (found auditing the trace reader: minutes for this file).
  std::string deep = dir + "/deep.json";
  std::ofstream(deep) << "{\"traceEvents\": " << std::string(40000, '[')
                      << std::string(40000, ']') << "}";
  s = trace::mergeTraces({deep}, out);
  EXPECT_EQ(s.getCode(), StatusCode::InvalidArgument);
  EXPECT_NE(s.getMessage().find(deep + "' is not a Chrome trace: it nests 40001 levels"),
            std::string::npos)
      << s.getMessage();
  EXPECT_FALSE(exists(out));
  // Brackets inside strings do not count.
  std::string quoted = dir + "/quoted.json";
  std::ofstream(quoted) << "{\"traceEvents\": [{\"name\": \"" << std::string(100, '[')
                        << "\\\"\", \"ts\": 1}]}";
  s = trace::mergeTraces({quoted}, out);
  EXPECT_TRUE(s.isOk()) << s.toString();
}

TEST_F(TraceTest, StepRanges) {
  int a = 0, b = 0;
  ASSERT_TRUE(trace::parseStepRange("", 10, a, b).isOk());
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 4);
  ASSERT_TRUE(trace::parseStepRange("", 1, a, b).isOk());
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
  ASSERT_TRUE(trace::parseStepRange("3:20", 5, a, b).isOk());
  EXPECT_EQ(a, 3);
  EXPECT_EQ(b, 5);
  ASSERT_TRUE(trace::parseStepRange("4", 5, a, b).isOk());
  EXPECT_EQ(a, 4);
  EXPECT_EQ(b, 4);
  for (const char *bad : {"0:2", "3:2", "x", "2:", ":3", "2:3x", "-1:2"})
    EXPECT_FALSE(trace::parseStepRange(bad, 10, a, b).isOk()) << bad;
  Status past = trace::parseStepRange("6:8", 5, a, b);
  EXPECT_FALSE(past.isOk());
  EXPECT_NE(past.getMessage().find("--steps 5"), std::string::npos) << past.getMessage();
}

TEST_F(TraceTest, ClockOffsetOfRanksOnOneMachine) {
  std::string dir = test::makeTempDir("strait-trace-clock");
  std::vector<trace::ProcessInfo> infos(3);
  test::runGlooRanks(
      3, [&](int r) { return test::fileStoreOptions(dir, r, 3); },
      [&](int r, Communicator &comm) {
        Status s = trace::estimateClockOffset(comm, 0x7ffffff0u, infos[r]);
        EXPECT_TRUE(s.isOk()) << s.toString();
      });
  EXPECT_EQ(infos[0].clockOffsetNs, 0);
  for (int r = 1; r < 3; ++r) {
    // One machine: one CLOCK_MONOTONIC, so the offset is 0, and the round-trip
    // estimate of it is within its precision (half the round trip) of 0.
    EXPECT_TRUE(infos[r].sameClock);
    EXPECT_EQ(infos[r].clockOffsetNs, 0);
    EXPECT_GT(infos[r].estimatePrecisionNs, 0);
    EXPECT_LE(std::llabs(infos[r].clockEstimateNs), infos[r].estimatePrecisionNs + 1)
        << "rank " << r;
  }
}

} // namespace
} // namespace rt
} // namespace strait
