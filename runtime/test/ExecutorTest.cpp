//===- ExecutorTest.cpp - Executing multi-kernel programs -----------------===//
#include "TestUtil.h"
#include "../lib/cuda/GraphSegment.h"

#include <cmath>
#include <gtest/gtest.h>
#include <set>

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

/// An executor of `program` on the CPU backend (the registry lives as long
/// as the test program: executors keep a pointer to their backend); null
/// with a test failure when it does not load.
std::unique_ptr<Executor> cpuExecutor(const program::Program &program) {
  static BackendRegistry *reg = [] {
    auto *r = new BackendRegistry;
    registerCpuBackend(*r);
    return r;
  }();
  auto exec = Executor::create(program, *reg);
  EXPECT_TRUE(exec.isOk()) << exec.getStatus().toString();
  return exec.isOk() ? exec.takeValue() : nullptr;
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

// Reshape-like kernels (Flatten, Identity here) share their input's bytes:
// the copy vanishes (the kernel sees equal pointers) and the result is the
// same.
TEST(Executor, MemoryPlanAliasesReshapeOutputs) {
  ProgramBuilder b;
  uint32_t x = b.addValue("x", program::DTYPE_F32, {2, 3}, program::ROLE_INPUT);
  uint32_t h = b.addValue("h", program::DTYPE_F32, {2, 3}, program::ROLE_ACTIVATION);
  uint32_t r = b.addValue("r", program::DTYPE_F32, {1, 6}, program::ROLE_ACTIVATION);
  uint32_t u = b.addValue("u", program::DTYPE_F32, {1, 6}, program::ROLE_ACTIVATION);
  uint32_t z = b.addValue("z", program::DTYPE_F32, {1, 6}, program::ROLE_ACTIVATION);
  uint32_t y = b.addValue("y", program::DTYPE_F32, {}, program::ROLE_OUTPUT);
  b.addKernel("Relu", {x}, {h});
  setInt(b.addKernel("Flatten", {h}, {r}), "axis", 0);
  b.addKernel("Identity", {r}, {u});
  b.addKernel("Neg", {u}, {z});
  setInt(b.addKernel("ReduceSum", {z}, {y}), "keepdims", 0);
  b.addRunStep();
  std::unique_ptr<Executor> exec = cpuExecutor(b.get());
  ASSERT_TRUE(exec);
  const auto &p = exec->getProgram();
  EXPECT_EQ(p.values(r).arena_offset(), p.values(h).arena_offset());
  EXPECT_EQ(p.values(u).arena_offset(), p.values(h).arena_offset());
  // h's bytes stay taken while u is live: z gets another slot.
  EXPECT_NE(p.values(z).arena_offset(), p.values(h).arena_offset());
  std::vector<float> xs = {1, -2, 3, 0.5f, -0.25f, 4};
  Tensor xt = *exec->getValue(x);
  std::copy(xs.begin(), xs.end(), xt.as<float>());
  ASSERT_TRUE(exec->run().isOk());
  EXPECT_FLOAT_EQ(exec->getValue(y)->as<float>()[0], -(1 + 3 + 0.5f + 4));
}

// An all-reduce bucket's pattern (dist-bucket-all-reduces: Reshape, Concat,
// Split, Reshape): the Concat's inputs are computed in place in its output,
// and the Split's outputs are views of its input, so both copies vanish; the
// results are the same. An input read after the Concat keeps bytes of its
// own.
TEST(Executor, MemoryPlanPutsConcatInputsAndSplitOutputsInTheBucket) {
  ProgramBuilder b;
  auto act = [&](const char *name, const Shape &shape) {
    return b.addValue(name, program::DTYPE_F32, shape, program::ROLE_ACTIVATION);
  };
  uint32_t x1 = b.addValue("x1", program::DTYPE_F32, {6}, program::ROLE_INPUT);
  uint32_t x2 = b.addValue("x2", program::DTYPE_F32, {1, 4}, program::ROLE_INPUT);
  uint32_t g1 = act("g1", {6}), g2 = act("g2", {1, 4}), v2 = act("v2", {4});
  uint32_t g3 = act("g3", {6}); // read again after the Concat: not in place
  uint32_t bucket = act("bucket", {16});
  uint32_t o1 = act("o1", {6}), o2 = act("o2", {4}), o3 = act("o3", {6});
  uint32_t g4 = act("g4", {6}), m = act("m", {1, 6});
  uint32_t m1 = act("m1", {1, 2}), m2 = act("m2", {1, 4});
  uint32_t y1 = b.addValue("y1", program::DTYPE_F32, {6}, program::ROLE_OUTPUT);
  uint32_t y2 = b.addValue("y2", program::DTYPE_F32, {4}, program::ROLE_OUTPUT);
  uint32_t y3 = b.addValue("y3", program::DTYPE_F32, {6}, program::ROLE_OUTPUT);
  uint32_t y4 = b.addValue("y4", program::DTYPE_F32, {6}, program::ROLE_OUTPUT);
  uint32_t y5 = b.addValue("y5", program::DTYPE_F32, {1, 2}, program::ROLE_OUTPUT);
  b.addKernel("Relu", {x1}, {g1});
  b.addKernel("Neg", {x2}, {g2});
  b.addKernel("Squeeze", {g2}, {v2});
  b.addKernel("Abs", {x1}, {g3});
  setInt(b.addKernel("Concat", {g1, v2, g3}, {bucket}), "axis", 0);
  program::Kernel &split = b.addKernel("Split", {bucket}, {o1, o2, o3});
  setInts(split, "split", {6, 4, 6});
  setInt(split, "axis", 0);
  b.addKernel("Neg", {o1}, {y1});
  b.addKernel("Neg", {o2}, {y2});
  b.addKernel("Neg", {o3}, {y3});
  b.addKernel("Neg", {g3}, {y4});
  // [1, 6] split along axis 1 (the outer dimension is 1: contiguous runs,
  // views), and a [6] input written after the Split would not be.
  b.addKernel("Relu", {x1}, {g4});
  setInt(b.addKernel("Flatten", {g4}, {m}), "axis", 0);
  program::Kernel &rows = b.addKernel("Split", {m}, {m1, m2});
  setInts(rows, "split", {2, 4});
  setInt(rows, "axis", 1);
  b.addKernel("Neg", {m1}, {y5});
  b.addRunStep();
  std::unique_ptr<Executor> exec = cpuExecutor(b.get());
  ASSERT_TRUE(exec);
  const auto &p = exec->getProgram();
  auto at = [&](uint32_t v) { return p.values(v).arena_offset(); };
  uint64_t base = at(bucket);
  EXPECT_EQ(at(g1), base);
  EXPECT_EQ(at(g2), base + 24);
  EXPECT_EQ(at(v2), base + 24);
  EXPECT_EQ(at(o1), base);
  EXPECT_EQ(at(o2), base + 24);
  EXPECT_EQ(at(o3), base + 40);
  EXPECT_TRUE(at(g3) + 24 <= base || at(g3) >= base + 64) << "g3 is read after the Concat";
  EXPECT_EQ(at(m1), at(g4));
  EXPECT_EQ(at(m2), at(g4) + 8);
  std::vector<float> a = {1, -2, 3, -4, 5, -6}, c = {0.5f, -1, 2, -3};
  std::copy(a.begin(), a.end(), exec->getValue(x1)->as<float>());
  std::copy(c.begin(), c.end(), exec->getValue(x2)->as<float>());
  Status ran = exec->run();
  ASSERT_TRUE(ran.isOk()) << ran.toString();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(exec->getValue(y1)->as<float>()[i], -std::max(0.0f, a[i]));
    EXPECT_EQ(exec->getValue(y3)->as<float>()[i], -std::fabs(a[i]));
    EXPECT_EQ(exec->getValue(y4)->as<float>()[i], -std::fabs(a[i]));
  }
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(exec->getValue(y2)->as<float>()[i], c[i]);
  EXPECT_EQ(exec->getValue(y5)->as<float>()[0], -std::max(0.0f, a[0]));
  EXPECT_EQ(exec->getValue(y5)->as<float>()[1], -std::max(0.0f, a[1]));
}

