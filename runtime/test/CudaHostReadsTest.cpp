//===- CudaHostReadsTest.cpp - Integer inputs without host waits ---------===//
//
// Kernels whose integer operands are tensors (Slice bounds, a reduction's
// axes) must not wait for the stream to read them on the host every run: a
// wait costs a synchronization and keeps the kernel's segment out of CUDA
// graphs. Slice reads its bounds on the device (SlicePlan.h, checked here
// without a GPU against the ONNX rules and the CPU backend); a reduction
// whose output shape determines its axes reads them once. GPU tests compare
// with the CPU backend and count the captured graphs (skipped here).
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "SlicePlan.h"

namespace {
class CudaHostReads : public Cuda {};
} // namespace

namespace {

/// Exp(x) then a ReduceSum with its axes as an i64 constant input (as
/// straitc emits it), run 3 times on `device`; the sums of the last run.
Status reduceAxesSteps(const std::string &device, const Shape &xs, const Shape &ys,
                       const std::vector<int64_t> &axes, std::vector<float> &out,
                       CudaGraphStats &stats) {
  BackendRegistry reg;
  if (device == "cpu")
    registerCpuBackend(reg);
  else
    STRAIT_RETURN_IF_ERROR(registerCudaBackend(reg, CudaOptions{}));
  ProgramBuilder b;
  b.get().set_device(device);
  uint32_t x = b.addValue("x", program::DTYPE_F32, xs, program::ROLE_INPUT);
  uint32_t e = b.addValue("e", program::DTYPE_F32, xs, program::ROLE_ACTIVATION);
  uint32_t a = b.addValue("axes", program::DTYPE_I64, {int64_t(axes.size())},
                          program::ROLE_CONSTANT);
  program::TensorData *c = b.get().mutable_values(a)->mutable_constant();
  c->set_dtype(program::DTYPE_I64);
  c->add_shape(int64_t(axes.size()));
  for (int64_t v : axes)
    c->add_int64_data(v);
  uint32_t y = b.addValue("y", program::DTYPE_F32, ys, program::ROLE_OUTPUT);
  b.addKernel("Exp", {x}, {e}).set_name("e");
  program::Kernel &r = b.addKernel("ReduceSum", {e, a}, {y});
  r.set_name("r");
  setInt(r, "keepdims", 0);
  b.addRunStep();
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec, Executor::create(b.get(), reg));
  STRAIT_ASSIGN_OR_RETURN(Tensor tx, exec->getValue(x));
  std::vector<float> v = pseudoRandom(tx.numel(), 7);
  std::copy(v.begin(), v.end(), tx.as<float>());
  for (int run = 0; run < 3; ++run)
    STRAIT_RETURN_IF_ERROR(exec->run());
  STRAIT_ASSIGN_OR_RETURN(Tensor ty, exec->getValue(y));
  out.assign(ty.as<float>(), ty.as<float>() + ty.numel());
  stats = cudaGraphStats(*reg.forDevice(device).takeValue());
  return Status::ok();
}

} // namespace

