//===- CudaRotaryTest.cpp - FusedRotaryEmbedding on the GPU ---------------===//
//
// The CUDA kernel (Rotary.cu) against the CPU kernel, bit for bit: f32,
// bf16 and f16 X, tables of X's type, f32 or mixed, both adjoints, the
// tables' usual broadcasts, a last dim of 1, rank 1, a rank-11 X whose
// leading dims merge, and a LLaMA-sized head. The CPU kernel itself equals
// the composed kernels bit for bit (RotaryTest.cpp), so this checks that
// the GPU does not contract into FMAs either. Skips without a GPU, except
// the static native-support rule (CudaRotaryNoDevice).
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "CudaSupport.h"

namespace {

class CudaRotary : public Cuda {};

constexpr DType F32 = program::DTYPE_F32, BF16 = program::DTYPE_BF16,
                F16 = program::DTYPE_F16;

/// An array of `dtype` (f32, bf16 or f16) holding v (rounded to nearest even).
Arr typed(DType dtype, Shape s, const std::vector<float> &v) {
  if (dtype == F32)
    return Arr::f(std::move(s), v);
  Arr a{dtype, std::move(s), {}};
  a.bytes.resize(v.size() * 2);
  for (size_t k = 0; k < v.size(); ++k) {
    uint16_t h;
    if (dtype == BF16) {
      h = bf16Bits(v[k]);
    } else {
      _Float16 x = static_cast<_Float16>(v[k]);
      std::memcpy(&h, &x, 2);
    }
    std::memcpy(a.bytes.data() + 2 * k, &h, 2);
  }
  return a;
}

struct Case {
  Shape x, cos, sin;
};

} // namespace

TEST_F(CudaRotary, EqualsCpuBitForBit) {
  REQUIRE_GPU();
  const std::vector<Case> cases = {
      {{2, 3, 5, 8}, {5, 8}, {5, 8}},
      {{2, 5, 3, 8}, {1, 5, 1, 8}, {1, 5, 1, 8}},
      {{2, 3, 5, 8}, {2, 1, 5, 8}, {2, 1, 5, 8}},
      {{2, 3, 5, 8}, {5, 1}, {5, 1}},
      {{2, 3, 5, 8}, {5, 8}, {2, 1, 5, 1}},
      {{6}, {6}, {1}},
      {{2, 1, 3, 1, 2, 1, 2, 1, 2, 3, 4}, {1, 2, 1, 1, 1, 2, 3, 4}, {1, 3, 1, 1, 1, 2, 1, 1, 3, 1}},
      {{2, 32, 128, 128}, {128, 128}, {128, 128}}};
  uint32_t seed = 1;
  for (const Case &c : cases)
    for (DType dt : {F32, BF16, F16})
      for (auto [ct, st] : {std::pair<DType, DType>{F32, F32}, {dt, dt}, {F32, dt}, {dt, F32}})
        for (int64_t adjoint : {0, 1}) {
          if (dt == F32 && (ct != F32 || st != F32))
            continue;
          std::string what = "X " + std::string(dtypeName(dt)) + shapeToString(c.x) + " Cos " +
                             dtypeName(ct) + shapeToString(c.cos) + " Sin " + dtypeName(st) +
                             shapeToString(c.sin) + " adjoint " + std::to_string(adjoint);
          SCOPED_TRACE(what);
          std::vector<Arr> ins = {typed(dt, c.x, gaussian(numElements(c.x), seed)),
                                  typed(ct, c.cos, pseudoRandom(numElements(c.cos), seed + 1)),
                                  typed(st, c.sin, pseudoRandom(numElements(c.sin), seed + 2))};
          ++seed;
          std::vector<Arr> cpu = {Arr::out(c.x, dt)}, gpu = cpu;
          Attrs attrs = [adjoint](program::Kernel &k) { setInt(k, "adjoint", adjoint); };
          Status s = runOn("cpu", registry, "FusedRotaryEmbedding", ins, cpu, attrs);
          ASSERT_TRUE(s.isOk()) << "cpu: " << s.toString();
          s = runOn("cuda:0", registry, "FusedRotaryEmbedding", ins, gpu, attrs);
          ASSERT_TRUE(s.isOk()) << "cuda: " << s.toString();
          ASSERT_EQ(cpu[0].bytes.size(), gpu[0].bytes.size());
          size_t es = dt == F32 ? 4 : 2, n = cpu[0].bytes.size() / es;
          int bad = 0;
          for (size_t k = 0; k < n && bad < 5; ++k)
            if (std::memcmp(cpu[0].bytes.data() + k * es, gpu[0].bytes.data() + k * es, es)) {
              ADD_FAILURE() << what << ": element " << k << " cpu " << cpu[0].at(k) << " cuda "
                            << gpu[0].at(k);
              ++bad;
            }
        }
}

