//===- CudaAttentionTest.cpp - FusedAttention(+Grad) on the GPU -----------===//
//
// Each case runs FusedAttention and FusedAttentionGrad on the CUDA backend
// and compares them with an independent reference computed here in double
// from the contract (docs/runtime-cuda.md "Fused attention") and with the
// CPU backend's kernels (called by name through the kernel table). The
// gradient gets the reference's Y and LSE as inputs on every backend, so it
// is checked apart from the forward. Skips without a GPU, except the
// reference's own check and the flash dispatch rule (pure functions).
//
//===----------------------------------------------------------------------===//
#include "CudaAttentionTestUtil.h"

namespace {
class CudaAttention : public Cuda {};
} // namespace

// Runs everywhere: the double reference above against the CPU backend's
// kernels, so that the GPU tests' reference is itself checked on machines
// without a GPU.
TEST(CudaAttentionReference, MatchesCpuKernels) {
  BackendRegistry cpu;
  registerCpuBackend(cpu);
  Problem p;
  p.batch = {2, 3};
  p.tq = p.tk = 16;
  p.hasBias = true;
  p.biasShape = {2, 1, 16, 16};
  checkAttention(cpu, p, 11, f32Tol(), {"cpu"});
  p.hasBias = false;
  p.causal = true;
  p.tq = 12;
  p.tk = 5;
  checkAttention(cpu, p, 31, f32Tol(), {"cpu"});
  Problem odd;
  odd.batch = {};
  odd.tq = 37;
  odd.tk = 53;
  odd.d = 24;
  odd.dv = 40;
  odd.hasBias = true;
  odd.biasShape = {1, 53};
  odd.causal = true;
  checkAttention(cpu, odd, 42, f32Tol(), {"cpu"});
  Problem bf;
  bf.batch = {2, 2};
  bf.tq = bf.tk = 32;
  bf.d = bf.dv = 16;
  bf.dtype = program::DTYPE_BF16;
  bf.causal = true;
  bf.hasBias = true;
  bf.biasShape = {2, 1, 1, 32};
  checkAttention(cpu, bf, 61, bf16Tol(), {"cpu"});
  bf.dtype = program::DTYPE_F16;
  checkAttention(cpu, bf, 62, f16Tol(), {"cpu"});
}

// A [B, 1, T, T] padding mask with finfo.min entries, as exported models add.
TEST_F(CudaAttention, F32BiasMask) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2, 3};
  p.tq = p.tk = 16;
  p.hasBias = true;
  p.biasShape = {2, 1, 16, 16};
  checkAttention(registry, p, 11, f32Tol());
}

TEST_F(CudaAttention, F32NoBias) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {4};
  p.tq = 9;
  p.tk = 13;
  checkAttention(registry, p, 21, f32Tol());
}

// causal: key j masked for query i when j > i + (Tk - Tq); Tq > Tk leaves the
// first Tq - Tk rows without a key (LSE = -inf, Y = 0).
TEST_F(CudaAttention, Causal) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2, 2};
  p.causal = true;
  for (auto [tq, tk] : std::vector<std::pair<int64_t, int64_t>>{{20, 20}, {5, 12}, {12, 5}}) {
    p.tq = tq;
    p.tk = tk;
    checkAttention(registry, p, 31, f32Tol());
  }
}

// Sizes that fill no warp or block evenly, a [Tq, Tk] bias broadcast over the
// batch, causal on top.
TEST_F(CudaAttention, OddSizes) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {3};
  p.tq = 37;
  p.tk = 53;
  p.d = 24;
  p.dv = 40;
  p.hasBias = true;
  p.biasShape = {37, 53};
  checkAttention(registry, p, 41, f32Tol());
  p.causal = true;
  p.biasShape = {1, 53}; // one row broadcast over the queries
  checkAttention(registry, p, 42, f32Tol());
}

TEST_F(CudaAttention, BatchRanks) {
  REQUIRE_GPU();
  for (Shape batch : {Shape{}, Shape{3}, Shape{2, 3}}) {
    Problem p;
    p.batch = batch;
    p.tq = 7;
    p.tk = 11;
    p.d = 5;
    p.dv = 6;
    checkAttention(registry, p, 51, f32Tol());
  }
}

// bf16 Q, Kt, V with an f32 bias and causal masking: f32 scores and
// statistics, P and dS rounded to bf16 for the tensor-core GEMMs.
TEST_F(CudaAttention, Bf16) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2, 2};
  p.tq = p.tk = 32;
  p.d = 16;
  p.dv = 16;
  p.dtype = program::DTYPE_BF16;
  p.causal = true;
  p.hasBias = true;
  p.biasShape = {2, 1, 1, 32};
  checkAttention(registry, p, 61, bf16Tol());
}