// A reduction whose output shape determines its axes reads the axes input on
// its first run only: runs 2 and 3 are a captured and a replayed CUDA graph.
// With a choice ([6, 6, 5] to [6]) it reads them every run: no graph.
TEST(CudaReduceGraphs, AxesInputReadOnceWhenShapesDetermineThem) {
  REQUIRE_GPU();
  struct Case {
    Shape x, y;
    std::vector<int64_t> axes;
    bool graph;
  };
  for (const Case &k : {Case{{2, 6, 5, 5}, {6}, {0, 2, 3}, true},
                        Case{{6, 6, 5}, {6}, {0, 2}, false}}) {
    std::vector<float> gpu, cpu;
    CudaGraphStats stats, none;
    Status s = reduceAxesSteps("cuda:0", k.x, k.y, k.axes, gpu, stats);
    ASSERT_TRUE(s.isOk()) << s.toString();
    ASSERT_TRUE(reduceAxesSteps("cpu", k.x, k.y, k.axes, cpu, none).isOk());
    ASSERT_EQ(gpu.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_NEAR(gpu[i], cpu[i], 1e-5 * std::abs(cpu[i])) << i;
    if (k.graph) {
      EXPECT_EQ(stats.captured, 1);
      EXPECT_EQ(stats.replays, 2);
      EXPECT_EQ(stats.direct, 1);
      EXPECT_EQ(stats.disabled, 0);
    } else {
      EXPECT_EQ(stats.captured, 0);
      EXPECT_EQ(stats.disabled, 1);
    }
  }
}

// Slice bounds given as inputs are read on the device (no stream wait),
// against the CPU backend (CudaSpatial.SliceAndGrad has more cases).
TEST_F(CudaHostReads, SliceBoundsOnDevice) {
  REQUIRE_GPU();
  Arr x = Arr::rand({4, 6, 10}, 83);
  auto i32 = [](Shape s, const std::vector<int32_t> &v) {
    Arr a{program::DTYPE_I32, std::move(s), {}};
    a.bytes.resize(v.size() * 4);
    std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
    return a;
  };
  // Negative steps and wrapping starts, i64 extremes as ends.
  compare("Slice", {x, Arr::i({3}, {3, -1, 0}), Arr::i({3}, {0, 0, INT64_MAX}),
                    Arr::i({3}, {0, 1, 2}), Arr::i({3}, {-2, -2, 1})},
          {Arr::out({2, 3, 10})});
  // i32 bounds, no axes/steps inputs (all axes in order, steps of 1).
  compare("Slice", {x, i32({2}, {1, -4}), i32({2}, {3, 100})}, {Arr::out({2, 4, 10})});
  // Negative axes, a step past the end, an empty result.
  compare("Slice", {x, Arr::i({1}, {2}), Arr::i({1}, {9}), Arr::i({1}, {-1}), Arr::i({1}, {20})},
          {Arr::out({4, 6, 1})});
  compare("Slice", {x, Arr::i({1}, {5}), Arr::i({1}, {2}), Arr::i({1}, {1})},
          {Arr::out({4, 0, 10})});
  // 2-byte elements (a bf16 activation, as in llama's rotary embedding).
  compare("Slice", {Arr::randBf16({2, 4, 8}, 84), Arr::i({1}, {4}), Arr::i({1}, {8}),
                    Arr::i({1}, {2})},
          {Arr::out({2, 4, 4}, program::DTYPE_BF16)});
  const Backend *b = *registry.forDevice("cuda:0");
  EXPECT_EQ(cudaHostFallbackCounts(*b).count("Slice"), 0u);
  // Bounds that disagree with the declared output: a device error naming the kernel.
  std::vector<Arr> outs = {Arr::out({3, 6, 10})};
  Status s = runOn("cuda:0", registry, "Slice",
                   {x, Arr::i({1}, {1}), Arr::i({1}, {3}), Arr::i({1}, {0})}, outs, {});
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.getCode(), StatusCode::InvalidArgument) << s.toString();
  EXPECT_NE(s.toString().find("do not give the declared output shape"), std::string::npos)
      << s.toString();
  EXPECT_NE(s.toString().find("Slice 'k'"), std::string::npos) << s.toString();
  outs = {Arr::out({4, 6, 10})};
  s = runOn("cuda:0", registry, "Slice",
            {x, Arr::i({1}, {0}), Arr::i({1}, {4}), Arr::i({1}, {0}), Arr::i({1}, {0})}, outs,
            {});
  EXPECT_FALSE(s.isOk()) << "step 0 accepted";
  // After a device error the backend still runs kernels.
  compare("Slice", {x, Arr::i({1}, {1}), Arr::i({1}, {3})}, {Arr::out({2, 6, 10})});
}

