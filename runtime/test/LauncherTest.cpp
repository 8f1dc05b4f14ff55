//===- LauncherTest.cpp - strait-run on a 2-rank plan ---------------------===//
//
// Writes a plan folder (manifest, two programs, a shard file), runs the real
// strait-run binary on it and checks the exit code, the per-rank logs and
// that a failing rank stops the job within seconds.
//
//===----------------------------------------------------------------------===//
#include "Npy.h"
#include "TestUtil.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <sys/wait.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

std::string makeDir() { return makeTempDir("strait-run"); }

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

// --- Data inputs, progress lines and --dump-outputs -------------------------

namespace {

/// A manifest of `world` ranks, rank R running rankR.program.pb.
/// `stages` > 0: rank r is stage r % stages of replica r / stages.
void writeManifest(const std::string &dir, int world, const std::string &params0 = "",
                   int stages = 0) {
  program::PlanManifest m;
  m.set_format_version(program::FORMAT_VERSION_1);
  m.set_world_size(world);
  m.set_rendezvous(program::RENDEZVOUS_FILE);
  m.set_rendezvous_address("rendezvous");
  for (int r = 0; r < world; ++r) {
    auto *entry = m.add_ranks();
    entry->set_rank(r);
    entry->set_device("cpu");
    entry->set_address("127.0.0.1");
    entry->set_program_file("rank" + std::to_string(r) + ".program.pb");
    if (r == 0 && !params0.empty())
      entry->set_parameter_file(params0);
    if (stages > 0) {
      entry->set_stage(r % stages);
      entry->set_replica(r / stages);
    }
  }
  ASSERT_TRUE(writeMessage(m, dir + "/plan.pb").isOk());
}

/// input_ids, labels [2, 8] i64 -> ids_out, labels_out (Identity) and
/// loss = sum(labels); with `sendTo` >= 0 also sends f32(ids) to that rank,
/// with `recvFrom` >= 0 receives a f32[2x8] from it instead.
ProgramBuilder tokenProgram(int rank, int world, int sendTo, int recvFrom) {
  ProgramBuilder b(rank, world);
  uint32_t ids = b.addValue("input_ids", program::DTYPE_I64, {2, 8}, program::ROLE_INPUT);
  uint32_t lab = b.addValue("labels", program::DTYPE_I64, {2, 8}, program::ROLE_INPUT);
  uint32_t idsOut = b.addValue("ids_out", program::DTYPE_I64, {2, 8}, program::ROLE_OUTPUT);
  uint32_t labOut = b.addValue("labels_out", program::DTYPE_I64, {2, 8}, program::ROLE_OUTPUT);
  uint32_t labF = b.addValue("labels_f", program::DTYPE_F32, {2, 8}, program::ROLE_ACTIVATION);
  uint32_t loss = b.addValue("loss", program::DTYPE_F32, {}, program::ROLE_OUTPUT);
  uint32_t idsF = b.addValue("ids_f", program::DTYPE_F32, {2, 8}, program::ROLE_ACTIVATION);
  b.addKernel("Identity", {ids}, {idsOut});
  b.addKernel("Identity", {lab}, {labOut});
  setInt(b.addKernel("Cast", {lab}, {labF}), "to", program::DTYPE_F32);
  setInt(b.addKernel("ReduceSum", {labF}, {loss}), "keepdims", 0);
  setInt(b.addKernel("Cast", {ids}, {idsF}), "to", program::DTYPE_F32);
  b.addRunStep();
  if (sendTo >= 0) {
    auto *send = b.get().add_steps()->mutable_send();
    send->set_value_id(idsF);
    send->set_peer(sendTo);
    send->set_channel(2);
  }
  if (recvFrom >= 0) {
    uint32_t in = b.addValue("remote", program::DTYPE_F32, {2, 8}, program::ROLE_ACTIVATION);
    auto *recv = b.get().add_steps()->mutable_recv();
    recv->set_value_id(in);
    recv->set_peer(recvFrom);
    recv->set_channel(2);
  }
  return b;
}

/// Tokens 0, 1, 2, ... 2999 as uint16.
std::string writeTokens(const std::string &dir) {
  std::vector<uint16_t> t(3000);
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<uint16_t>(i);
  std::string path = dir + "/tokens.bin";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<char *>(t.data()), static_cast<std::streamsize>(t.size() * 2));
  return path;
}