// The support rule (no device needed): X f32, bf16 or f16, tables f32 or
// X's dtype, run natively; other types would go to the host fallback.
TEST(CudaRotaryNoDevice, NativeSupport) {
  using cuda::OperandType;
  program::Kernel k;
  k.set_op("FusedRotaryEmbedding");
  auto t = [](DType d, Shape s) { return OperandType{true, d, std::move(s)}; };
  Shape x = {2, 3, 5, 8}, tab = {5, 8};
  for (DType dt : {F32, BF16, F16}) {
    EXPECT_TRUE(cuda::nativeSupport({&k, {t(dt, x), t(F32, tab), t(dt, tab)}, {t(dt, x)}}).native)
        << dtypeName(dt);
    EXPECT_TRUE(cuda::nativeSupport({&k, {t(dt, x), t(dt, tab), t(F32, tab)}, {t(dt, x)}}).native)
        << dtypeName(dt);
  }
  cuda::NativeSupport f64 =
      cuda::nativeSupport({&k, {t(program::DTYPE_F64, x), t(F32, tab), t(F32, tab)}, {}});
  EXPECT_FALSE(f64.native);
  EXPECT_NE(f64.reason.find("X is f64"), std::string::npos) << f64.reason;
  cuda::NativeSupport mixed =
      cuda::nativeSupport({&k, {t(BF16, x), t(F32, tab), t(F16, tab)}, {t(BF16, x)}});
  EXPECT_FALSE(mixed.native);
  EXPECT_NE(mixed.reason.find("Sin is f16"), std::string::npos) << mixed.reason;
}

// Capture-safe: a forward and an adjoint FusedRotaryEmbedding in one segment,
// three runs with graphs on (direct, captured, replayed) and new X each run,
// equal the CPU backend bit for bit, and the segment is captured once and
// replayed (no allocation or synchronization refused the capture).
namespace {

/// Y = rope(X), Z = rope(Y, adjoint 1) on `device`; X bf16 [2, 4, 16, 32],
/// Cos f32 [16, 32], Sin bf16 [1, 1, 16, 32]. Returns Y and Z's bytes of
/// each of three runs.
void runRotarySteps(const std::string &device, std::vector<std::vector<char>> &outs,
                    CudaGraphStats &stats) {
  ProgramBuilder b;
  b.get().set_device(device);
  Shape xs = {2, 4, 16, 32};
  uint32_t x = b.addValue("x", BF16, xs, program::ROLE_INPUT),
           c = b.addValue("cos", F32, {16, 32}, program::ROLE_INPUT),
           s = b.addValue("sin", BF16, {1, 1, 16, 32}, program::ROLE_INPUT),
           y = b.addValue("y", BF16, xs, program::ROLE_OUTPUT),
           z = b.addValue("z", BF16, xs, program::ROLE_OUTPUT);
  b.addKernel("FusedRotaryEmbedding", {x, c, s}, {y}).set_name("rope");
  program::Kernel &adj = b.addKernel("FusedRotaryEmbedding", {y, c, s}, {z});
  adj.set_name("rope_adjoint");
  setInt(adj, "adjoint", 1);
  b.addRunStep();
  BackendRegistry reg;
  if (device == "cpu") {
    registerCpuBackend(reg);
  } else {
    CudaOptions co;
    co.graphs = true;
    ASSERT_TRUE(registerCudaBackend(reg, co).isOk());
  }
  auto exec = Executor::create(b.get(), reg);
  ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
  auto fill = [&](uint32_t id, uint32_t seed) {
    Tensor t = *(*exec)->getValue(id);
    Arr a = typed(t.dtype, t.shape, pseudoRandom(t.numel(), seed));
    std::memcpy(t.data, a.bytes.data(), a.bytes.size());
  };
  fill(c, 1);
  fill(s, 2);
  for (int run = 0; run < 3; ++run) {
    fill(x, 10 + run);
    Status st = (*exec)->run();
    ASSERT_TRUE(st.isOk()) << st.toString();
    for (uint32_t id : {y, z}) {
      Tensor t = *(*exec)->getValue(id);
      outs.emplace_back(t.as<char>(), t.as<char>() + t.byteSize());
    }
  }
  stats = cudaGraphStats(*reg.forDevice(device).takeValue());
}

} // namespace

TEST_F(CudaRotary, CapturedAndReplayedEqualsCpu) {
  REQUIRE_GPU();
  std::vector<std::vector<char>> gpu, cpu;
  CudaGraphStats on, none;
  runRotarySteps("cuda:0", gpu, on);
  runRotarySteps("cpu", cpu, none);
  ASSERT_EQ(gpu.size(), 6u);
  ASSERT_EQ(cpu.size(), 6u);
  for (size_t i = 0; i < gpu.size(); ++i)
    EXPECT_TRUE(gpu[i] == cpu[i]) << "run " << i / 2 << (i % 2 ? " Z" : " Y");
  EXPECT_NE(gpu[0], gpu[4]); // new X each run
  EXPECT_EQ(on.captured, 1);
  EXPECT_EQ(on.replays, 2);
  EXPECT_EQ(on.disabled, 0);
}