// Gradient accumulators live in the arena (the first micro-batch overwrites
// them): accumulated over two micro-batches and bucketed (Flatten, Concat),
// each is accumulated in place in its run of the bucket and the Flatten of
// one is a view of it, so neither copy is made; one read again after the
// Concat keeps bytes of its own. The bucket holds the micro-batches' mean.
TEST(Executor, AccumulatorsAreAccumulatedInTheirBucket) {
  ProgramBuilder b;
  auto f32 = [&](const char *name, const Shape &shape, program::ValueRole role) {
    return b.addValue(name, program::DTYPE_F32, shape, role);
  };
  uint32_t x = f32("x", {1, 6}, program::ROLE_INPUT), z = f32("z", {2, 2}, program::ROLE_INPUT);
  uint32_t w = f32("w", {1, 2}, program::ROLE_INPUT);
  uint32_t g1 = f32("g1", {1, 6}, program::ROLE_ACTIVATION);
  uint32_t g2 = f32("g2", {2, 2}, program::ROLE_ACTIVATION);
  uint32_t g3 = f32("g3", {1, 2}, program::ROLE_ACTIVATION);
  uint32_t acc1 = f32("acc1", {1, 6}, program::ROLE_GRADIENT);
  uint32_t acc2 = f32("acc2", {2, 2}, program::ROLE_GRADIENT);
  uint32_t acc3 = f32("acc3", {1, 2}, program::ROLE_GRADIENT); // read after the Concat
  uint32_t flat = f32("flat", {1, 4}, program::ROLE_ACTIVATION);
  uint32_t bucket = f32("bucket", {1, 12}, program::ROLE_ACTIVATION);
  uint32_t y = f32("y", {1, 12}, program::ROLE_OUTPUT),
           y3 = f32("y3", {1, 2}, program::ROLE_OUTPUT);
  b.addKernel("Relu", {x}, {g1});
  b.addKernel("Neg", {z}, {g2});
  b.addKernel("Neg", {w}, {g3});
  for (auto [g, acc] : {std::pair{g1, acc1}, {g2, acc2}, {g3, acc3}})
    setInt(b.addKernel("AccumulateGrad", {g}, {acc}), "micro_batches", 2);
  setInt(b.addKernel("Flatten", {acc2}, {flat}), "axis", 0);
  setInt(b.addKernel("Concat", {acc1, flat, acc3}, {bucket}), "axis", 1);
  b.addKernel("Neg", {bucket}, {y});
  b.addKernel("Neg", {acc3}, {y3});
  for (int mb = 0; mb < 2; ++mb) {
    b.addRunStep({0, 1, 2, 3, 4, 5});
    b.get().mutable_steps(mb)->set_micro_batch(mb);
  }
  b.addRunStep({6, 7, 8, 9});
  std::unique_ptr<Executor> exec = cpuExecutor(b.get());
  ASSERT_TRUE(exec);
  const auto &p = exec->getProgram();
  auto at = [&](uint32_t v) { return p.values(v).arena_offset(); };
  uint64_t base = at(bucket);
  EXPECT_EQ(at(acc1), base);
  EXPECT_EQ(at(acc2), base + 24);
  EXPECT_EQ(at(flat), base + 24);
  EXPECT_TRUE(at(acc3) + 8 <= base || at(acc3) >= base + 48) << "acc3 is read after the Concat";
  std::vector<float> xs[2] = {{1, -2, 3, -4, 5, -6}, {-1, 4, 2, 8, -3, 1}};
  std::vector<float> zs[2] = {{0.5f, -1, 2, -3}, {1.5f, 1, -2, 0}};
  std::vector<float> ws[2] = {{3, -0.5f}, {-1, 2.5f}};
  for (int mb = 0; mb < 2; ++mb) {
    std::copy(xs[mb].begin(), xs[mb].end(), exec->getValue(x)->as<float>());
    std::copy(zs[mb].begin(), zs[mb].end(), exec->getValue(z)->as<float>());
    std::copy(ws[mb].begin(), ws[mb].end(), exec->getValue(w)->as<float>());
    Status ran = exec->runStep(mb);
    ASSERT_TRUE(ran.isOk()) << ran.toString();
  }
  Status ran = exec->runStep(2);
  ASSERT_TRUE(ran.isOk()) << ran.toString();
  std::vector<float> want;
  for (int i = 0; i < 6; ++i)
    want.push_back(-(std::max(0.0f, xs[0][i]) + std::max(0.0f, xs[1][i])) * 0.5f);
  for (int i = 0; i < 4; ++i)
    want.push_back((zs[0][i] + zs[1][i]) * 0.5f);
  for (int i = 0; i < 2; ++i)
    want.push_back((ws[0][i] + ws[1][i]) * 0.5f);
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(exec->getValue(y)->as<float>()[i], want[i]) << i;
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(exec->getValue(y3)->as<float>()[i], want[10 + i]) << i;
}

