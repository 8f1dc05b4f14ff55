//===- CudaFusedJitTest.cpp - FusedElementwise through NVRTC --------------===//
//
// CudaFusedJitSource.* (no GPU): the generated source of small programs
// (expressions, one kernel, access kinds, index width, vector width), and
// NVRTC compiling generated sources for sm_90 (skipped only when NVRTC does
// not answer; it needs no driver).
// CudaFusedJit.* (GPU): each program runs on the CPU kernel, the JIT kernel
// and the interpreter kernel (the CUDA kernel function called directly on
// managed memory, so tests choose the pointers' alignment) and the outputs
// are compared: bit for bit (NaNs of any payload equal) for programs without
// transcendental functions, within kUlps ulps (or 1e-6 absolute) for
// programs with exp/log/tanh/sigmoid/erf/sin/cos/pow, whose CUDA versions are
// not correctly rounded (up to 2 ulp) while glibc's are closer.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "FusedJit.h"
#include "FusedTestPrograms.h"

#include "strait/runtime/FusedProgram.h"

#include <cuda_runtime_api.h>

#include <sstream>

using namespace strait::rt::cuda;

namespace {

constexpr int64_t kUlps = 4;

/// A program from op names (FusedCase's attribute form).
FusedCase makeCase(const std::string &name, Shape shape, std::vector<std::string> ops,
                   std::vector<int64_t> args, std::vector<float> constants,
                   std::vector<int64_t> outputs, std::vector<DType> outputTypes) {
  FusedCase c;
  c.name = name;
  c.shape = std::move(shape);
  c.ops = std::move(ops);
  c.args = std::move(args);
  c.constants = std::move(constants);
  c.outputs = std::move(outputs);
  c.outputTypes = std::move(outputTypes);
  return c;
}

/// The decoded program and shapes of a case (the backends' decoder).
struct Decoded {
  program::Kernel kernel;
  std::vector<OwnedTensor> outs;
  FusedArgs args;
};
void decode(const FusedCase &c, Decoded &d) {
  d.kernel = c.kernel();
  std::vector<Tensor *> outs;
  for (DType t : c.outputTypes)
    d.outs.emplace_back(t, c.shape);
  for (OwnedTensor &o : d.outs)
    outs.push_back(&o.tensor);
  KernelContext ctx(d.kernel, c.inputPtrs(), outs);
  StatusOr<FusedArgs> a = decodeFusedKernel(ctx);
  ASSERT_TRUE(a.isOk()) << c.name << ": " << a.getStatus().toString();
  d.args = std::move(*a);
}

FusedJitSpec specOf(const FusedArgs &a, bool vec4) {
  FusedJitSpec s;
  s.shape = a.shape;
  for (const Tensor *t : a.inputs) {
    s.inputShapes.push_back(t->shape);
    s.inputTypes.push_back(t->dtype);
  }
  for (const Tensor *t : a.outputs)
    s.outputTypes.push_back(t->dtype);
  s.vec4 = vec4;
  return s;
}

size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1))
    ++n;
  return n;
}

//===----------------------------------------------------------------------===//
// Programs
//===----------------------------------------------------------------------===//

/// GELU (tanh) forward with its tanh as a second output (FusedTestPrograms
/// case 0), on [rows, cols].
FusedCase geluForward(Shape shape) {
  FusedCase c = fusedCase(0);
  c.name = "GeluForward";
  c.shape = shape;
  c.inputs.clear();
  c.addF32(shape, 3, 21);
  return c;
}

/// GELU (tanh) backward: dx = dy * (0.5 * (1 + t) + 0.5 * x * (1 - t^2) *
/// k * (1 + 3 * 0.044715 * x^2)), t = tanh(k * (x + 0.044715 x^3)).
FusedCase geluBackward(Shape shape) {
  // Registers: 0 x, 1 dy.
  FusedCase c = makeCase(
      "GeluBackward", shape,
      {"Const", "Const", "Const", "Const", "Const", "Pow", "Mul", "Add", "Mul", "Tanh",
       "Add", "Mul", "Mul", "Sub", "Mul", "Mul", "Mul", "Mul", "Mul", "Add", "Mul", "Mul",
       "Add", "Mul"},
      {/*2*/ 0, U, U, /*3*/ 1, U, U, /*4*/ 2, U, U, /*5*/ 3, U, U, /*6*/ 4, U, U,
       /*7 x^3*/ 0, 6, U, /*8*/ 4, 7, U, /*9*/ 0, 8, U, /*10*/ 5, 9, U, /*11 t*/ 10, U, U,
       /*12 1+t*/ 3, 11, U, /*13*/ 2, 12, U, /*14 t^2*/ 11, 11, U, /*15 1-t^2*/ 3, 14, U,
       /*16*/ 2, 0, U, /*17*/ 16, 15, U, /*18*/ 17, 5, U, /*19 3c*/ 6, 4, U,
       /*20*/ 19, 0, U, /*21*/ 20, 0, U, /*22*/ 3, 21, U, /*23*/ 18, 22, U,
       /*24*/ 13, 23, U, /*25*/ 24, 1, U},
      {0.5f, 1.0f, 0.044715f, 0.7978845608f, 3.0f}, {25}, {program::DTYPE_F32});
  c.addF32(shape, 3, 22);
  c.addF32(shape, 1, 23);
  return c;
}