// f16 Q, Kt, V: the __half instantiations of the row kernels.
TEST_F(CudaAttention, F16) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2, 2};
  p.tq = 24;
  p.tk = 40;
  p.d = 16;
  p.dv = 8;
  p.dtype = program::DTYPE_F16;
  p.causal = true;
  p.hasBias = true;
  p.biasShape = {2, 1, 1, 40};
  checkAttention(registry, p, 62, f16Tol());
}

// A chunk limit of two batch entries: chunks of 2, 2 and 1 entries.
TEST_F(CudaAttention, Chunked) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {5};
  p.tq = 10;
  p.tk = 12;
  p.hasBias = true;
  p.biasShape = {5, 1, 12};
  cuda::setAttentionChunkBytes(2 * 10 * 12 * (4 + 4));
  checkAttention(registry, p, 71, f32Tol());
  p.causal = true;
  cuda::setAttentionChunkBytes(1); // one entry per chunk
  checkAttention(registry, p, 72, f32Tol());
  cuda::setAttentionChunkBytes(0);
}

// --- The flash path (FlashAttention.cu) ------------------------------------

// Which problems take the flash kernels: f16/bf16, no bias, D == Dv in
// {64, 128}, non-empty, and the switch on. No GPU needed.
TEST(CudaFlashAttentionDispatch, AppliesExactly) {
  cuda::FlashQuery base;
  base.dtype = program::DTYPE_BF16;
  base.d = base.dv = 64;
  base.tq = 77;
  base.tk = 130;
  EXPECT_TRUE(cuda::flashAttentionApplies(base));
  auto with = [&](auto change) {
    cuda::FlashQuery q = base;
    change(q);
    return cuda::flashAttentionApplies(q);
  };
  EXPECT_TRUE(with([](auto &q) { q.dtype = program::DTYPE_F16; }));
  EXPECT_TRUE(with([](auto &q) { q.d = q.dv = 128; }));
  EXPECT_TRUE(with([](auto &q) { q.tq = q.tk = 1; }));
  EXPECT_FALSE(with([](auto &q) { q.dtype = program::DTYPE_F32; }));
  EXPECT_FALSE(with([](auto &q) { q.dtype = program::DTYPE_F64; }));
  EXPECT_FALSE(with([](auto &q) { q.hasBias = true; }));
  EXPECT_FALSE(with([](auto &q) { q.enabled = false; }));
  for (int64_t d : {0, 8, 16, 32, 48, 80, 96, 112, 144, 256})
    EXPECT_FALSE(with([d](auto &q) { q.d = q.dv = d; })) << "D " << d;
  EXPECT_FALSE(with([](auto &q) { q.dv = 128; }));
  EXPECT_FALSE(with([](auto &q) { q.d = 128; }));
  EXPECT_FALSE(with([](auto &q) { q.tq = 0; }));
  EXPECT_FALSE(with([](auto &q) { q.tk = 0; }));
}

// The switch: the override wins over STRAIT_CUDA_FLASH_ATTENTION, -1 goes
// back to the environment's value (on unless it is "0").
TEST(CudaFlashAttentionDispatch, Switch) {
  const char *env = std::getenv("STRAIT_CUDA_FLASH_ATTENTION");
  bool envOn = !(env && std::string(env) == "0");
  cuda::setFlashAttentionEnabled(0);
  EXPECT_FALSE(cuda::flashAttentionEnabled());
  cuda::setFlashAttentionEnabled(1);
  EXPECT_TRUE(cuda::flashAttentionEnabled());
  cuda::setFlashAttentionEnabled(-1);
  EXPECT_EQ(cuda::flashAttentionEnabled(), envOn);
}

TEST_F(CudaAttention, FlashBf16D64) {
  REQUIRE_GPU();
  checkFlash(registry, program::DTYPE_BF16, 64, 300);
}

TEST_F(CudaAttention, FlashBf16D128) {
  REQUIRE_GPU();
  checkFlash(registry, program::DTYPE_BF16, 128, 400);
}

TEST_F(CudaAttention, FlashF16D64) {
  REQUIRE_GPU();
  checkFlash(registry, program::DTYPE_F16, 64, 500);
}

TEST_F(CudaAttention, FlashF16D128) {
  REQUIRE_GPU();
  checkFlash(registry, program::DTYPE_F16, 128, 600);
}