// An accumulator keeps nothing from the previous step, so a program that
// reads one before a kernel of the step writes it (here a kernel, then an
// all-reduce) is refused at load, naming the value.
TEST(Executor, AccumulatorReadBeforeItsWriteIsRefused) {
  for (bool byAllReduce : {false, true}) {
    ProgramBuilder b;
    uint32_t g = b.addValue("dW", program::DTYPE_F32, {4}, program::ROLE_GRADIENT);
    uint32_t y = b.addValue("y", program::DTYPE_F32, {4}, program::ROLE_OUTPUT);
    if (byAllReduce) {
      auto *ar = b.get().add_steps()->mutable_all_reduce();
      ar->add_value_ids(g);
      ar->set_reduce(program::REDUCE_SUM);
    }
    b.addKernel("Neg", {g}, {y});
    b.addRunStep();
    BackendRegistry reg;
    registerCpuBackend(reg);
    auto exec = Executor::create(b.get(), reg);
    ASSERT_FALSE(exec.isOk());
    EXPECT_NE(exec.getStatus().toString().find(
                  "values[0] 'dW': a gradient accumulator (ROLE_GRADIENT) is read before"),
              std::string::npos)
        << exec.getStatus().toString();
  }
}

// Small integer constants (axes, shapes, bounds) keep a host copy that a
// GPU kernel reads without waiting for its stream; other values do not.
TEST(Executor, SmallIntegerConstantsKeepAHostCopy) {
  ProgramBuilder b;
  uint32_t x = b.addValue("x", program::DTYPE_F32, {2, 3}, program::ROLE_INPUT);
  uint32_t y = b.addValue("y", program::DTYPE_F32, {2}, program::ROLE_OUTPUT);
  uint32_t f = b.addConstant("f", {1.5f}, {1});
  auto intConstant = [&](const std::string &name, std::vector<int64_t> data) {
    program::Value *v = b.get().add_values();
    v->set_id(static_cast<uint32_t>(b.get().values_size() - 1));
    v->set_name(name);
    v->set_dtype(program::DTYPE_I64);
    v->add_shape(static_cast<int64_t>(data.size()));
    v->set_role(program::ROLE_CONSTANT);
    program::TensorData *d = v->mutable_constant();
    d->set_dtype(program::DTYPE_I64);
    d->add_shape(static_cast<int64_t>(data.size()));
    for (int64_t e : data)
      d->add_int64_data(e);
    return v->id();
  };
  uint32_t axes = intConstant("axes", {-1});
  uint32_t big = intConstant("big", std::vector<int64_t>(2000, 7));
  setInt(b.addKernel("ReduceSum", {x, axes}, {y}), "keepdims", 0);
  b.addRunStep();
  BackendRegistry reg;
  registerCpuBackend(reg);
  auto exec = Executor::create(b.get(), reg);
  ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
  Tensor a = *(*exec)->getValue(axes);
  ASSERT_NE(a.host, nullptr);
  EXPECT_NE(a.host, a.data);
  EXPECT_EQ(static_cast<const int64_t *>(a.host)[0], -1);
  EXPECT_EQ((*exec)->getValue(big)->host, nullptr);
  EXPECT_EQ((*exec)->getValue(f)->host, nullptr);
  EXPECT_EQ((*exec)->getValue(x)->host, nullptr);
  std::vector<float> xs = {1, 2, 3, 4, 5, 6};
  std::copy(xs.begin(), xs.end(), (*exec)->getValue(x)->as<float>());
  ASSERT_TRUE((*exec)->run().isOk());
  EXPECT_FLOAT_EQ((*exec)->getValue(y)->as<float>()[1], 15.0f);
}