/// x and y on [n] with special values at fixed places (NaN, +-inf, +-0,
/// equal pairs, negatives for Log and Sqrt).
void addSpecialInputs(FusedCase &c, int64_t n, uint32_t seed) {
  c.addF32({n}, 3, seed);
  c.addF32({n}, 2, seed + 1);
  float *x = c.inputs[0].as<float>(), *y = c.inputs[1].as<float>();
  const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, -1.0f, 2.5f, -2.5f, 1e-30f};
  for (int64_t k = 0; k < n; k += 7) {
    x[k] = special[(k / 7) % 10];
    y[k] = special[(k / 7 + 3) % 10];
  }
  for (int64_t k = 3; k < n; k += 11)
    y[k] = x[k];
}

/// Unary ops without transcendental functions (exact on both sides).
FusedCase exactUnary(int64_t n) {
  FusedCase c = makeCase("ExactUnary", {n},
                         {"Identity", "Neg", "Abs", "Sqrt", "Reciprocal", "Relu", "Floor", "Ceil"},
                         {0, U, U, 0, U, U, 0, U, U, 0, U, U, 0, U, U, 0, U, U, 0, U, U, 0, U, U},
                         {}, {2, 3, 4, 5, 6, 7, 8, 9}, std::vector<DType>(8, program::DTYPE_F32));
  addSpecialInputs(c, n, 31);
  return c;
}

/// Binary ops and Pow by 2 and 3 (exact: Pow by multiplication in double).
FusedCase exactBinary(int64_t n) {
  FusedCase c = makeCase("ExactBinary", {n},
                         {"Add", "Sub", "Mul", "Div", "Max", "Min", "Const", "Pow", "Const", "Pow"},
                         {0, 1, U, 0, 1, U, 0, 1, U, 0, 1, U, 0, 1, U, 0, 1, U,
                          0, U, U, 0, 8, U, 1, U, U, 1, 10, U},
                         {2.0f, 3.0f}, {2, 3, 4, 5, 6, 7, 9, 11},
                         std::vector<DType>(8, program::DTYPE_F32));
  addSpecialInputs(c, n, 41);
  return c;
}