// A step with a Slice whose bounds are i64 constant inputs (llama-tiny's
// rotary embedding) is captured into a CUDA graph: no host read.
TEST(CudaReduceGraphs, SliceWithBoundInputsIsCaptured) {
  REQUIRE_GPU();
  std::vector<float> result[2];
  CudaGraphStats stats;
  for (int onGpu = 0; onGpu < 2; ++onGpu) {
    std::string device = onGpu ? "cuda:0" : "cpu";
    BackendRegistry reg;
    if (onGpu)
      ASSERT_TRUE(registerCudaBackend(reg, CudaOptions{}).isOk());
    else
      registerCpuBackend(reg);
    ProgramBuilder b;
    b.get().set_device(device);
    uint32_t x = b.addValue("x", program::DTYPE_F32, {2, 8, 6}, program::ROLE_INPUT);
    uint32_t e = b.addValue("e", program::DTYPE_F32, {2, 8, 6}, program::ROLE_ACTIVATION);
    std::vector<uint32_t> bounds;
    for (int64_t v : {4, 8, 1}) {
      uint32_t id = b.addValue("b" + std::to_string(bounds.size()), program::DTYPE_I64, {1},
                               program::ROLE_CONSTANT);
      program::TensorData *c = b.get().mutable_values(id)->mutable_constant();
      c->set_dtype(program::DTYPE_I64);
      c->add_shape(1);
      c->add_int64_data(v);
      bounds.push_back(id);
    }
    uint32_t y = b.addValue("y", program::DTYPE_F32, {2, 4, 6}, program::ROLE_OUTPUT);
    b.addKernel("Exp", {x}, {e}).set_name("e");
    b.addKernel("Slice", {e, bounds[0], bounds[1], bounds[2]}, {y}).set_name("s");
    b.addRunStep();
    auto exec = Executor::create(b.get(), reg);
    ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
    Tensor tx = *(*exec)->getValue(x);
    std::vector<float> v = pseudoRandom(tx.numel(), 8);
    std::copy(v.begin(), v.end(), tx.as<float>());
    for (int run = 0; run < 3; ++run) {
      Status s = (*exec)->run();
      ASSERT_TRUE(s.isOk()) << s.toString();
    }
    Tensor ty = *(*exec)->getValue(y);
    result[onGpu].assign(ty.as<float>(), ty.as<float>() + ty.numel());
    if (onGpu)
      stats = cudaGraphStats(*reg.forDevice(device).takeValue());
  }
  ASSERT_EQ(result[0].size(), 48u);
  for (size_t i = 0; i < 48; ++i)
    EXPECT_NEAR(result[1][i], result[0][i], 1e-6 * std::abs(result[0][i])) << i;
  EXPECT_EQ(stats.captured, 1);
  EXPECT_EQ(stats.replays, 2);
  EXPECT_EQ(stats.disabled, 0);
}

namespace {

/// The indices of range(dim) an ONNX Slice takes (the operator spec: a
/// negative start/end counts from the end; the start is clamped to
/// [0, dim] for positive steps and [0, dim - 1] for negative ones, the end
/// to [0, dim] and [-1, dim - 1]; unlike Python, a start below -dim with a
/// negative step still takes element 0).
std::vector<int64_t> onnxSlice(int64_t dim, int64_t start, int64_t end, int64_t step) {
  auto clampTo = [](int64_t v, int64_t lo, int64_t hi) { return std::min(std::max(v, lo), hi); };
  if (start < 0)
    start = start < -dim ? -1 - dim : start + dim; // no overflow; below 0 either way
  if (end < 0)
    end = end < -dim ? -1 - dim : end + dim;
  start = step > 0 ? clampTo(start, 0, dim) : clampTo(start, 0, dim - 1);
  end = step > 0 ? clampTo(end, 0, dim) : clampTo(end, -1, dim - 1);
  std::vector<int64_t> idx;
  for (int64_t i = start; step > 0 ? i < end : i > end; i += step)
    idx.push_back(i);
  return idx;
}

} // namespace