std::vector<int64_t> readI64(const std::string &path) {
  StatusOr<data::NpyArray> a = data::readNpy(path);
  EXPECT_TRUE(a.isOk()) << a.getStatus().toString();
  if (!a.isOk() || a->dtype != program::DTYPE_I64)
    return {};
  std::vector<int64_t> v(a->bytes.size() / 8);
  std::memcpy(v.data(), a->bytes.data(), a->bytes.size());
  return v;
}

} // namespace

TEST(StraitRunData, TokensFeedInputsProgressAndDump) {
  std::string dir = makeDir();
  ProgramBuilder p = tokenProgram(0, 1, -1, -1);
  ASSERT_TRUE(writeMessage(p.get(), dir + "/rank0.program.pb").isOk());
  writeManifest(dir, 1);
  std::string tokens = writeTokens(dir);
  RunResult r = runStraitRun(dir + " --steps 3 --threads 1 --data " + tokens +
                             " --data-format tokens-u16 --dump-outputs " + dir + "/out");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  std::vector<int64_t> ids = readI64(dir + "/out/ids_out.rank0.npy");
  std::vector<int64_t> labels = readI64(dir + "/out/labels_out.rank0.npy");
  ASSERT_EQ(ids.size(), 16u);
  ASSERT_EQ(labels.size(), 16u);
  int64_t sum = 0;
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(labels[i], ids[i] + 1) << i; // next-token targets
    if (i % 8)
      EXPECT_EQ(ids[i], ids[i - 1] + 1) << i; // contiguous windows
    sum += labels[i];
  }
  EXPECT_GT(sum, 0); // not the zeros of an unfed input
  // One merged line per step on the launcher's stdout, the last one with the
  // loss of the dumped step.
  for (int s = 1; s <= 3; ++s)
    EXPECT_NE(r.output.find("step " + std::to_string(s) + "/3 loss "), std::string::npos)
        << r.output;
  EXPECT_NE(r.output.find("step 3/3 loss " + std::to_string(sum) + " tokens/s "),
            std::string::npos)
      << r.output;
}

TEST(StraitRunData, RanksSeeDistinctBatchesAndBytesPerPeer) {
  std::string dir = makeDir();
  ASSERT_TRUE(writeMessage(tokenProgram(0, 2, 1, -1).get(), dir + "/rank0.program.pb").isOk());
  ASSERT_TRUE(writeMessage(tokenProgram(1, 2, -1, 0).get(), dir + "/rank1.program.pb").isOk());
  writeManifest(dir, 2);
  std::string tokens = writeTokens(dir);
  RunResult r = runStraitRun(dir + " --steps 2 --threads 1 --timeout-ms 20000 --data " +
                             tokens + " --dump-outputs " + dir + "/out");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  std::vector<int64_t> ids0 = readI64(dir + "/out/ids_out.rank0.npy");
  std::vector<int64_t> ids1 = readI64(dir + "/out/ids_out.rank1.npy");
  ASSERT_EQ(ids0.size(), 16u);
  EXPECT_NE(ids0, ids1); // data-parallel ranks draw different windows
  // f32[2x8] = 64 bytes from rank 0 to rank 1 per step, plus the 16-byte
  // message header: the bytes the communicator posts to the transport.
  EXPECT_NE(r.output.find("| rank0 sent 1:80B recv -"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| rank1 sent - recv 0:80B"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 2/2 loss "), std::string::npos) << r.output;
}

