//===- LauncherTest.cpp - strait-run on a 2-rank plan ---------------------===//
//
// Writes a plan folder (manifest, two programs, a shard file), runs the real
// strait-run binary on it and checks the exit code, the per-rank logs and
// that a failing rank stops the job within seconds.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <sys/wait.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

std::string makeDir() {
  std::string tmpl = testing::TempDir() + "/strait-run-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  return ::mkdtemp(buf.data());
}

/// Rank 0: relu(W) -> send; rank 1: recv -> ReduceSum -> "loss".
/// `breakRank1` declares rank 1's loss with a wrong shape.
void writePlan(const std::string &dir, bool breakRank1) {
  ProgramBuilder r0(0, 2);
  uint32_t w = r0.addParameter("W", {4});
  uint32_t a0 = r0.addValue("act", program::DTYPE_F32, {4}, program::ROLE_ACTIVATION);
  r0.addKernel("Relu", {w}, {a0});
  r0.addRunStep();
  auto *send = r0.get().add_steps()->mutable_send();
  send->set_value_id(a0);
  send->set_peer(1);
  send->set_channel(1);

  ProgramBuilder r1(1, 2);
  uint32_t a1 = r1.addValue("act", program::DTYPE_F32, {4}, program::ROLE_ACTIVATION);
  Shape lossShape = breakRank1 ? Shape{2} : Shape{};
  uint32_t loss = r1.addValue("loss", program::DTYPE_F32, lossShape, program::ROLE_OUTPUT);
  auto *recv = r1.get().add_steps()->mutable_recv();
  recv->set_value_id(a1);
  recv->set_peer(0);
  recv->set_channel(1);
  setInt(r1.addKernel("ReduceSum", {a1}, {loss}), "keepdims", 0);
  r1.addRunStep();

  program::ParameterShardFile shard;
  shard.set_format_version(program::FORMAT_VERSION_1);
  auto *e = shard.add_parameters();
  e->set_name("W");
  e->mutable_data()->set_dtype(program::DTYPE_F32);
  e->mutable_data()->add_shape(4);
  for (float v : {1.0f, -2.0f, 3.0f, 0.5f})
    e->mutable_data()->add_float_data(v);

  program::PlanManifest m;
  m.set_format_version(program::FORMAT_VERSION_1);
  m.set_world_size(2);
  m.set_rendezvous(program::RENDEZVOUS_FILE);
  m.set_rendezvous_address("rendezvous");
  for (int r = 0; r < 2; ++r) {
    auto *entry = m.add_ranks();
    entry->set_rank(r);
    entry->set_device("cpu");
    entry->set_host("localhost");
    entry->set_address("127.0.0.1");
    entry->set_program_file("rank" + std::to_string(r) + ".program.pb");
    if (r == 0)
      entry->set_parameter_file("rank0.params.pb");
  }
  ASSERT_TRUE(writeMessage(r0.get(), dir + "/rank0.program.pb").isOk());
  ASSERT_TRUE(writeMessage(r1.get(), dir + "/rank1.program.pb").isOk());
  ASSERT_TRUE(writeMessage(shard, dir + "/rank0.params.pb").isOk());
  ASSERT_TRUE(writeMessage(m, dir + "/plan.pb").isOk());
}

struct RunResult {
  int exitCode;
  std::string output;
  double seconds;
};

RunResult runStraitRun(const std::string &args) {
  auto start = std::chrono::steady_clock::now();
  std::string cmd = std::string(STRAIT_RUN_PATH) + " " + args + " 2>&1";
  FILE *pipe = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), pipe))
    out.append(buf, n);
  int status = ::pclose(pipe);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, secs};
}

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

TEST(StraitRun, TwoLocalRanksRunAndLog) {
  std::string dir = makeDir();
  writePlan(dir, false);
  RunResult r = runStraitRun(dir + " --steps 3 --threads 1 --timeout-ms 20000");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("all 2 ranks finished"), std::string::npos) << r.output;
  std::string log1 = readFile(dir + "/logs/rank1.log");
  EXPECT_NE(log1.find("rank 1 iteration 3/3"), std::string::npos) << log1;
  EXPECT_NE(log1.find("loss 4.5"), std::string::npos) << log1; // 1 + 3 + 0.5
  EXPECT_NE(readFile(dir + "/logs/rank0.log").find("rank 0 done"), std::string::npos);
}

TEST(StraitRun, FailingRankStopsTheJobAndIsNamed) {
  std::string dir = makeDir();
  writePlan(dir, true);
  RunResult r = runStraitRun(dir + " --steps 2 --threads 1 --timeout-ms 60000");
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_LT(r.seconds, 20.0); // rank 0 would wait 60 s in its barrier
  EXPECT_NE(r.output.find("rank 1 failed (exit code 1)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kernel ReduceSum"), std::string::npos) << r.output;
}

TEST(StraitRun, MissingPlanIsExitCode2) {
  RunResult r = runStraitRun(makeDir());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.output.find("plan.pb"), std::string::npos) << r.output;
}