// A `once` step (the parameters' 16-bit copies) runs before the first
// iteration and again only after loadParameters or
// invalidateParameterCopies; the iteration reads its persistent result.
// Here: copy = Cast(W, bf16) once; every run y = ReduceSum(copy) (widened).
TEST(Executor, OnceStepsRunBeforeTheFirstIterationAndAfterLoading) {
  ProgramBuilder b;
  uint32_t w = b.addParameter("W", {3, 4});
  uint32_t copy = b.addValue("W.bf16", program::DTYPE_BF16, {3, 4}, program::ROLE_PARAMETER_COPY);
  uint32_t wide = b.addValue("wide", program::DTYPE_F32, {3, 4}, program::ROLE_ACTIVATION);
  uint32_t y = b.addValue("y", program::DTYPE_F32, {}, program::ROLE_OUTPUT);
  setInt(b.addKernel("Cast", {w}, {copy}), "to", program::DTYPE_BF16);
  b.addRunStep({0});
  b.get().mutable_steps(0)->set_once(true);
  setInt(b.addKernel("Cast", {copy}, {wide}), "to", program::DTYPE_F32);
  setInt(b.addKernel("ReduceSum", {wide}, {y}), "keepdims", 0);
  b.addRunStep({1, 2});
  BackendRegistry reg;
  registerCpuBackend(reg);
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlapped" : "sequential");
    auto exec = Executor::create(b.get(), reg);
    ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
    (*exec)->setOverlapCommunication(overlap);
    std::vector<float> ones(12, 1.0f), twos(12, 2.0f);
    ASSERT_TRUE((*exec)->loadParameters(shardWithW(ones)).isOk());
    Tensor wt = *(*exec)->getValue(w);
    auto runY = [&] {
      Status s = (*exec)->run();
      EXPECT_TRUE(s.isOk()) << s.toString();
      return (*exec)->getValue(y)->as<float>()[0];
    };
    EXPECT_FLOAT_EQ(runY(), 12.0f);
    // Writing W behind the executor's back: the copy is not cast again.
    std::fill(wt.as<float>(), wt.as<float>() + 12, 3.0f);
    EXPECT_FLOAT_EQ(runY(), 12.0f);
    (*exec)->invalidateParameterCopies();
    EXPECT_FLOAT_EQ(runY(), 36.0f);
    // Loading parameters casts them again, once.
    ASSERT_TRUE((*exec)->loadParameters(shardWithW(twos)).isOk());
    EXPECT_FLOAT_EQ(runY(), 24.0f);
    std::fill(wt.as<float>(), wt.as<float>() + 12, 5.0f);
    EXPECT_FLOAT_EQ(runY(), 24.0f);
  }
  // Only run steps may be once.
  program::Program bad = b.get();
  program::Step *comm = bad.add_steps();
  comm->set_id(bad.steps_size() - 1);
  comm->mutable_send()->set_value_id(y);
  comm->mutable_send()->set_peer(0);
  comm->set_once(true);
  Status st = validateProgram(bad);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("steps[2].once: only run steps may run once"), std::string::npos)
      << st.toString();
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