// GPT-2's sequence length: 16 query and key tiles, causal skipping of whole
// blocks, the dQ atomics of 16 key blocks per row; a larger scale so that
// the softmax is peaked. Checked against the double reference only.
TEST_F(CudaAttention, FlashLong) {
  REQUIRE_GPU();
  FlashSwitch on(true);
  for (auto [dtype, d, causal] :
       std::vector<std::tuple<DType, int64_t, bool>>{{program::DTYPE_BF16, 64, true},
                                                     {program::DTYPE_F16, 128, false},
                                                     {program::DTYPE_BF16, 128, true}}) {
    Problem p;
    p.batch = {1, 1};
    p.tq = p.tk = 1024;
    p.d = p.dv = d;
    p.dtype = dtype;
    p.causal = causal;
    p.scale = 2.0f / std::sqrt(float(d));
    checkAttention(registry, p, 700 + uint32_t(d),
                   dtype == program::DTYPE_BF16 ? bf16Tol() : f16Tol(), {"cuda:0"});
  }
}

// The same problems on the flash path and on the cuBLAS path (switch off)
// agree within the dtype's tolerance (both also against the reference).
TEST_F(CudaAttention, FlashMatchesCublasPath) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2};
  p.tq = 200;
  p.tk = 333;
  p.d = p.dv = 64;
  p.dtype = program::DTYPE_BF16;
  p.causal = true;
  p.scale = 0.125f;
  Inputs in = makeInputs(p, 801);
  auto forward = [&](bool flash) {
    FlashSwitch sw(flash);
    std::vector<Arr> outs = {Arr::out(p.full({p.tq, p.dv}), p.dtype),
                             Arr::out(p.full({p.tq}), program::DTYPE_F32)};
    Status s = runOn("cuda:0", registry, "FusedAttention", forwardInputs(p, in), outs, p.attrs());
    EXPECT_TRUE(s.isOk()) << (flash ? "flash: " : "cuBLAS: ") << s.toString();
    return outs;
  };
  std::vector<Arr> flash = forward(true), cublas = forward(false);
  SCOPED_TRACE("flash vs cuBLAS path, Q bf16" + shapeToString(p.full({p.tq, p.d})) + " Tk " +
               std::to_string(p.tk) + " causal");
  expectClose("Y", flash[0], values(cublas[0]), 2e-2, 1e-2);
  expectClose("LSE", flash[1], values(cublas[1]), 1e-5, 1e-5);
  // And both against the reference, forward and gradient.
  {
    FlashSwitch off(false);
    checkAttention(registry, p, 802, bf16Tol(), {"cuda:0"});
  }
  FlashSwitch on(true);
  checkAttention(registry, p, 802, bf16Tol(), {"cuda:0"});
}

namespace {

/// The error of FusedAttention on cuda:0 with the given inputs.
Status attentionError(const BackendRegistry &registry, const std::vector<Arr> &ins,
                      const Attrs &attrs, const Shape &y, const Shape &lse) {
  std::vector<Arr> outs = {Arr::out(y), Arr::out(lse)};
  return runOn("cuda:0", registry, "FusedAttention", ins, outs, attrs);
}

void expectError(const Status &s, const std::vector<std::string> &parts) {
  ASSERT_FALSE(s.isOk());
  for (const std::string &part : parts)
    EXPECT_NE(s.toString().find(part), std::string::npos) << s.toString() << " lacks " << part;
}

} // namespace

// Shape and attribute errors are Status values naming the kernel, the operand
// and the shapes.
TEST_F(CudaAttention, Errors) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2};
  Attrs ok = p.attrs();
  Arr q = Arr::rand({2, 4, 8}, 1), kt = Arr::rand({2, 8, 4}, 2), v = Arr::rand({2, 4, 8}, 3);
  expectError(attentionError(registry, {q, Arr::rand({2, 6, 4}, 2), v}, ok, {2, 4, 8}, {2, 4}),
              {"FusedAttention", "Kt f32[2x6x4]", "[2x8x4]"});
  expectError(attentionError(registry, {q, kt, Arr::rand({2, 5, 8}, 3)}, ok, {2, 4, 8}, {2, 4}),
              {"FusedAttention", "V f32[2x5x8]", "[2x4x8]"});
  expectError(attentionError(registry, {q, kt, v, Arr::rand({3, 4, 4}, 4)}, ok, {2, 4, 8}, {2, 4}),
              {"FusedAttention", "Bias f32[3x4x4]", "[2x4x4]"});
  expectError(attentionError(registry, {q, kt, v}, {}, {2, 4, 8}, {2, 4}),
              {"FusedAttention", "scale"});
  expectError(attentionError(registry, {q, kt, Arr::randBf16({2, 4, 8}, 3)}, ok, {2, 4, 8}, {2, 4}),
              {"FusedAttention", "V bf16[2x4x8]"});
  // The gradient checks Y and LSE against Q and V.
  Arr y = Arr::rand({2, 4, 8}, 5), lse = Arr::rand({2, 5}, 6);
  std::vector<Arr> outs = {Arr::out({2, 4, 8}), Arr::out({2, 8, 4}), Arr::out({2, 4, 8})};
  expectError(runOn("cuda:0", registry, "FusedAttentionGrad", {y, q, kt, v, y, lse}, outs, ok),
              {"FusedAttentionGrad", "LSE f32[2x5]", "[2x4]"});
}