/// Comparisons and logic into bool outputs, Not and Where.
FusedCase predicates(int64_t n) {
  FusedCase c = makeCase(
      "Predicates", {n},
      {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Not", "Where"},
      {0, 1, U, 0, 1, U, 0, 1, U, 0, 1, U, 0, 1, U, 3, 4, U, 2, 5, U, 5, U, U, 3, 0, 1},
      {}, {2, 3, 4, 5, 6, 7, 8, 9, 10},
      {program::DTYPE_BOOL, program::DTYPE_BOOL, program::DTYPE_BOOL, program::DTYPE_BOOL,
       program::DTYPE_BOOL, program::DTYPE_BOOL, program::DTYPE_BOOL, program::DTYPE_F32});
  // 9 outputs is past the limit of 8: drop the last bool one.
  c.outputs = {2, 3, 4, 5, 6, 7, 9, 10};
  addSpecialInputs(c, n, 51);
  return c;
}

/// The transcendental ops and Pow by a tensor exponent.
FusedCase transcendental(int64_t n) {
  FusedCase c = makeCase("Transcendental", {n},
                         {"Exp", "Log", "Tanh", "Sigmoid", "Erf", "Sin", "Cos", "Pow"},
                         {0, U, U, 0, U, U, 0, U, U, 0, U, U, 0, U, U, 0, U, U, 0, U, U, 0, 1, U},
                         {}, {2, 3, 4, 5, 6, 7, 8, 9}, std::vector<DType>(8, program::DTYPE_F32));
  addSpecialInputs(c, n, 61);
  return c;
}

/// Every broadcast kind of a [N, C] program: bias [C], row scale [N, 1],
/// a scalar, a bool mask [1, C] into Where, and a bool output.
FusedCase broadcasts(int64_t rows, int64_t cols) {
  FusedCase c = makeCase("Broadcasts", {rows, cols},
                         {"Add", "Mul", "Add", "Const", "Where", "Greater"},
                         {0, 1, U, 5, 2, U, 6, 3, U, 0, U, U, 4, 7, 8, 9, 3, U},
                         {-7.0f}, {9, 10}, {program::DTYPE_F32, program::DTYPE_BOOL});
  c.addF32({rows, cols}, 2, 71);
  c.addF32({cols}, 1, 72);
  c.addF32({rows, 1}, 1, 73);
  c.addF32({1}, 1, 74);
  c.addBool({1, cols}, 75);
  return c;
}

/// Rank-5 general broadcast: [2,1,4,1,6], [3,1,1,1], [5,6], a rank-5 scalar
/// and a full bool input, on [2,3,4,5,6].
FusedCase rank5() {
  FusedCase c = makeCase("Rank5", {2, 3, 4, 5, 6}, {"Mul", "Sub", "Add", "Where"},
                         {0, 1, U, 5, 2, U, 6, 3, U, 4, 7, 0}, {}, {8, 7},
                         {program::DTYPE_F32, program::DTYPE_F32});
  c.addF32({2, 1, 4, 1, 6}, 2, 81);
  c.addF32({3, 1, 1, 1}, 2, 82);
  c.addF32({5, 6}, 2, 83);
  c.addF32({1, 1, 1, 1, 1}, 1, 84);
  c.addBool({2, 3, 4, 5, 6}, 85);
  return c;
}

/// 16-bit storage without broadcasts (the vec4 form): bf16 and f16 inputs,
/// a rounded register read again, bf16, f16 and f32 outputs.
FusedCase lowPrecisionContiguous(int64_t n) {
  FusedCase c = makeCase("LowPrecisionContiguous", {n},
                         {"Mul", "RoundBF16", "Tanh", "RoundF16", "Add"},
                         {0, 1, U, 2, U, U, 3, U, U, 4, U, U, 3, 5, U}, {}, {3, 5, 6, 2},
                         {program::DTYPE_BF16, program::DTYPE_F16, program::DTYPE_F32,
                          program::DTYPE_BF16});
  c.addLow(program::DTYPE_BF16, {n}, 3, 91);
  c.addLow(program::DTYPE_F16, {n}, 2, 92);
  return c;
}

//===----------------------------------------------------------------------===//
// No GPU: source text and NVRTC
//===----------------------------------------------------------------------===//

TEST(CudaFusedJitSource, GeluExpressionsAndOneKernel) {
  FusedCase c = geluForward({8, 3072});
  Decoded d;
  ASSERT_NO_FATAL_FAILURE(decode(c, d));
  std::string src = fusedJitSource(d.args.program, specOf(d.args, false));
  EXPECT_EQ(count(src, "__global__"), 1u) << src;
  EXPECT_EQ(count(src, "extern \"C\" __global__ void __launch_bounds__(256) strait_fused("), 1u)
      << src;
  // Registers: 0 x; 1.. the 13 instructions.
  EXPECT_NE(src.find("float r1 = __int_as_float(0x3f000000) /* 0.5 */;"), std::string::npos) << src;
  EXPECT_NE(src.find("float r2 = r0 * r1;"), std::string::npos) << src;
  EXPECT_NE(src.find("float r4 = (float)((double)r0 * (double)r0 * (double)r0);"),
            std::string::npos)
      << src; // Pow by the constant 3
  EXPECT_NE(src.find("float r10 = tanhf(r9);"), std::string::npos) << src;
  EXPECT_NE(src.find("o0 = r13;"), std::string::npos) << src;
  EXPECT_NE(src.find("o1 = r10;"), std::string::npos) << src;
  EXPECT_NE(src.find("const float x0 = in0[e];"), std::string::npos) << src;
  EXPECT_NE(src.find("out0[e] = y0;"), std::string::npos) << src;
  EXPECT_NE(src.find("out1[e] = y1;"), std::string::npos) << src;
  EXPECT_NE(src.find("unsigned n)"), std::string::npos) << src;
  EXPECT_EQ(src.find("unsigned long long"), std::string::npos) << src;
  EXPECT_EQ(src.find("float4"), std::string::npos) << src;
}

TEST(CudaFusedJitSource, AccessKindsAndIndexExpressions) {
  FusedCase c = broadcasts(8, 3072);
  Decoded d;
  ASSERT_NO_FATAL_FAILURE(decode(c, d));
  FusedJitSpec spec = specOf(d.args, false);
  EXPECT_EQ(fusedAccess({8, 3072}, spec.shape), FusedAccess::Contiguous);
  EXPECT_EQ(fusedAccess({1, 8, 3072}, spec.shape), FusedAccess::Contiguous);
  EXPECT_EQ(fusedAccess({3072}, spec.shape), FusedAccess::Broadcast);
  EXPECT_EQ(fusedAccess({8, 1}, spec.shape), FusedAccess::Broadcast);
  EXPECT_EQ(fusedAccess({1}, spec.shape), FusedAccess::Scalar);
  EXPECT_EQ(fusedAccess({}, spec.shape), FusedAccess::Scalar);
  std::string src = fusedJitSource(d.args.program, spec);
  EXPECT_NE(src.find("const float x0 = in0[e];"), std::string::npos) << src;
  EXPECT_NE(src.find("const float x1 = in1[(e % 3072u)];"), std::string::npos) << src;
  EXPECT_NE(src.find("const float x2 = in2[(e / 3072u)];"), std::string::npos) << src;
  EXPECT_NE(src.find("const float x3 = in3[0];"), std::string::npos) << src;
  EXPECT_NE(src.find("const float x4 = (in4[(e % 3072u)] != 0 ? 1.0f : 0.0f);"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("const unsigned char *in4"), std::string::npos) << src;
  EXPECT_NE(src.find("unsigned char *out1"), std::string::npos) << src;
  EXPECT_NE(src.find("out1[e] = y1 != 0.0f;"), std::string::npos) << src;
  EXPECT_NE(src.find("float r9 = (r4 != 0.0f ? r7 : r8);"), std::string::npos) << src;
}

TEST(CudaFusedJitSource, Rank5BroadcastMergesDims) {
  FusedCase c = rank5();
  Decoded d;
  ASSERT_NO_FATAL_FAILURE(decode(c, d));
  std::string src = fusedJitSource(d.args.program, specOf(d.args, false));
  // [2,1,4,1,6] on [2,3,4,5,6]: strides 24, 0, 6, 0, 1.
  EXPECT_NE(src.find("in0[(e / 360u) * 24u + ((e / 30u) % 4u) * 6u + (e % 6u)]"),
            std::string::npos)
      << src;
  // [3,1,1,1]: dim 1 with the broadcast dims 2..4 (120 elements) inside.
  EXPECT_NE(src.find("in1[((e / 120u) % 3u)]"), std::string::npos) << src;
  // [5,6]: the two inner dims merge into one dense run of 30.
  EXPECT_NE(src.find("in2[(e % 30u)]"), std::string::npos) << src;
  EXPECT_NE(src.find("in3[0]"), std::string::npos) << src;
  EXPECT_NE(src.find("in4[e]"), std::string::npos) << src;
}

TEST(CudaFusedJitSource, Vec4And64Bit) {
  FusedCase c = predicates(1000);
  Decoded d;
  ASSERT_NO_FATAL_FAILURE(decode(c, d));
  std::string src = fusedJitSource(d.args.program, specOf(d.args, true));
  EXPECT_EQ(count(src, "strait_body("), 5u) << src; // the definition and four lanes
  EXPECT_NE(src.find("const float4 v0 = reinterpret_cast<const float4 *>(in0)[e];"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("reinterpret_cast<uchar4 *>(out0)[e] = make_uchar4("), std::string::npos)
      << src;
  EXPECT_NE(src.find("reinterpret_cast<float4 *>(out7)[e] = make_float4(y7_0, y7_1, y7_2, y7_3);"),
            std::string::npos)
      << src;
  // 16-bit storage: ushort4 loads widened and stores rounded as CodecLayout.h.
  FusedCase low = lowPrecisionContiguous(64);
  Decoded dl;
  ASSERT_NO_FATAL_FAILURE(decode(low, dl));
  std::string lowSrc = fusedJitSource(dl.args.program, specOf(dl.args, true));
  for (const char *want :
       {"const unsigned short *in0, const unsigned short *in1, unsigned short *out0, "
        "unsigned short *out1, float *out2, unsigned short *out3, unsigned n)",
        "const ushort4 v0 = reinterpret_cast<const ushort4 *>(in0)[e];",
        "strait_body(strait_bf16_to_f32(v0.x), strait_f16_to_f32(v1.x), ",
        "reinterpret_cast<ushort4 *>(out0)[e] = make_ushort4(strait_f32_to_bf16(y0_0), ",
        "reinterpret_cast<ushort4 *>(out1)[e] = make_ushort4(strait_f32_to_f16(y1_0), ",
        "float r3 = strait_bf16_to_f32(strait_f32_to_bf16(r2));"})
    EXPECT_NE(lowSrc.find(want), std::string::npos) << want << "\n" << lowSrc;
  // n >= 2^31: 64-bit index math everywhere.
  FusedJitSpec big = specOf(d.args, false);
  big.shape = {int64_t(1) << 20, 2049};
  big.inputShapes = {{2049}, {int64_t(1) << 20, 1}};
  std::string wide = fusedJitSource(d.args.program, big);
  EXPECT_NE(wide.find("unsigned long long n)"), std::string::npos) << wide;
  EXPECT_NE(wide.find("in0[(e % 2049ull)]"), std::string::npos) << wide;
  EXPECT_NE(wide.find("in1[(e / 2049ull)]"), std::string::npos) << wide;
}

TEST(CudaFusedJitSource, NvrtcCompilesForSm90) {
  StatusOr<std::string> version = nvrtcVersionString();
  if (!version.isOk())
    GTEST_SKIP() << "NVRTC unavailable: " << version.getStatus().toString();
  std::vector<std::pair<FusedCase, bool>> cases;
  cases.emplace_back(geluForward({8, 3072}), false);
  cases.emplace_back(geluForward({8, 3072}), true);
  cases.emplace_back(geluBackward({8, 3072}), true);
  cases.emplace_back(exactUnary(1001), false);
  cases.emplace_back(exactBinary(1000), true);
  cases.emplace_back(predicates(1000), true);
  cases.emplace_back(transcendental(1001), false);
  cases.emplace_back(broadcasts(8, 3072), false);
  cases.emplace_back(rank5(), false);
  cases.emplace_back(fusedCase(7), false); // bf16/f16 storage and rounding
  cases.emplace_back(lowPrecisionContiguous(4096), true);
  for (auto &[c, vec4] : cases) {
    SCOPED_TRACE(c.name + (vec4 ? " vec4" : ""));
    Decoded d;
    ASSERT_NO_FATAL_FAILURE(decode(c, d));
    std::string src = fusedJitSource(d.args.program, specOf(d.args, vec4));
    std::string cubin;
    Status s = compileFusedJit(src, 90, cubin);
    ASSERT_TRUE(s.isOk()) << "NVRTC " << *version << ": " << s.toString() << "\n" << src;
    ASSERT_GE(cubin.size(), 4u);
    EXPECT_EQ(cubin.substr(0, 4), std::string("\x7f" "ELF")) << "not a CUBIN";
  }
  // Every opcode appears in one of the programs above.
  std::set<std::string> seen;
  for (auto &[c, vec4] : cases)
    seen.insert(c.ops.begin(), c.ops.end());
  for (int op = 0; op <= static_cast<int>(FusedOp::Last); ++op)
    EXPECT_TRUE(seen.count(fusedOpName(static_cast<FusedOp>(op))))
        << fusedOpName(static_cast<FusedOp>(op));
  // A source that does not compile is an error carrying NVRTC's log.
  std::string cubin;
  Status bad = compileFusedJit("extern \"C\" __global__ void strait_fused() { undeclared(); }",
                               90, cubin);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.toString().find("undeclared"), std::string::npos) << bad.toString();
  // An architecture NVRTC does not know.
  EXPECT_FALSE(compileFusedJit("", 12, cubin).isOk());
}

//===----------------------------------------------------------------------===//
// GPU: JIT vs interpreter vs CPU
//===----------------------------------------------------------------------===//

struct ManagedBuf {
  void *base = nullptr;
  char *data = nullptr;
  ManagedBuf(size_t bytes, size_t misalign) {
    EXPECT_EQ(cudaMallocManaged(&base, bytes + 64), cudaSuccess);
    data = base ? static_cast<char *>(base) + misalign : nullptr;
  }
  ~ManagedBuf() { cudaFree(base); }
  ManagedBuf(const ManagedBuf &) = delete;
  ManagedBuf &operator=(const ManagedBuf &) = delete;
};

/// Output bytes of the CUDA FusedElementwise kernel function on `c`, with
/// each buffer `misalign` bytes past a 256-byte boundary.
std::vector<std::vector<char>> runCuda(CudaContext &cc, const FusedCase &c, size_t misalign,
                                       Status &status) {
  CudaKernelTable table;
  addFusedKernels(table);
  std::vector<std::unique_ptr<ManagedBuf>> bufs;
  std::vector<Tensor> ins, outs;
  for (const OwnedTensor &t : c.inputs) {
    bufs.push_back(std::make_unique<ManagedBuf>(t.tensor.byteSize(), misalign));
    if (!bufs.back()->data) {
      status = internalError("cudaMallocManaged failed");
      return {};
    }
    std::memcpy(bufs.back()->data, t.tensor.data, t.tensor.byteSize());
    ins.push_back(Tensor{t.tensor.dtype, t.tensor.shape, bufs.back()->data});
  }
  for (DType d : c.outputTypes) {
    Tensor t{d, c.shape, nullptr};
    bufs.push_back(std::make_unique<ManagedBuf>(t.byteSize(), misalign));
    if (!bufs.back()->data) {
      status = internalError("cudaMallocManaged failed");
      return {};
    }
    std::memset(bufs.back()->data, 0x5a, t.byteSize());
    t.data = bufs.back()->data;
    outs.push_back(t);
  }
  std::vector<const Tensor *> inPtrs;
  std::vector<Tensor *> outPtrs;
  for (Tensor &t : ins)
    inPtrs.push_back(&t);
  for (Tensor &t : outs)
    outPtrs.push_back(&t);
  program::Kernel k = c.kernel();
  KernelContext ctx(k, inPtrs, outPtrs);
  status = table.entries.at(0).second(cc, ctx, 1);
  cudaError_t err = cudaStreamSynchronize(cc.stream);
  if (status.isOk() && err != cudaSuccess)
    status = internalError(std::string("cuda: ") + cudaGetErrorString(err));
  std::vector<std::vector<char>> result;
  for (const Tensor &t : outs)
    result.emplace_back(t.as<char>(), t.as<char>() + t.byteSize());
  return result;
}

std::vector<std::vector<char>> runCpuCase(const FusedCase &c) {
  std::vector<OwnedTensor> outs;
  std::vector<Tensor *> outPtrs;
  for (DType d : c.outputTypes)
    outs.emplace_back(d, c.shape);
  for (OwnedTensor &o : outs)
    outPtrs.push_back(&o.tensor);
  Status s = runCpu(c.kernel(), c.inputPtrs(), outPtrs);
  EXPECT_TRUE(s.isOk()) << c.name << " cpu: " << s.toString();
  std::vector<std::vector<char>> result;
  for (OwnedTensor &o : outs)
    result.emplace_back(o.as<char>(), o.as<char>() + o.tensor.byteSize());
  return result;
}

/// Compares output `what` of two runs element by element: bit for bit (NaNs
/// of any payload equal; `signedZeroEqual`: +0 == -0) or, when `ulps` > 0,
/// within that many ulps or 1e-6. Reports the first 5 differences.
void expectSame(const FusedCase &c, const std::string &what, const std::vector<std::vector<char>> &x,
                const std::vector<std::vector<char>> &y, int64_t ulps, bool signedZeroEqual) {
  ASSERT_EQ(x.size(), y.size());
  for (size_t j = 0; j < x.size(); ++j) {
    int bad = 0;
    if (c.outputTypes[j] == program::DTYPE_BOOL) {
      for (size_t k = 0; k < x[j].size() && bad < 5; ++k)
        if (x[j][k] != y[j][k]) {
          ADD_FAILURE() << c.name << " " << what << " output " << j << " (bool) element " << k
                        << ": " << int(x[j][k]) << " vs " << int(y[j][k]);
          ++bad;
        }
      continue;
    }
    if (c.outputTypes[j] == program::DTYPE_BF16 || c.outputTypes[j] == program::DTYPE_F16) {
      // 16-bit floats: equal bits (NaN for NaN), or within one 16-bit ulp
      // when `ulps` > 0 (an f32 ulp apart before rounding can round apart).
      bool bf = c.outputTypes[j] == program::DTYPE_BF16;
      const uint16_t *a = reinterpret_cast<const uint16_t *>(x[j].data());
      const uint16_t *b = reinterpret_cast<const uint16_t *>(y[j].data());
      auto isNan = [&](uint16_t h) {
        return bf ? (h & 0x7fff) > 0x7f80 : (h & 0x7fff) > 0x7c00;
      };
      auto ordered = [](uint16_t h) { return h & 0x8000 ? -int(h & 0x7fff) : int(h); };
      for (size_t k = 0; k < x[j].size() / 2 && bad < 5; ++k) {
        bool ok = isNan(a[k]) || isNan(b[k]) ? isNan(a[k]) && isNan(b[k])
                  : ulps > 0                 ? std::abs(ordered(a[k]) - ordered(b[k])) <= 1
                  : signedZeroEqual          ? ordered(a[k]) == ordered(b[k])
                                             : a[k] == b[k];
        if (!ok) {
          ADD_FAILURE() << c.name << " " << what << " output " << j << " ("
                        << (bf ? "bf16" : "f16") << ") element " << k << ": 0x" << std::hex
                        << a[k] << " vs 0x" << b[k] << std::dec;
          ++bad;
        }
      }
      continue;
    }
    const float *a = reinterpret_cast<const float *>(x[j].data());
    const float *b = reinterpret_cast<const float *>(y[j].data());
    for (size_t k = 0; k < x[j].size() / 4 && bad < 5; ++k) {
      bool ok;
      if (std::isnan(a[k]) || std::isnan(b[k]))
        ok = std::isnan(a[k]) && std::isnan(b[k]);
      else if (ulps > 0)
        ok = ulpDistance(a[k], b[k]) <= ulps || std::abs(double(a[k]) - b[k]) <= 1e-6;
      else
        ok = signedZeroEqual ? a[k] == b[k] : std::memcmp(&a[k], &b[k], 4) == 0;
      if (!ok) {
        ADD_FAILURE() << c.name << " " << what << " output " << j << " element " << k << ": "
                      << std::hexfloat << a[k] << " vs " << b[k] << std::defaultfloat << " ("
                      << a[k] << " vs " << b[k] << ", " << ulpDistance(a[k], b[k]) << " ulp)";
        ++bad;
      }
    }
  }
}

class CudaFusedJit : public ::testing::Test {
protected:
  void SetUp() override {
    REQUIRE_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
  void TearDown() override { setFusedJitMode(-1); }

  /// Runs `c` on the CPU, the JIT (which must be used; `vec4`: four elements
  /// a thread) and the interpreter; `ulps` 0: bit for bit.
  void check(const FusedCase &c, int64_t ulps, bool vec4, size_t misalign = 0) {
    SCOPED_TRACE(c.name + " misalign " + std::to_string(misalign));
    std::vector<std::vector<char>> cpu = runCpuCase(c);
    CudaContext cc;
    Status s;
    setFusedJitMode(1);
    FusedJitCounters before = fusedJitCounters();
    std::vector<std::vector<char>> jit = runCuda(cc, c, misalign, s);
    ASSERT_TRUE(s.isOk()) << "jit: " << s.toString();
    FusedJitCounters after = fusedJitCounters();
    ASSERT_EQ(after.launches, before.launches + 1) << "the JIT kernel did not run (fallbacks "
                                                   << after.fallbacks - before.fallbacks << ")";
    EXPECT_EQ(after.vec4Launches, before.vec4Launches + (vec4 ? 1 : 0)) << "vec4";
    setFusedJitMode(0);
    std::vector<std::vector<char>> interp = runCuda(cc, c, misalign, s);
    ASSERT_TRUE(s.isOk()) << "interpreter: " << s.toString();
    EXPECT_EQ(fusedJitCounters().launches, after.launches) << "JIT ran while switched off";
    expectSame(c, "cpu vs jit", cpu, jit, ulps, /*signedZeroEqual=*/false);
    // The interpreter's Abs is fabsf (|-0| = +0, the CPU keeps -0).
    expectSame(c, "cpu vs interpreter", cpu, interp, ulps, /*signedZeroEqual=*/true);
    expectSame(c, "jit vs interpreter", jit, interp, ulps, /*signedZeroEqual=*/true);
  }
};

TEST_F(CudaFusedJit, GeluForwardAndBackward) {
  check(geluForward({8, 3072}), kUlps, /*vec4=*/true);
  check(geluBackward({8, 3072}), kUlps, /*vec4=*/true);
  check(geluForward({3, 5, 37}), kUlps, /*vec4=*/false); // n = 555
}

TEST_F(CudaFusedJit, ExactOpsBitForBit) {
  check(exactUnary(1000), 0, true);
  check(exactUnary(1001), 0, false);
  check(exactBinary(1000), 0, true);
  check(exactBinary(3), 0, false);
  check(predicates(1000), 0, true);
  check(predicates(1003), 0, false);
}

TEST_F(CudaFusedJit, SixteenBitStorage) {
  check(fusedCase(7), 0, /*vec4=*/false); // broadcast f16 input, exact ops
  check(lowPrecisionContiguous(4096), kUlps, /*vec4=*/true);
  check(lowPrecisionContiguous(4099), kUlps, false);
  // 8-byte ushort4 needs 8-byte alignment: 4 bytes off takes the scalar kernel.
  check(lowPrecisionContiguous(4096), kUlps, false, /*misalign=*/4);
}

TEST_F(CudaFusedJit, TranscendentalOpsWithinUlps) {
  check(transcendental(1000), kUlps, true);
  check(transcendental(999), kUlps, false);
}

TEST_F(CudaFusedJit, Broadcasts) {
  check(broadcasts(37, 96), 0, false);
  check(broadcasts(8, 3072), 0, false);
  check(broadcasts(5, 3), 0, false);
  check(rank5(), 0, false);
}

TEST_F(CudaFusedJit, MisalignedPointersTakeTheScalarKernel) {
  check(exactBinary(1000), 0, /*vec4=*/false, /*misalign=*/4);
  check(predicates(1000), 0, false, 4);
  check(geluForward({8, 3072}), kUlps, false, 8);
  check(broadcasts(37, 96), 0, false, 4);
  // 16-byte aligned f32 and 4-byte aligned bool buffers still vectorize.
  check(predicates(1000), 0, true, 16);
}

TEST_F(CudaFusedJit, ScalarAndBoolInputs) {
  // A [1] scalar next to a contiguous bool input: vec4 loads the bool as uchar4.
  FusedCase c = makeCase("ScalarBool", {64, 33}, {"Mul", "Where", "Not"},
                         {0, 1, U, 2, 3, 0, 2, U, U}, {}, {4, 5},
                         {program::DTYPE_F32, program::DTYPE_BOOL});
  c.addF32({64, 33}, 2, 91);
  c.addF32({1}, 1, 92);
  c.addBool({64, 33}, 93);
  check(c, 0, true);
  c.shape = {65, 33};
  c.inputs.clear();
  c.addF32({65, 33}, 2, 91);
  c.addF32({}, 1, 92);
  c.addBool({65, 33}, 93);
  check(c, 0, false);
}

TEST_F(CudaFusedJit, CaptureUsesInterpreterUntilCompiledThenJit) {
  // A constant no other test uses: the source is new to the cache.
  FusedCase c = makeCase("Capture", {4096}, {"Const", "Mul"}, {0, U, U, 0, 1, U}, {1.2345678f},
                         {2}, {program::DTYPE_F32});
  c.addF32({4096}, 1, 95);
  std::vector<std::vector<char>> cpu = runCpuCase(c);
  CudaContext cc;
  ASSERT_EQ(cudaStreamCreateWithFlags(&cc.stream, cudaStreamNonBlocking), cudaSuccess);
  setFusedJitMode(1);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    FusedJitCounters before = fusedJitCounters();
    std::vector<std::vector<char>> out;
    Status s;
    if (round == 1) {
      out = runCuda(cc, c, 0, s); // uncaptured: compiles
    } else {
      // Buffers first: allocating inside a global-mode capture is refused.
      CudaKernelTable table;
      addFusedKernels(table);
      ManagedBuf in(4096 * 4, 0), outBuf(4096 * 4, 0);
      ASSERT_TRUE(in.data && outBuf.data);
      std::memcpy(in.data, c.inputs[0].tensor.data, 4096 * 4);
      Tensor ti{program::DTYPE_F32, {4096}, in.data}, to{program::DTYPE_F32, {4096}, outBuf.data};
      program::Kernel k = c.kernel();
      KernelContext ctx(k, {&ti}, {&to});
      ASSERT_EQ(cudaStreamBeginCapture(cc.stream, cudaStreamCaptureModeGlobal), cudaSuccess);
      bool capturing = cc.capturing();
      s = table.entries.at(0).second(cc, ctx, 1);
      cudaGraph_t graph = nullptr;
      ASSERT_EQ(cudaStreamEndCapture(cc.stream, &graph), cudaSuccess);
      ASSERT_TRUE(capturing);
      ASSERT_TRUE(s.isOk()) << s.toString();
      cudaGraphExec_t exec = nullptr;
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, cc.stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(cc.stream), cudaSuccess);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      out = {std::vector<char>(outBuf.data, outBuf.data + 4096 * 4)};
    }
    ASSERT_TRUE(s.isOk()) << s.toString();
    FusedJitCounters after = fusedJitCounters();
    if (round == 0) {
      EXPECT_EQ(after.launches, before.launches) << "compiled inside a capture";
      EXPECT_EQ(after.fallbacks, before.fallbacks + 1);
    } else {
      EXPECT_EQ(after.launches, before.launches + 1);
      EXPECT_EQ(after.compiles, before.compiles + (round == 1 ? 1 : 0));
    }
    expectSame(c, "cpu vs cuda", cpu, out, 0, false);
  }
  cudaStreamDestroy(cc.stream);
}

TEST_F(CudaFusedJit, ThroughTheBackendMatchesCpu) {
  // The executor's path (arena buffers, the backend's stream).
  BackendRegistry registry;
  registerCpuBackend(registry);
  CudaOptions o;
  o.syncEachKernel = true;
  ASSERT_TRUE(registerCudaBackend(registry, o).isOk());
  setFusedJitMode(1);
  std::vector<FusedCase> cases;
  cases.push_back(geluBackward({8, 3072}));
  cases.push_back(broadcasts(37, 96));
  cases.push_back(rank5());
  for (const FusedCase &c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Arr> ins, cpu, gpu;
    for (const OwnedTensor &t : c.inputs) {
      Arr a{t.tensor.dtype, t.tensor.shape, {}};
      a.bytes.assign(t.as<char>(), t.as<char>() + t.tensor.byteSize());
      ins.push_back(std::move(a));
    }
    for (DType d : c.outputTypes)
      cpu.push_back(Arr::out(c.shape, d));
    gpu = cpu;
    program::Kernel proto = c.kernel();
    Attrs attrs = [&](program::Kernel &k) {
      k.set_domain("strait");
      *k.mutable_attrs() = proto.attrs();
    };
    FusedJitCounters before = fusedJitCounters();
    ASSERT_TRUE(runOn("cpu", registry, "FusedElementwise", ins, cpu, attrs).isOk());
    Status s = runOn("cuda:0", registry, "FusedElementwise", ins, gpu, attrs);
    ASSERT_TRUE(s.isOk()) << s.toString();
    EXPECT_GE(fusedJitCounters().launches, before.launches + 1);
    std::vector<std::vector<char>> x, y;
    for (size_t j = 0; j < cpu.size(); ++j) {
      x.push_back(cpu[j].bytes);
      y.push_back(gpu[j].bytes);
    }
    expectSame(c, "cpu vs backend", x, y, kUlps, false);
  }
}

} // namespace