// --- Segments (Backend::createSegment) ----------------------------------------

namespace {

/// The CPU backend, recording what the executor does with segments: "S<id>["
/// kernel names "]" for each KernelSegment::run (id: the segment object, in
/// order of creation), "sync" for each synchronize(), and kernels launched
/// outside any segment as "!<name>".
class RecordingBackend : public Backend {
public:
  std::string name() const override { return "cpu"; }
  StatusOr<KernelFn> resolve(const program::Kernel &kernel) const override {
    STRAIT_ASSIGN_OR_RETURN(KernelFn fn, cpu->resolve(kernel));
    std::string name = kernel.name();
    return KernelFn([this, fn, name](KernelContext &ctx) {
      trace.push_back(inSegment ? name : "!" + name);
      return fn(ctx);
    });
  }
  std::vector<std::string> supportedOps() const override { return cpu->supportedOps(); }
  StatusOr<Buffer> allocate(size_t bytes) const override { return cpu->allocate(bytes); }
  Status synchronize() const override {
    trace.push_back("sync");
    return Status::ok();
  }
  std::unique_ptr<KernelSegment> createSegment() const override {
    return std::make_unique<Recording>(*this, created++);
  }
  bool runsOnHost(const program::Kernel &kernel) const override {
    return hostOps.count(kernel.op()) > 0;
  }
  /// Ops that the backend declares to run on the host.
  std::set<std::string> hostOps;
  /// The trace since the last call, segments folded into "S<id>[a b]".
  std::vector<std::string> take() const {
    std::vector<std::string> out;
    bool open = false;
    for (const std::string &e : trace) {
      if (e == "]") {
        out.back() += "]";
        open = false;
      } else if (open) {
        out.back() += (out.back().back() == '[' ? "" : " ") + e;
      } else {
        out.push_back(e);
        open = e.back() == '[';
      }
    }
    trace.clear();
    return out;
  }

private:
  struct Recording : KernelSegment {
    Recording(const RecordingBackend &b, int id) : b(b), id(id) {}
    Status run(const std::function<Status()> &launch) override {
      b.trace.push_back("S" + std::to_string(id) + "[");
      b.inSegment = true;
      Status s = launch();
      b.inSegment = false;
      b.trace.push_back("]");
      return s;
    }
    const RecordingBackend &b;
    int id;
  };
  std::unique_ptr<Backend> cpu = createCpuBackend();
  mutable std::vector<std::string> trace;
  mutable bool inSegment = false;
  mutable int created = 0;
};

/// Rank 0 of 2 whose peer is simulated: sends are dropped, receives yield
/// 0.5 everywhere, an all-reduce sum doubles the tensor (the peer holds the
/// same values).
class PeerlessCommunicator : public Communicator {
public:
  int getRank() const override { return 0; }
  int getWorldSize() const override { return 2; }
  Status send(const Tensor &, int, uint32_t) override { return Status::ok(); }
  Status recv(const Tensor &t, int, uint32_t) override {
    std::fill(t.as<float>(), t.as<float>() + t.numel(), 0.5f);
    return Status::ok();
  }
  Status allReduceSum(const Tensor &t, uint32_t) override {
    for (int64_t i = 0; i < t.numel(); ++i)
      t.as<float>()[i] *= 2.0f;
    return Status::ok();
  }
  Status allReduceSumGroup(const Tensor &t, const std::vector<int> &, uint32_t c) override {
    return allReduceSum(t, c);
  }
  Status barrier() override { return Status::ok(); }
};

/// Kernels k0..k7 around a send (step 1), a receive (step 3) and an
/// all-reduce (step 5). k3 overwrites the value in flight of the send, k6
/// reads the received value, k7 the all-reduced one.
program::Program segmentProgram() {
  ProgramBuilder b(0, 2);
  auto act = [&](const char *name) {
    return b.addValue(name, program::DTYPE_F32, {64}, program::ROLE_ACTIVATION);
  };
  uint32_t x = b.addValue("x", program::DTYPE_F32, {64}, program::ROLE_INPUT);
  uint32_t a = act("a"), bv = act("b"), c = act("c"), d = act("d"), e = act("e"),
           r = act("r");
  uint32_t g = b.addValue("g", program::DTYPE_F32, {64}, program::ROLE_GRADIENT);
  uint32_t y = b.addValue("y", program::DTYPE_F32, {64}, program::ROLE_OUTPUT);
  uint32_t k0 = b.addKernel("Relu", {x}, {a}).id(), k1 = b.addKernel("Neg", {a}, {bv}).id();
  b.addRunStep({k0, k1});
  auto *send = b.get().add_steps()->mutable_send();
  send->set_value_id(bv);
  send->set_peer(1);
  uint32_t k2 = b.addKernel("Exp", {x}, {c}).id(), k3 = b.addKernel("Neg", {c}, {bv}).id(),
           k4 = b.addKernel("Relu", {bv}, {d}).id();
  b.addRunStep({k2, k3, k4});
  auto *recv = b.get().add_steps()->mutable_recv();
  recv->set_value_id(r);
  recv->set_peer(1);
  recv->set_channel(1);
  uint32_t k5 = b.addKernel("Neg", {d}, {e}).id(), k6 = b.addKernel("Add", {e, r}, {g}).id();
  b.addRunStep({k5, k6});
  auto *ar = b.get().add_steps()->mutable_all_reduce();
  ar->add_value_ids(g);
  ar->set_reduce(program::REDUCE_MEAN);
  ar->set_channel(2);
  b.addRunStep({b.addKernel("Neg", {g}, {y}).id()});
  return b.get();
}

/// segmentProgram loaded on a RecordingBackend (ops in `hostOps` run on the
/// host) with a PeerlessCommunicator; the trace of the load is dropped.
struct SegmentRun {
  explicit SegmentRun(bool overlap, std::set<std::string> hostOps = {}) {
    auto owned = std::make_unique<RecordingBackend>();
    owned->hostOps = std::move(hostOps);
    rec = owned.get();
    reg.add(std::move(owned));
    exec = Executor::create(segmentProgram(), reg, &comm);
    if (exec.isOk())
      (*exec)->setOverlapCommunication(overlap);
    rec->take();
  }
  BackendRegistry reg;
  PeerlessCommunicator comm;
  const RecordingBackend *rec = nullptr;
  StatusOr<std::unique_ptr<Executor>> exec = internalError("not created");
};

} // namespace