namespace {

/// FusedAttention then FusedAttentionGrad in one run step (one segment).
program::Program attentionStep(const Problem &p) {
  ProgramBuilder b;
  b.get().set_device("cuda:0");
  auto v = [&](const char *n, Shape s, program::ValueRole role) {
    return b.addValue(n, std::string(n) == "lse" ? program::DTYPE_F32 : p.dtype, s, role);
  };
  // Tensor shapes under the problem's perms (the attributes come with
  // p.attrs()).
  Shape qs = tensorShapeOf(p.full({p.tq, p.d}), p.qPerm),
        kts = tensorShapeOf(p.full({p.d, p.tk}), p.ktPerm),
        vs = tensorShapeOf(p.full({p.tk, p.dv}), p.vPerm),
        ys = tensorShapeOf(p.full({p.tq, p.dv}), p.yPerm);
  uint32_t q = v("q", qs, program::ROLE_INPUT), kt = v("kt", kts, program::ROLE_INPUT),
           vv = v("v", vs, program::ROLE_INPUT), dy = v("dy", ys, program::ROLE_INPUT),
           y = v("y", ys, program::ROLE_OUTPUT),
           lse = v("lse", p.full({p.tq}), program::ROLE_OUTPUT),
           dq = v("dq", qs, program::ROLE_OUTPUT), dkt = v("dkt", kts, program::ROLE_OUTPUT),
           dv = v("dv", vs, program::ROLE_OUTPUT);
  program::Kernel &f = b.addKernel("FusedAttention", {q, kt, vv}, {y, lse});
  p.attrs()(f);
  program::Kernel &g = b.addKernel("FusedAttentionGrad", {dy, q, kt, vv, y, lse}, {dq, dkt, dv});
  p.attrs()(g);
  b.addRunStep();
  return b.get();
}

/// Runs the step 3 times with fresh inputs each run; returns every output
/// of every run and the graph counters.
void runAttentionSteps(bool graphs, const Problem &p, std::vector<std::vector<float>> &results,
                       CudaGraphStats &stats) {
  CudaOptions o;
  o.graphs = graphs;
  BackendRegistry reg;
  ASSERT_TRUE(registerCudaBackend(reg, o).isOk());
  auto exec = Executor::create(attentionStep(p), reg);
  ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
  for (int step = 0; step < 3; ++step) {
    uint32_t seed = 100 + 10 * step;
    for (const char *name : {"q", "kt", "v", "dy"}) {
      Tensor t = *(*exec)->getValueByName(name);
      std::vector<float> x = pseudoRandom(t.numel(), seed++);
      if (t.dtype == program::DTYPE_BF16)
        for (int64_t k = 0; k < t.numel(); ++k)
          t.as<uint16_t>()[k] = bf16Bits(x[k]);
      else
        std::copy(x.begin(), x.end(), t.as<float>());
    }
    Status s = (*exec)->run();
    ASSERT_TRUE(s.isOk()) << s.toString();
    for (const char *name : {"y", "lse", "dq", "dkt", "dv"}) {
      Tensor t = *(*exec)->getValueByName(name);
      if (t.dtype == program::DTYPE_BF16) {
        std::vector<float> f(t.numel());
        for (int64_t k = 0; k < t.numel(); ++k)
          f[k] = bf16Value(t.as<uint16_t>()[k]);
        results.push_back(std::move(f));
      } else {
        results.emplace_back(t.as<float>(), t.as<float>() + t.numel());
      }
    }
  }
  stats = cudaGraphStats(*reg.forDevice("cuda:0").takeValue());
}

} // namespace