namespace {

/// Not a check: prints the time of one launch of the GPT-2 small GELU
/// forward and backward ([8192, 3072] f32) through the JIT and the
/// interpreter, so that the two can be compared on the machine at hand.
TEST_F(CudaFusedJit, TimingGelu8192x3072) {
  CudaKernelTable table;
  addFusedKernels(table);
  std::vector<FusedCase> cases;
  cases.push_back(geluForward({8192, 3072}));
  cases.push_back(geluBackward({8192, 3072}));
  CudaContext cc;
  ASSERT_EQ(cudaStreamCreateWithFlags(&cc.stream, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t start, end;
  cudaEventCreate(&start);
  cudaEventCreate(&end);
  for (const FusedCase &c : cases) {
    std::vector<void *> bufs;
    std::vector<Tensor> ins, outs;
    for (const OwnedTensor &t : c.inputs) {
      void *p = nullptr;
      ASSERT_EQ(cudaMalloc(&p, t.tensor.byteSize()), cudaSuccess);
      cudaMemcpy(p, t.tensor.data, t.tensor.byteSize(), cudaMemcpyHostToDevice);
      bufs.push_back(p);
      ins.push_back(Tensor{t.tensor.dtype, t.tensor.shape, p});
    }
    for (DType d : c.outputTypes) {
      Tensor t{d, c.shape, nullptr};
      ASSERT_EQ(cudaMalloc(&t.data, t.byteSize()), cudaSuccess);
      bufs.push_back(t.data);
      outs.push_back(t);
    }
    std::vector<const Tensor *> inPtrs;
    std::vector<Tensor *> outPtrs;
    for (Tensor &t : ins)
      inPtrs.push_back(&t);
    for (Tensor &t : outs)
      outPtrs.push_back(&t);
    program::Kernel k = c.kernel();
    KernelContext ctx(k, inPtrs, outPtrs);
    for (int mode : {1, 0}) {
      setFusedJitMode(mode);
      ASSERT_TRUE(table.entries.at(0).second(cc, ctx, 1).isOk()); // compiles, warms up
      ASSERT_EQ(cudaStreamSynchronize(cc.stream), cudaSuccess);
      constexpr int kIters = 20;
      cudaEventRecord(start, cc.stream);
      for (int i = 0; i < kIters; ++i)
        ASSERT_TRUE(table.entries.at(0).second(cc, ctx, 1).isOk());
      cudaEventRecord(end, cc.stream);
      ASSERT_EQ(cudaEventSynchronize(end), cudaSuccess);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, end);
      std::printf("[ timing ] %s [8192x3072] %s: %.4f ms per launch\n", c.name.c_str(),
                  mode ? "jit" : "interpreter", ms / kIters);
    }
    for (void *p : bufs)
      cudaFree(p);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cudaStreamDestroy(cc.stream);
}

} // namespace