// Runs everywhere: the device Slice's plan (SlicePlan.h, compiled for the
// device by Reduce.cu) on random bounds against the ONNX spec's rules and the
// CPU backend's Slice, element by element; a declared shape off by one in
// any dim is refused.
TEST(CudaNoDevice, SlicePlanMatchesCpuSlice) {
  BackendRegistry cpu;
  registerCpuBackend(cpu);
  uint32_t seed = 12345;
  auto next = [&](int64_t n) {
    seed = seed * 1103515245u + 12345u;
    return static_cast<int64_t>((seed >> 8) % uint32_t(n));
  };
  const int64_t big[] = {INT64_MAX, INT64_MIN, -INT64_MAX};
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    int rank = 1 + int(next(4));
    Shape xs(rank);
    for (int64_t &d : xs)
      d = 1 + next(6);
    int n = 1 + int(next(rank));
    std::vector<int64_t> perm(rank);
    for (int d = 0; d < rank; ++d)
      perm[d] = d;
    for (int d = rank - 1; d > 0; --d)
      std::swap(perm[d], perm[next(d + 1)]);
    std::vector<int64_t> starts(n), ends(n), axes(n), steps(n);
    std::vector<std::vector<int64_t>> idx(rank);
    for (int d = 0; d < rank; ++d)
      for (int64_t k = 0; k < xs[d]; ++k)
        idx[d].push_back(k);
    for (int i = 0; i < n; ++i) {
      axes[i] = next(2) ? perm[i] - rank : perm[i];
      const int64_t stepChoices[] = {-3, -2, -1, 1, 2, 3};
      steps[i] = stepChoices[next(6)];
      starts[i] = next(8) == 0 ? big[next(3)] : next(17) - 8;
      ends[i] = next(8) == 0 ? big[next(3)] : next(17) - 8;
      idx[perm[i]] = onnxSlice(xs[perm[i]], starts[i], ends[i], steps[i]);
    }
    Shape ys(rank);
    for (int d = 0; d < rank; ++d)
      ys[d] = static_cast<int64_t>(idx[d].size());
    cuda::SliceBounds b;
    b.rank = rank;
    b.n = n;
    for (int d = 0; d < rank; ++d) {
      b.inShape[d] = xs[d];
      b.outShape[d] = ys[d];
    }
    b.starts = starts.data();
    b.ends = ends.data();
    b.axes = axes.data();
    b.steps = steps.data();
    b.nOut = numElements(ys);
    int64_t start[cuda::kMaxDims], step[cuda::kMaxDims];
    ASSERT_TRUE(cuda::slicePlan(b, start, step)) << "trial " << trial;
    // The CPU backend's Slice of the same bounds (inputs, opset >= 10).
    Arr x = Arr::rand(xs, 900 + trial);
    std::vector<Arr> outs = {Arr::out(ys)};
    Status s = runOn("cpu", cpu, "Slice",
                     {x, Arr::i({n}, starts), Arr::i({n}, ends), Arr::i({n}, axes),
                      Arr::i({n}, steps)},
                     outs, {});
    ASSERT_TRUE(s.isOk()) << "trial " << trial << ": " << s.toString();
    for (int64_t i = 0; i < b.nOut; ++i) {
      // The reference: output coordinates through the spec's index lists.
      int64_t off = 0, r = i, stride = 1;
      for (int d = rank - 1; d >= 0; --d) {
        off += idx[d][r % ys[d]] * stride;
        r /= ys[d];
        stride *= xs[d];
      }
      ASSERT_EQ(cuda::sliceOffset(b, start, step, i), off) << "trial " << trial << " " << i;
      ASSERT_EQ(outs[0].at(i), x.at(off)) << "trial " << trial << " " << i;
    }
    checked += static_cast<int>(b.nOut);
    for (int d = 0; d < rank; ++d) {
      cuda::SliceBounds wrong = b;
      wrong.outShape[d] += 1;
      int64_t ws[cuda::kMaxDims], wt[cuda::kMaxDims];
      EXPECT_FALSE(cuda::slicePlan(wrong, ws, wt)) << "trial " << trial << " dim " << d;
    }
    // i32 bounds (those that fit) plan the same.
    bool fits = true;
    std::vector<int32_t> s32(n), e32(n);
    for (int i = 0; i < n; ++i) {
      fits &= starts[i] >= INT32_MIN && starts[i] <= INT32_MAX && ends[i] >= INT32_MIN &&
              ends[i] <= INT32_MAX;
      s32[i] = static_cast<int32_t>(starts[i]);
      e32[i] = static_cast<int32_t>(ends[i]);
    }
    if (fits) {
      cuda::SliceBounds narrow = b;
      narrow.starts = s32.data();
      narrow.ends = e32.data();
      narrow.starts64 = narrow.ends64 = false;
      int64_t start32[cuda::kMaxDims], step32[cuda::kMaxDims];
      ASSERT_TRUE(cuda::slicePlan(narrow, start32, step32));
      for (int d = 0; d < rank; ++d)
        EXPECT_EQ(start32[d], start[d]);
    }
  }
  EXPECT_GT(checked, 500); // elements compared (866 with this seed)
  // A step of 0 and an axis out of range are refused.
  std::vector<int64_t> zero = {0}, one = {1}, three = {3}, axis = {2};
  cuda::SliceBounds b;
  b.rank = 2;
  b.n = 1;
  b.inShape[0] = b.outShape[0] = 4;
  b.inShape[1] = b.outShape[1] = 4;
  b.starts = zero.data();
  b.ends = three.data();
  b.steps = zero.data();
  int64_t start[cuda::kMaxDims], step[cuda::kMaxDims];
  EXPECT_FALSE(cuda::slicePlan(b, start, step));
  b.steps = one.data();
  b.axes = axis.data();
  EXPECT_FALSE(cuda::slicePlan(b, start, step));
}