// The step captured into a CUDA graph on run 2 and replayed on run 3 gives
// the direct launches' results (the scratch block grows on run 1).
TEST(CudaAttentionGraphs, CapturedStepEqualsDirectLaunches) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2, 3};
  p.tq = p.tk = 24;
  p.causal = true;
  std::vector<std::vector<float>> on, off;
  CudaGraphStats statsOn, statsOff;
  runAttentionSteps(true, p, on, statsOn);
  runAttentionSteps(false, p, off, statsOff);
  ASSERT_EQ(on.size(), off.size());
  for (size_t k = 0; k < on.size(); ++k) {
    ASSERT_EQ(on[k].size(), off[k].size());
    for (size_t e = 0; e < on[k].size(); ++e)
      ASSERT_TRUE(on[k][e] == off[k][e] || std::abs(on[k][e] - off[k][e]) <= 1e-6f)
          << "output " << k % 5 << " of run " << k / 5 << " element " << e << ": " << on[k][e]
          << " vs " << off[k][e];
  }
  EXPECT_EQ(statsOn.captured, 1);
  EXPECT_EQ(statsOn.replays, 2);
  EXPECT_EQ(statsOn.direct, 1);
  EXPECT_EQ(statsOn.disabled, 0);
}

// The flash path (bf16, D 64, causal) captured and replayed: the same
// results as direct launches, up to one bf16 rounding step of dQ (its f32
// atomics add in any order).
TEST(CudaAttentionGraphs, CapturedFlashStepEqualsDirectLaunches) {
  REQUIRE_GPU();
  FlashSwitch on(true);
  Problem p;
  p.batch = {2, 3};
  p.tq = p.tk = 100;
  p.d = p.dv = 64;
  p.dtype = program::DTYPE_BF16;
  p.causal = true;
  std::vector<std::vector<float>> on1, off;
  CudaGraphStats statsOn, statsOff;
  runAttentionSteps(true, p, on1, statsOn);
  runAttentionSteps(false, p, off, statsOff);
  ASSERT_EQ(on1.size(), off.size());
  for (size_t k = 0; k < on1.size(); ++k) {
    ASSERT_EQ(on1[k].size(), off[k].size());
    for (size_t e = 0; e < on1[k].size(); ++e)
      ASSERT_TRUE(on1[k][e] == off[k][e] ||
                  std::abs(on1[k][e] - off[k][e]) <= 1e-2f * std::max(1.0f, std::abs(off[k][e])))
          << "output " << k % 5 << " of run " << k / 5 << " element " << e << ": " << on1[k][e]
          << " vs " << off[k][e];
  }
  EXPECT_EQ(statsOn.captured, 1);
  EXPECT_EQ(statsOn.replays, 2);
  EXPECT_EQ(statsOn.direct, 1);
  EXPECT_EQ(statsOn.disabled, 0);
}

// The flash path on GPT-2's permuted heads (bf16, D 64, causal), captured
// and replayed: the direct launches' results, up to one bf16 rounding of
// dQ; the permuted f32 problem on the cuBLAS path (gathers and scatters in
// the graph) likewise.
TEST(CudaAttentionGraphs, CapturedPermutedStepEqualsDirectLaunches) {
  REQUIRE_GPU();
  FlashSwitch on(true);
  for (DType dtype : {program::DTYPE_BF16, program::DTYPE_F32}) {
    Problem p;
    p.batch = {2, 3};
    p.tq = p.tk = 100;
    p.d = p.dv = 64;
    p.dtype = dtype;
    p.causal = true;
    gpt2Layout(p);
    std::vector<std::vector<float>> on1, off;
    CudaGraphStats statsOn, statsOff;
    runAttentionSteps(true, p, on1, statsOn);
    runAttentionSteps(false, p, off, statsOff);
    ASSERT_EQ(on1.size(), off.size());
    float tol = dtype == program::DTYPE_BF16 ? 1e-2f : 1e-6f;
    for (size_t k = 0; k < on1.size(); ++k) {
      ASSERT_EQ(on1[k].size(), off[k].size());
      for (size_t e = 0; e < on1[k].size(); ++e)
        ASSERT_TRUE(on1[k][e] == off[k][e] ||
                    std::abs(on1[k][e] - off[k][e]) <= tol * std::max(1.0f, std::abs(off[k][e])))
            << dtypeName(dtype) << " output " << k % 5 << " of run " << k / 5 << " element " << e
            << ": " << on1[k][e] << " vs " << off[k][e];
    }
    EXPECT_EQ(statsOn.captured, 1) << dtypeName(dtype);
    EXPECT_EQ(statsOn.replays, 2) << dtypeName(dtype);
    EXPECT_EQ(statsOn.disabled, 0) << dtypeName(dtype);
  }
}
