//===- ExecutorTest.cpp - Executing multi-kernel programs -----------------===//
#include "TestUtil.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

/// y = sum(relu(x @ W + b)) with W, b from a shard file.
struct Mlp {
  ProgramBuilder b;
  uint32_t x, w, bias, h, a, r, y;
  Mlp() {
    x = b.addValue("x", program::DTYPE_F32, {2, 3}, program::ROLE_INPUT);
    w = b.addParameter("W", {3, 4});
    bias = b.addConstant("b", {0.5f, -0.5f, 1.0f, -1.0f}, {4});
    h = b.addValue("h", program::DTYPE_F32, {2, 4}, program::ROLE_ACTIVATION);
    a = b.addValue("a", program::DTYPE_F32, {2, 4}, program::ROLE_ACTIVATION);
    r = b.addValue("r", program::DTYPE_F32, {2, 4}, program::ROLE_ACTIVATION);
    y = b.addValue("y", program::DTYPE_F32, {}, program::ROLE_OUTPUT);
    b.addKernel("MatMul", {x, w}, {h});
    b.addKernel("Add", {h, bias}, {a});
    b.addKernel("Relu", {a}, {r});
    setInt(b.addKernel("ReduceSum", {r}, {y}), "keepdims", 0);
    b.addRunStep();
  }
};

program::ParameterShardFile shardWithW(const std::vector<float> &w) {
  program::ParameterShardFile f;
  f.set_format_version(program::FORMAT_VERSION_1);
  auto *e = f.add_parameters();
  e->set_name("W");
  e->mutable_data()->set_dtype(program::DTYPE_F32);
  e->mutable_data()->add_shape(3);
  e->mutable_data()->add_shape(4);
  for (float v : w)
    e->mutable_data()->add_float_data(v);
  return f;
}

} // namespace

TEST(Executor, RunsMlpAndMatchesReference) {
  Mlp m;
  BackendRegistry reg;
  registerCpuBackend(reg);
  auto exec = Executor::create(m.b.get(), reg);
  ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
  std::vector<float> x = {1, -2, 3, 0.5f, 0.25f, -1};
  std::vector<float> w = pseudoRandom(12, 3);
  ASSERT_TRUE((*exec)->loadParameters(shardWithW(w)).isOk());
  Tensor xt = *(*exec)->getValue(m.x);
  std::copy(x.begin(), x.end(), xt.as<float>());
  Status s = (*exec)->run();
  ASSERT_TRUE(s.isOk()) << s.toString();
  const float bias[4] = {0.5f, -0.5f, 1.0f, -1.0f};
  double ref = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      double acc = bias[j];
      for (int k = 0; k < 3; ++k)
        acc += x[i * 3 + k] * w[k * 4 + j];
      ref += std::max(0.0, acc);
    }
  EXPECT_NEAR((*exec)->getValueByName("y")->as<float>()[0], ref, 1e-5);
}

TEST(Executor, MemoryPlanReusesDeadActivations) {
  Mlp m;
  BackendRegistry reg;
  registerCpuBackend(reg);
  auto exec = Executor::create(m.b.get(), reg);
  ASSERT_TRUE(exec.isOk());
  // h, a, r are 32 bytes each (64 after alignment); h dies when a is made,
  // so r can take h's slot: two slots, not three.
  EXPECT_EQ((*exec)->getArenaBytes(), 128u);
  const auto &p = (*exec)->getProgram();
  EXPECT_EQ(p.values(m.h).arena_offset(), p.values(m.r).arena_offset());
  EXPECT_NE(p.values(m.h).arena_offset(), p.values(m.a).arena_offset());
}

TEST(Executor, MissingParameterNamesIt) {
  Mlp m;
  BackendRegistry reg;
  registerCpuBackend(reg);
  auto exec = Executor::create(m.b.get(), reg);
  ASSERT_TRUE(exec.isOk());
  program::ParameterShardFile empty;
  Status s = (*exec)->loadParameters(empty);
  EXPECT_EQ(s.getCode(), StatusCode::NotFound);
  EXPECT_NE(s.toString().find("parameter 'W'"), std::string::npos);
  EXPECT_NE(s.toString().find("rank 0 device cpu"), std::string::npos);
}

TEST(Executor, KernelErrorNamesRankStepAndKernel) {
  Mlp m;
  m.b.get().mutable_values(m.y)->add_shape(5); // ReduceSum output now wrong
  BackendRegistry reg;
  registerCpuBackend(reg);
  auto exec = Executor::create(m.b.get(), reg);
  ASSERT_TRUE(exec.isOk());
  Status s = (*exec)->run();
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("rank 0 device cpu step 0 kernel ReduceSum 'ReduceSum_3'"),
            std::string::npos) << s.toString();
  EXPECT_NE(s.toString().find("declared f32[5]"), std::string::npos);
}

TEST(Executor, UnknownOpAndUnknownDeviceAreRejectedAtLoad) {
  Mlp m;
  m.b.get().mutable_kernels(2)->set_op("FancyRelu");
  BackendRegistry reg;
  registerCpuBackend(reg);
  auto exec = Executor::create(m.b.get(), reg);
  ASSERT_FALSE(exec.isOk());
  EXPECT_EQ(exec.getStatus().getCode(), StatusCode::Unimplemented);
  EXPECT_NE(exec.getStatus().toString().find("FancyRelu"), std::string::npos);
  Mlp m2;
  m2.b.get().set_device("npu:0");
  auto exec2 = Executor::create(m2.b.get(), reg);
  ASSERT_FALSE(exec2.isOk());
  EXPECT_NE(exec2.getStatus().getMessage().find("npu:0"), std::string::npos);
}

TEST(Executor, CommunicationStepNeedsCommunicator) {
  ProgramBuilder b(0, 2);
  uint32_t x = b.addValue("x", program::DTYPE_F32, {4}, program::ROLE_INPUT);
  b.get().add_steps()->mutable_send()->set_value_id(x);
  b.get().mutable_steps(0)->mutable_send()->set_peer(1);
  BackendRegistry reg;
  registerCpuBackend(reg);
  auto exec = Executor::create(b.get(), reg);
  ASSERT_FALSE(exec.isOk());
  EXPECT_NE(exec.getStatus().toString().find("step 0"), std::string::npos);
  EXPECT_NE(exec.getStatus().toString().find("without a communicator"), std::string::npos);
}