TEST(ExecutorSegments, SequentialPathSegmentsAreTheRunsBetweenCommunicationSteps) {
  SegmentRun r(false);
  auto &exec = r.exec;
  const RecordingBackend &rec = *r.rec;
  ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
  const std::vector<std::string> expect = {
      "S0[Relu_0 Neg_1]", "sync", "S1[Exp_2 Neg_3 Relu_4]", "sync",
      "S2[Neg_5 Add_6]",  "sync", "S3[Neg_7]",              "sync"};
  for (int it = 0; it < 2; ++it) { // the same segment objects every run
    ASSERT_TRUE((*exec)->run().isOk());
    EXPECT_EQ(rec.take(), expect) << "run " << it;
  }
}

TEST(ExecutorSegments, OverlappedPathSplitsWhereAKernelWaitsForATransfer) {
  SegmentRun r(true);
  auto &exec = r.exec;
  const RecordingBackend &rec = *r.rec;
  ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
  // Step 1 synchronizes and queues the send and (prefetch) the receive of
  // step 3. Neg_3 overwrites the sent value: it waits for the send, so a
  // segment starts there; Add_6 reads the received value (waits for the
  // receive), Neg_7 the all-reduced one (synchronize + wait).
  const std::vector<std::string> expect = {
      "S0[Relu_0 Neg_1]", "sync", "S1[Exp_2]", "S2[Neg_3 Relu_4]", "S3[Neg_5]",
      "S4[Add_6]",        "sync", "S5[Neg_7]", "sync"};
  std::vector<float> results[2];
  for (int it = 0; it < 2; ++it) {
    Tensor x = *(*exec)->getValueByName("x");
    auto v = gaussian(64, 7);
    std::copy(v.begin(), v.end(), x.as<float>());
    ASSERT_TRUE((*exec)->run().isOk());
    EXPECT_EQ(rec.take(), expect) << "run " << it;
    Tensor y = *(*exec)->getValueByName("y");
    results[it].assign(y.as<float>(), y.as<float>() + 64);
  }
  // y = -(-(relu(-exp(x))... : g = -relu(-exp(x)) + 0.5 = 0.5 (exp > 0), the
  // mean of the doubled g is g, y = -g.
  for (float f : results[0])
    EXPECT_EQ(f, -0.5f);
  EXPECT_EQ(results[0], results[1]);
}