TEST(StraitRunData, ShapeMismatchNamesInputFileAndShapes) {
  std::string dir = makeDir();
  ProgramBuilder b(0, 1);
  uint32_t x = b.addValue("images", program::DTYPE_F32, {2, 3, 4}, program::ROLE_INPUT);
  uint32_t y = b.addValue("y", program::DTYPE_F32, {2, 3, 4}, program::ROLE_OUTPUT);
  b.addKernel("Relu", {x}, {y});
  b.addRunStep();
  ASSERT_TRUE(writeMessage(b.get(), dir + "/rank0.program.pb").isOk());
  writeManifest(dir, 1);
  std::vector<float> samples(5 * 3 * 5, 1.0f);
  std::string npy = dir + "/images.npy";
  ASSERT_TRUE(data::writeNpy(npy, Tensor{program::DTYPE_F32, {5, 3, 5}, samples.data()}).isOk());
  RunResult r = runStraitRun(dir + " --steps 1 --threads 1 --data " + npy);
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_NE(r.output.find("'images'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(npy), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("expected [2x3x5], got [2x3x4]"), std::string::npos) << r.output;
  // A truncated npy file is named too.
  std::ofstream(dir + "/cut.npy", std::ios::binary) << "\x93NUMPY";
  r = runStraitRun(dir + " --steps 1 --threads 1 --data " + dir + "/cut.npy");
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_NE(r.output.find("cut.npy"), std::string::npos) << r.output;
}

TEST(StraitRunData, NpySamplesAndLabelsTrainALinearClassifier) {
  // x f32[8x4] (first float input), labels i64[8], lr; loss = sce(x W, labels);
  // SGD on W. The npy data: 60 samples of 3 classes, class c has feature c
  // set to 2 (+ small deterministic noise).
  std::string dir = makeDir();
  ProgramBuilder b(0, 1);
  uint32_t x = b.addValue("x", program::DTYPE_F32, {8, 4}, program::ROLE_INPUT);
  uint32_t y = b.addValue("labels", program::DTYPE_I64, {8}, program::ROLE_INPUT);
  uint32_t lr = b.addValue("lr", program::DTYPE_F32, {}, program::ROLE_INPUT);
  uint32_t w = b.addParameter("W", {4, 3});
  uint32_t vel = b.addValue("W.velocity", program::DTYPE_F32, {4, 3}, program::ROLE_OPTIMIZER_STATE);
  uint32_t z = b.addValue("z", program::DTYPE_F32, {8, 3}, program::ROLE_ACTIVATION);
  uint32_t loss = b.addValue("loss", program::DTYPE_F32, {}, program::ROLE_OUTPUT);
  uint32_t one = b.addConstant("one", {1.0f}, {});
  uint32_t dz = b.addValue("dz", program::DTYPE_F32, {8, 3}, program::ROLE_ACTIVATION);
  uint32_t xT = b.addValue("xT", program::DTYPE_F32, {4, 8}, program::ROLE_ACTIVATION);
  uint32_t dw = b.addValue("dW", program::DTYPE_F32, {4, 3}, program::ROLE_ACTIVATION);
  b.addKernel("MatMul", {x, w}, {z});
  b.addKernel("SoftmaxCrossEntropyLoss", {z, y}, {loss});
  b.addKernel("SoftmaxCrossEntropyLossGrad", {one, z, y}, {dz});
  b.addKernel("Transpose", {x}, {xT});
  b.addKernel("MatMul", {xT, dz}, {dw});
  b.addKernel("SGD", {lr, w, dw, vel}, {w, vel});
  b.addRunStep();
  ASSERT_TRUE(writeMessage(b.get(), dir + "/rank0.program.pb").isOk());
  program::ParameterShardFile shard;
  shard.set_format_version(program::FORMAT_VERSION_1);
  auto *e = shard.add_parameters();
  e->set_name("W");
  e->mutable_data()->set_dtype(program::DTYPE_F32);
  for (int64_t d : {4, 3})
    e->mutable_data()->add_shape(d);
  for (int i = 0; i < 12; ++i)
    e->mutable_data()->add_float_data(0.0f);
  ASSERT_TRUE(writeMessage(shard, dir + "/rank0.params.pb").isOk());
  writeManifest(dir, 1, "rank0.params.pb");
  std::vector<float> samples(60 * 4);
  std::vector<int64_t> labels(60);
  for (int n = 0; n < 60; ++n) {
    labels[n] = n % 3;
    for (int f = 0; f < 4; ++f)
      samples[n * 4 + f] = (f == n % 3 ? 2.0f : 0.0f) + 0.1f * static_cast<float>((n * 7 + f * 3) % 5 - 2);
  }
  ASSERT_TRUE(data::writeNpy(dir + "/x.npy", Tensor{program::DTYPE_F32, {60, 4}, samples.data()}).isOk());
  ASSERT_TRUE(data::writeNpy(dir + "/y.npy", Tensor{program::DTYPE_I64, {60}, labels.data()}).isOk());
  RunResult r = runStraitRun(dir + " --steps 30 --threads 1 --lr 0.5 --data " + dir +
                             "/x.npy --labels " + dir + "/y.npy --dump-outputs " + dir + "/out");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  auto lossAt = [&](const std::string &tag) {
    size_t pos = r.output.find(tag + " loss ");
    return pos == std::string::npos ? -1.0 : std::atof(r.output.c_str() + pos + tag.size() + 6);
  };
  double first = lossAt("step 1/30"), last = lossAt("step 30/30");
  EXPECT_NEAR(first, std::log(3.0), 1e-4) << r.output; // W = 0: uniform
  EXPECT_GT(last, 0.0) << r.output;
  EXPECT_LT(last, 0.3 * first) << r.output;
  EXPECT_NE(r.output.find("samples/s "), std::string::npos) << r.output;
  // The dumped batch: every row is a sample with its own label.
  std::vector<int64_t> fedLabels = readI64(dir + "/out/labels.rank0.npy");
  StatusOr<data::NpyArray> fedX = data::readNpy(dir + "/out/x.rank0.npy");
  ASSERT_TRUE(fedX.isOk()) << fedX.getStatus().toString();
  ASSERT_EQ(fedLabels.size(), 8u);
  ASSERT_EQ(fedX->bytes.size(), 8u * 4 * sizeof(float));
  const float *fx = reinterpret_cast<const float *>(fedX->bytes.data());
  for (int i = 0; i < 8; ++i)
    EXPECT_GT(fx[i * 4 + fedLabels[i]], 1.5f) << "row " << i;
}

TEST(StraitRunData, StagesOfAReplicaShareBatchesReplicasDiffer) {
  // 2 stages x 2 replicas: ranks 0,1 are replica 0, ranks 2,3 replica 1.
  std::string dir = makeDir();
  for (int r = 0; r < 4; ++r) {
    int peer = r ^ 1; // stage 0 sends to stage 1 of its replica
    ProgramBuilder p = tokenProgram(r, 4, r % 2 == 0 ? peer : -1, r % 2 == 1 ? peer : -1);
    ASSERT_TRUE(writeMessage(p.get(), dir + "/rank" + std::to_string(r) + ".program.pb").isOk());
  }
  writeManifest(dir, 4, "", 2);
  std::string tokens = writeTokens(dir);
  RunResult r = runStraitRun(dir + " --steps 2 --threads 1 --timeout-ms 20000 --data " +
                             tokens + " --dump-outputs " + dir + "/out");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  std::vector<int64_t> ids[4];
  for (int k = 0; k < 4; ++k) {
    ids[k] = readI64(dir + "/out/ids_out.rank" + std::to_string(k) + ".npy");
    ASSERT_EQ(ids[k].size(), 16u) << k;
  }
  EXPECT_EQ(ids[0], ids[1]); // the stages of replica 0
  EXPECT_EQ(ids[2], ids[3]); // the stages of replica 1
  EXPECT_NE(ids[0], ids[2]); // the replicas differ
  EXPECT_NE(r.output.find("step 2/2 loss "), std::string::npos) << r.output;
}