TEST(ExecutorSegments, AHostKernelRunsOutsideSegmentsInBothPaths) {
  for (bool overlap : {false, true}) {
    SegmentRun r(overlap, {"Exp"});
    ASSERT_TRUE(r.exec.isOk()) << r.exec.getStatus().toString();
    ASSERT_TRUE((*r.exec)->run().isOk());
    // Exp_2 ("!": launched outside a segment) splits the run after the
    // send; the kernels before and after it stay in segments.
    std::vector<std::string> expect =
        overlap ? std::vector<std::string>{"S0[Relu_0 Neg_1]", "sync", "!Exp_2",
                                           "S1[Neg_3 Relu_4]", "S2[Neg_5]", "S3[Add_6]",
                                           "sync", "S4[Neg_7]", "sync"}
                : std::vector<std::string>{"S0[Relu_0 Neg_1]", "sync", "!Exp_2",
                                           "S1[Neg_3 Relu_4]", "sync", "S2[Neg_5 Add_6]",
                                           "sync", "S3[Neg_7]", "sync"};
    EXPECT_EQ(r.rec->take(), expect) << "overlap " << overlap;
  }
}

// --- The CUDA graph policy of a segment (lib/cuda/GraphSegment.h) -----------
//
// The policy has no CUDA call; a scripted Api stands for the CUDA runtime
// (begin/end capture, replay) and records what the segment asks of it.

namespace {

struct ScriptedApi {
  std::vector<std::string> *log;
  bool on = true, beginOk = true, endOk = true, retryable = false;
  bool capturing = false;
  CudaGraphStats counters;
  bool enabled() const { return on; }
  bool begin(std::string &why) {
    log->push_back("begin");
    why = "refused";
    capturing = beginOk;
    return beginOk;
  }
  bool end(std::string &why) {
    log->push_back("end");
    capturing = false;
    why = "cannot instantiate";
    return endOk;
  }
  Status replay() {
    log->push_back("replay");
    return Status::ok();
  }
  bool takeRetryable() {
    bool r = retryable;
    retryable = false;
    return r;
  }
  void warn(const std::string &why) { log->push_back("warn " + why); }
  CudaGraphStats &stats() { return counters; }
};

struct PolicyRun {
  std::vector<std::string> log;
  cuda::GraphSegment<ScriptedApi> segment{ScriptedApi{&log}};
  /// A launch that fails while capturing when `refuseCapture`, and always
  /// when `broken` (a kernel error).
  bool refuseCapture = false, broken = false;
  Status run() {
    log.clear();
    return segment.run([&]() -> Status {
      bool capturing = segment.getApi().capturing;
      log.push_back(capturing ? "launch(captured)" : "launch");
      if (broken)
        return invalidArgument("kernel error");
      if (capturing && refuseCapture)
        return unavailable("waits for the stream");
      return Status::ok();
    });
  }
};

using Log = std::vector<std::string>;

} // namespace

TEST(GraphSegmentPolicy, WarmsUpCapturesOnTheSecondRunThenReplays) {
  PolicyRun p;
  ASSERT_TRUE(p.run().isOk());
  EXPECT_EQ(p.log, (Log{"launch"}));
  ASSERT_TRUE(p.run().isOk());
  EXPECT_EQ(p.log, (Log{"begin", "launch(captured)", "end", "replay"}));
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(p.run().isOk());
    EXPECT_EQ(p.log, (Log{"replay"}));
  }
  const CudaGraphStats &st = p.segment.getApi().counters;
  EXPECT_EQ(st.captured, 1);
  EXPECT_EQ(st.replays, 3);
  EXPECT_EQ(st.direct, 1);
  EXPECT_EQ(st.disabled, 0);
}

TEST(GraphSegmentPolicy, AFailedCaptureLaunchesDirectlyAndDisablesTheGraph) {
  PolicyRun p;
  p.refuseCapture = true; // e.g. a host-fallback kernel synchronizes
  ASSERT_TRUE(p.run().isOk());
  Status s = p.run();
  ASSERT_TRUE(s.isOk()) << s.toString(); // the failure is not the caller's
  EXPECT_EQ(p.log, (Log{"begin", "launch(captured)", "end", "warn waits for the stream", "launch"}));
  ASSERT_TRUE(p.run().isOk());
  EXPECT_EQ(p.log, (Log{"launch"}));
  EXPECT_EQ(p.segment.getApi().counters.disabled, 1);
  EXPECT_EQ(p.segment.getApi().counters.captured, 0);

  PolicyRun q; // instantiation fails
  q.segment.getApi().endOk = false;
  ASSERT_TRUE(q.run().isOk());
  ASSERT_TRUE(q.run().isOk());
  EXPECT_EQ(q.log, (Log{"begin", "launch(captured)", "end", "warn cannot instantiate", "launch"}));
  PolicyRun r; // begin fails: no end
  r.segment.getApi().beginOk = false;
  ASSERT_TRUE(r.run().isOk());
  ASSERT_TRUE(r.run().isOk());
  EXPECT_EQ(r.log, (Log{"begin", "warn begin capture: refused", "launch"}));
}

TEST(GraphSegmentPolicy, ScratchGrowthRetriesTheCaptureNextRun) {
  PolicyRun p;
  ASSERT_TRUE(p.run().isOk());
  p.refuseCapture = true;
  p.segment.getApi().retryable = true; // the scratch block had to grow
  ASSERT_TRUE(p.run().isOk());
  EXPECT_EQ(p.log, (Log{"begin", "launch(captured)", "end", "launch"}));
  p.refuseCapture = false;
  ASSERT_TRUE(p.run().isOk());
  EXPECT_EQ(p.log, (Log{"begin", "launch(captured)", "end", "replay"}));
  EXPECT_EQ(p.segment.getApi().counters.disabled, 0);
}

TEST(GraphSegmentPolicy, OffOrBrokenKernelsLaunchDirectlyAndReportErrors) {
  PolicyRun p;
  p.segment.getApi().on = false; // graphs off or syncEachKernel
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(p.run().isOk());
    EXPECT_EQ(p.log, (Log{"launch"}));
  }
  PolicyRun q;
  q.broken = true;
  EXPECT_FALSE(q.run().isOk());
  Status s = q.run(); // the capture fails, the direct launch reports the error
  EXPECT_EQ(s.getCode(), StatusCode::InvalidArgument);
  EXPECT_EQ(q.log, (Log{"begin", "launch(captured)", "end", "warn kernel error", "launch"}));
}
