//===- CudaCoverageTest.cpp - Static CUDA coverage of real training steps -===//
//
// Runs without a GPU. cuda::nativeSupport (CudaSupport.h) answers, from a
// kernel's op, operand dtypes and attributes, whether the CUDA backend runs
// it as a CUDA kernel or through the host fallback (a stream wait and the
// CPU kernel). These tests check its rules on hand-built kernels and then
// compile the training steps (cross-entropy, AdamW, f32 and bf16/f16
// graph-autocast; a few with MSE, SGD and clipping) of the bundled models
// with straitc and expect every kernel to be native, printing the (op,
// dtypes) that are not. straitc is taken from $STRAIT_STRAITC, else from the
// path CMake found at configure time (STRAIT_TEST_STRAITC); without it the
// model tests skip. On a GPU, CudaNativeSupport.AgreesWithTheKernels runs
// 287 (op, dtypes) kernels and checks the rules against what the backend did.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "CudaSupport.h"
#include "strait/runtime/Program.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <unistd.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::cuda;

namespace {

OperandType t(DType d, Shape s = {2, 3}) { return OperandType{true, d, std::move(s)}; }
OperandType absent() { return OperandType{}; }

/// nativeSupport of `op` with the given operands (owning the kernel).
NativeSupport check(const std::string &op, std::vector<OperandType> ins,
                    std::vector<OperandType> outs,
                    const std::function<void(program::Kernel &)> &attrs = {}) {
  static std::vector<std::unique_ptr<program::Kernel>> kernels;
  kernels.push_back(std::make_unique<program::Kernel>());
  kernels.back()->set_op(op);
  if (attrs)
    attrs(*kernels.back());
  KernelSpec s{kernels.back().get(), std::move(ins), std::move(outs)};
  return nativeSupport(s);
}

constexpr DType F32 = program::DTYPE_F32, BF16 = program::DTYPE_BF16,
                F16 = program::DTYPE_F16, F64 = program::DTYPE_F64, I64 = program::DTYPE_I64,
                U8 = program::DTYPE_U8;

} // namespace

// Every op of the backend's kernel table has a dtype rule, so that
// nativeSupport never calls a kernel native by default.
TEST(CudaNoDevice, EveryCudaOpHasASupportRule) {
  std::vector<std::string> ops = cudaKernelOps(), rules = cudaSupportRuleOps();
  std::set<std::string> ruleSet(rules.begin(), rules.end());
  EXPECT_GT(ops.size(), 60u);
  for (const std::string &op : ops)
    EXPECT_TRUE(ruleSet.count(op)) << "op " << op << " has no rule in CudaSupport.cpp";
}

TEST(CudaNoDevice, NativeSupportRules) {
  EXPECT_TRUE(check("MatMul", {t(BF16), t(BF16)}, {t(BF16)}).native);
  EXPECT_TRUE(check("Cast", {t(F32)}, {t(BF16)}).native);
  NativeSupport castU8 = check("Cast", {t(U8)}, {t(F32)});
  EXPECT_FALSE(castU8.native);
  EXPECT_NE(castU8.reason.find("from u8 to f32"), std::string::npos) << castU8.reason;
  EXPECT_FALSE(check("Softmax", {t(I64)}, {t(I64)}).native);
  NativeSupport soft = check("Softmax", {t(BF16)}, {t(BF16)});
  EXPECT_FALSE(soft.native);
  EXPECT_NE(soft.reason.find("input 0 is bf16"), std::string::npos) << soft.reason;
  // Integer operands of f32 kernels are not floats.
  EXPECT_TRUE(check("SoftmaxCrossEntropyLoss", {t(F32), t(I64, {2})}, {t(F32, {})}).native);
  EXPECT_FALSE(check("Pow", {t(I64), t(I64)}, {t(I64)}).native);
  EXPECT_TRUE(check("Add", {t(I64), t(I64)}, {t(I64)}).native);
  EXPECT_FALSE(check("Add", {t(BF16), t(BF16)}, {t(BF16)}).native);
  EXPECT_TRUE(check("FusedAttentionGrad",
                    {t(BF16), t(BF16), t(BF16), t(BF16), t(BF16), t(F32)},
                    {t(BF16), t(BF16), t(BF16)})
                  .native);
  EXPECT_FALSE(check("ReduceSum", {t(U8)}, {t(U8)}).native);
  EXPECT_TRUE(check("ReduceSum", {t(BF16), absent()}, {t(BF16)}).native);
  EXPECT_TRUE(check("ReduceMean", {t(F16), absent()}, {t(F16)}).native);
  NativeSupport none = check("NoSuchOp", {t(F32)}, {t(F32)});
  EXPECT_FALSE(none.native);
  EXPECT_NE(none.reason.find("no CUDA kernel for op 'NoSuchOp'"), std::string::npos);
  // Integer inputs read on the host: native, but a stream wait.
  NativeSupport sum = check("ReduceSum", {t(F32), t(I64, {1})}, {t(F32, {3})});
  EXPECT_TRUE(sum.native);
  EXPECT_TRUE(sum.hostWait);
  // keepdims (default 1): the output shape says which dims are reduced.
  NativeSupport sumShaped = check("ReduceSum", {t(F32), t(I64, {1})}, {t(F32, {1, 3})});
  EXPECT_TRUE(sumShaped.native);
  EXPECT_FALSE(sumShaped.hostWait) << sumShaped.reason;
  NativeSupport sumAttr = check("ReduceSum", {t(F32), absent()}, {t(F32, {3})});
  EXPECT_TRUE(sumAttr.native);
  EXPECT_FALSE(sumAttr.hostWait);
  // Slice reads bound inputs on the device, up to rank 8.
  NativeSupport slice = check("Slice", {t(F32), t(I64, {1}), t(I64, {1})}, {t(F32)});
  EXPECT_TRUE(slice.native);
  EXPECT_FALSE(slice.hostWait) << slice.reason;
  Shape rank9 = {1, 1, 1, 1, 1, 1, 1, 2, 3};
  EXPECT_TRUE(
      check("Slice", {t(F32, rank9), t(I64, {1}), t(I64, {1})}, {t(F32, rank9)}).hostWait);
  EXPECT_FALSE(check("Slice", {t(F32)}, {t(F32)}).hostWait);
  // The routed expert products read the rows' experts on the host, always.
  NativeSupport grouped = check("GroupedMatMul", {t(BF16), t(BF16), t(I64, {3})}, {t(BF16)});
  EXPECT_TRUE(grouped.native);
  EXPECT_TRUE(grouped.hostWait);
  EXPECT_NE(grouped.reason.find("outside the CUDA graphs"), std::string::npos) << grouped.reason;
  EXPECT_TRUE(check("GroupedMatMulGradWeight", {t(F32), t(F32), t(I64, {3})}, {t(F32)}).native);
  EXPECT_FALSE(check("GroupedMatMul", {t(F64), t(F64), t(I64, {3})}, {t(F64)}).native);
  // The router's TopK (K a constant: no wait) and its gradient's ScatterElements.
  OperandType k1 = t(I64, {1});
  EXPECT_TRUE(check("TopK", {t(BF16), k1}, {t(BF16), t(I64)}).native);
  EXPECT_TRUE(check("TopK", {t(F32), k1}, {t(F32), t(I64)}).hostWait);
  k1.hostConstant = true;
  EXPECT_FALSE(check("TopK", {t(F32), k1}, {t(F32), t(I64)}).hostWait);
  EXPECT_FALSE(check("TopK", {t(U8), k1}, {t(U8), t(I64)}).native);
  EXPECT_TRUE(check("ScatterElements", {t(BF16), t(I64), t(BF16)}, {t(BF16)}).native);
  auto reduction = [](const char *r) {
    return [=](program::Kernel &k) { setString(k, "reduction", r); };
  };
  EXPECT_TRUE(
      check("ScatterElements", {t(F32), t(I64), t(F32)}, {t(F32)}, reduction("add")).native);
  EXPECT_FALSE(
      check("ScatterElements", {t(F64), t(I64), t(F64)}, {t(F64)}, reduction("add")).native);
  EXPECT_FALSE(
      check("ScatterElements", {t(F32), t(I64), t(F32)}, {t(F32)}, reduction("mul")).native);
}

// The reduced dims that a reduction's declared output shape determines.
// strait-run prints this note per rank when a program loads on a GPU.
TEST(CudaNoDevice, SupportNoteOfAProgram) {
  test::ProgramBuilder b;
  uint32_t x = b.addValue("x", program::DTYPE_BF16, {2, 3}, program::ROLE_INPUT);
  uint32_t y = b.addValue("y", program::DTYPE_BF16, {2, 3}, program::ROLE_OUTPUT);
  uint32_t z = b.addValue("z", program::DTYPE_BF16, {2, 3}, program::ROLE_OUTPUT);
  // [3, 3] -> [3] without keepdims: the shapes do not say which axis goes.
  uint32_t f = b.addValue("f", program::DTYPE_F32, {3, 3}, program::ROLE_INPUT);
  uint32_t axes = b.addValue("axes", program::DTYPE_I64, {1}, program::ROLE_INPUT);
  uint32_t s = b.addValue("s", program::DTYPE_F32, {3}, program::ROLE_OUTPUT);
  b.addKernel("Softmax", {x}, {y}); // no bf16 Softmax: host fallback
  b.addKernel("Softmax", {y}, {z});
  test::setInt(b.addKernel("ReduceSum", {f, axes}, {s}), "keepdims", 0);
  b.addRunStep();
  std::string note = cudaSupportNote(b.get());
  EXPECT_NE(note.find("cuda: 2 of 3 kernels will run on the host"), std::string::npos) << note;
  EXPECT_NE(note.find("Softmax(bf16) -> (bf16) x2: input 0 is bf16"), std::string::npos) << note;
  EXPECT_NE(note.find("\ncuda: 1 of 3 kernels wait on the host for an integer input"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("ReduceSum(f32, i64) -> (f32)"), std::string::npos) << note;

  // The same reduction with its axes a program constant (as straitc emits
  // them): read from the executor's host copy, no wait.
  program::Program constant = b.get();
  for (program::Value &v : *constant.mutable_values())
    if (v.id() == axes) {
      v.set_role(program::ROLE_CONSTANT);
      program::TensorData *d = v.mutable_constant();
      d->set_dtype(program::DTYPE_I64);
      d->add_shape(1);
      d->add_int64_data(1);
    }
  std::string constantNote = cudaSupportNote(constant);
  EXPECT_EQ(constantNote.find("wait on the host"), std::string::npos) << constantNote;
  EXPECT_NE(constantNote.find("cuda: 2 of 3 kernels will run on the host"), std::string::npos)
      << constantNote;

  test::ProgramBuilder native;
  uint32_t a = native.addValue("a", program::DTYPE_F32, {2, 3}, program::ROLE_INPUT);
  uint32_t o = native.addValue("o", program::DTYPE_F32, {2, 3}, program::ROLE_OUTPUT);
  native.addKernel("Softmax", {a}, {o});
  native.addRunStep();
  EXPECT_EQ(cudaSupportNote(native.get()), "");
}

TEST(CudaNoDevice, ReducedDimsFromShapes) {
  using V = std::vector<bool>;
  V r;
  ASSERT_TRUE(reducedDimsFromShapes({2, 3, 4}, {1, 3, 1}, true, r));
  EXPECT_EQ(r, (V{true, false, true}));
  ASSERT_TRUE(reducedDimsFromShapes({2, 1, 4}, {2, 1, 4}, true, r));
  EXPECT_EQ(r, (V{false, false, false}));
  EXPECT_FALSE(reducedDimsFromShapes({2, 3}, {2, 5}, true, r));
  EXPECT_FALSE(reducedDimsFromShapes({2, 3}, {2}, true, r));
  // A Conv bias gradient, [N, M, H, W] -> [M].
  ASSERT_TRUE(reducedDimsFromShapes({2, 64, 56, 56}, {64}, false, r));
  EXPECT_EQ(r, (V{true, false, true, true}));
  ASSERT_TRUE(reducedDimsFromShapes({1, 4, 1}, {4}, false, r));
  EXPECT_EQ(r, (V{true, false, true}));
  ASSERT_TRUE(reducedDimsFromShapes({4, 1}, {4}, false, r));
  EXPECT_EQ(r, (V{false, true}));
  ASSERT_TRUE(reducedDimsFromShapes({2, 3}, {}, false, r));
  EXPECT_EQ(r, (V{true, true}));
  // Size-1 dims may go either way: the same reduction.
  ASSERT_TRUE(reducedDimsFromShapes({1, 1, 5}, {1, 5}, false, r));
  // Ambiguous: which of two equal dims is kept.
  EXPECT_FALSE(reducedDimsFromShapes({3, 3}, {3}, false, r));
  EXPECT_FALSE(reducedDimsFromShapes({32, 32, 8, 8}, {32}, false, r));
  EXPECT_FALSE(reducedDimsFromShapes({2, 3}, {5}, false, r));
  EXPECT_FALSE(reducedDimsFromShapes({2}, {2, 1}, false, r));
}

TEST(CudaNoDevice, NativeSupportOfConvolutions) {
  bool cudnn = false;
  for (const std::string &op : cudaKernelOps())
    cudnn |= op == "Conv";
  if (!cudnn)
    GTEST_SKIP() << "built without cuDNN: Conv runs on the host";
  Shape x = {2, 3, 8, 8}, w = {4, 3, 3, 3}, y = {2, 4, 6, 6};
  EXPECT_TRUE(check("Conv", {t(F32, x), t(F32, w), t(F32, {4})}, {t(F32, y)}).native);
  EXPECT_TRUE(check("Conv", {t(BF16, x), t(BF16, w), t(BF16, {4})}, {t(BF16, y)}).native);
  EXPECT_TRUE(check("Conv", {t(F16, x), t(F16, w), t(F32, {4})}, {t(F16, y)}).native);
  auto inputShape = [&](program::Kernel &k) { setInts(k, "input_shape", x); };
  auto weightShape = [&](program::Kernel &k) { setInts(k, "weight_shape", w); };
  EXPECT_TRUE(
      check("ConvGradInput", {t(BF16, y), t(BF16, w)}, {t(BF16, x)}, inputShape).native);
  EXPECT_TRUE(
      check("ConvGradWeight", {t(BF16, y), t(BF16, x)}, {t(BF16, w)}, weightShape).native);
  EXPECT_FALSE(check("Conv", {t(F64, x), t(F64, w)}, {t(F64, y)}).native);
  EXPECT_FALSE(check("Conv", {t(BF16, x), t(BF16, w), t(F16, {4})}, {t(BF16, y)}).native);
  EXPECT_FALSE(check("Conv", {t(F32, x), t(BF16, w)}, {t(F32, y)}).native);
  EXPECT_TRUE(check("ConvGradWeight", {t(F32, y), t(F32, x)}, {t(F32, w)}, weightShape).native);
  // The kernel's host checks run on the static shapes: a missing attribute,
  // a wrong output shape and pads cuDNN cannot express are not native.
  NativeSupport missing = check("ConvGradWeight", {t(F32, y), t(F32, x)}, {t(F32, w)});
  EXPECT_FALSE(missing.native);
  EXPECT_NE(missing.reason.find("weight_shape"), std::string::npos) << missing.reason;
  EXPECT_FALSE(check("Conv", {t(F32, x), t(F32, w)}, {t(F32, {2, 4, 5, 5})}).native);
  NativeSupport pads = check("Conv", {t(BF16, x), t(BF16, w)}, {t(BF16, {2, 4, 7, 7})},
                             [](program::Kernel &k) { setInts(k, "pads", {0, 0, 1, 1}); });
  EXPECT_FALSE(pads.native);
  EXPECT_NE(pads.reason.find("pads 0 (begin) and 1 (end)"), std::string::npos) << pads.reason;
  EXPECT_TRUE(check("Conv", {t(BF16, x), t(BF16, w)}, {t(BF16, {2, 4, 8, 8})},
                    [](program::Kernel &k) { setInts(k, "pads", {1, 1, 1, 1}); })
                  .native);
}

//===----------------------------------------------------------------------===//
// The bundled models' training steps
//===----------------------------------------------------------------------===//

namespace {

struct ModelCase {
  const char *model;
  const char *inputShape;
  const char *precision;
  /// Loss and optimizer flags.
  const char *training = "--loss cross-entropy --optimizer adamw";
  /// Suffix of the test name for other training flags.
  const char *variant = "";
};

std::string straitcPath() {
  if (const char *env = std::getenv("STRAIT_STRAITC"))
    return env;
#ifdef STRAIT_TEST_STRAITC
  return STRAIT_TEST_STRAITC;
#else
  return "";
#endif
}

std::string modelsDir() {
#ifdef STRAIT_TEST_MODELS_DIR
  return STRAIT_TEST_MODELS_DIR;
#else
  return "";
#endif
}

void PrintTo(const ModelCase &m, std::ostream *os) {
  *os << m.model << " " << m.inputShape << " " << m.precision << " " << m.training;
}

bool exists(const std::string &path) { return !path.empty() && access(path.c_str(), R_OK) == 0; }

class CudaNoDeviceModels : public ::testing::TestWithParam<ModelCase> {};

TEST_P(CudaNoDeviceModels, TrainingStepRunsNatively) {
  const ModelCase &m = GetParam();
  std::string straitc = straitcPath();
  std::string onnx = modelsDir() + "/" + m.model + "/" + m.model + ".onnx";
  if (!exists(straitc) || access(straitc.c_str(), X_OK) != 0)
    GTEST_SKIP() << "no straitc (set STRAIT_STRAITC or build the compiler): '" << straitc << "'";
  if (!exists(onnx))
    GTEST_SKIP() << "no model " << onnx;
  char dirTemplate[] = "/tmp/strait-cuda-coverage-XXXXXX";
  ASSERT_NE(mkdtemp(dirTemplate), nullptr);
  std::string dir = dirTemplate;
  std::string cmd = "'" + straitc + "' '" + onnx + "' --shape-only --input-shape " +
                    m.inputShape + " " + m.training + " --precision " + m.precision +
                    " --emit=program -o '" + dir + "/job' > '" + dir + "/log' 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream logFile(dir + "/log");
  std::stringstream log;
  log << logFile.rdbuf();
  ASSERT_EQ(rc, 0) << cmd << "\n" << log.str();
  StatusOr<program::Program> p = loadProgram(dir + "/job/rank0.program.pb");
  ASSERT_TRUE(p.isOk()) << p.getStatus().toString();
  std::system(("rm -rf '" + dir + "'").c_str());

  std::map<std::string, int> notNative, waits;
  std::map<std::string, std::string> reasons;
  std::vector<KernelSpec> specs = kernelSpecs(*p);
  ASSERT_GT(specs.size(), 10u);
  for (const KernelSpec &s : specs) {
    NativeSupport n = nativeSupport(s);
    std::string sig = kernelSignature(s);
    if (!n.native) {
      ++notNative[sig];
      reasons[sig] = n.reason;
    } else if (n.hostWait) {
      ++waits[sig];
      reasons[sig] = n.reason;
    }
  }
  std::string list;
  for (const auto &e : notNative)
    list += "  " + std::to_string(e.second) + " x " + e.first + ": " + reasons[e.first] + "\n";
  std::string waitList;
  for (const auto &e : waits)
    waitList += "  " + std::to_string(e.second) + " x " + e.first + ": " + reasons[e.first] + "\n";
  // straitc passes axes and bounds as program constants, which kernels read
  // from their host copies: no kernel of a compiled step waits for the
  // stream, so every segment can be a CUDA graph.
  EXPECT_TRUE(waitList.empty()) << m.model << " " << m.precision
                                << ": native kernels that wait for the stream:\n"
                                << waitList;
  EXPECT_TRUE(notNative.empty()) << m.model << " " << m.precision << ": " << specs.size()
                                 << " kernels, not native on CUDA (host fallback):\n"
                                 << list;
}

std::string caseName(const ::testing::TestParamInfo<ModelCase> &info) {
  std::string s = std::string(info.param.model) + "_" + info.param.precision +
                  info.param.variant;
  for (char &c : s)
    if (c == '-')
      c = '_';
  return s;
}

const ModelCase kModels[] = {
    {"gpt2-tiny", "input_ids=2x16", "f32"},
    {"gpt2-tiny", "input_ids=2x16", "bf16"},
    {"gpt2-tiny", "input_ids=2x16", "f16"},
    {"llama-tiny", "input_ids=2x16", "f32"},
    {"llama-tiny", "input_ids=2x16", "bf16"},
    {"llama-tiny", "input_ids=2x16", "f16"},
    {"digits-cnn", "images=32x1x8x8", "f32"},
    {"digits-cnn", "images=32x1x8x8", "bf16"},
    {"digits-cnn", "images=32x1x8x8", "f16"},
    {"gpt2", "input_ids=2x128", "f32"},
    {"gpt2", "input_ids=2x128", "bf16"},
    {"gpt2", "input_ids=2x128", "f16"},
    {"bert-base", "input_ids=2x128", "f32"},
    {"bert-base", "input_ids=2x128", "bf16"},
    {"bert-base", "input_ids=2x128", "f16"},
    {"vit-b-16", "pixel_values=2x3x224x224", "f32"},
    {"vit-b-16", "pixel_values=2x3x224x224", "bf16"},
    {"vit-b-16", "pixel_values=2x3x224x224", "f16"},
    {"resnet50", "pixel_values=2x3x224x224", "f32"},
    {"resnet50", "pixel_values=2x3x224x224", "bf16"},
    {"resnet50", "pixel_values=2x3x224x224", "f16"},
    {"mobilenet-v3-large", "pixel_values=2x3x224x224", "f32"},
    {"mobilenet-v3-large", "pixel_values=2x3x224x224", "bf16"},
    {"mobilenet-v3-large", "pixel_values=2x3x224x224", "f16"},
    // Other losses and optimizers: MSE, SGD with momentum, global-norm clipping.
    {"gpt2-tiny", "input_ids=2x16", "bf16", "--loss mse --optimizer sgd --clip-norm 1",
     "_mse_sgd_clip"},
    {"digits-cnn", "images=8x1x8x8", "bf16", "--loss mse --optimizer adamw --clip-norm 1",
     "_mse_clip"},
    {"resnet50", "pixel_values=2x3x224x224", "bf16",
     "--loss cross-entropy --optimizer sgd --clip-norm 1", "_sgd_clip"},
};

} // namespace

INSTANTIATE_TEST_SUITE_P(Models, CudaNoDeviceModels, ::testing::ValuesIn(kModels), caseName);

//===----------------------------------------------------------------------===//
// The rules against the kernels (GPU)
//===----------------------------------------------------------------------===//

namespace {

/// `shape` filled with ones of `dtype` (no division by zero, logs of 1).
Arr onesOf(DType dtype, Shape shape) {
  Arr a{dtype, std::move(shape), {}};
  int64_t n = numElements(a.shape);
  size_t es = dtypeSize(dtype);
  a.bytes.resize(n * es);
  for (int64_t k = 0; k < n; ++k) {
    char *p = a.bytes.data() + k * es;
    switch (dtype) {
    case program::DTYPE_F32: { float v = 1; std::memcpy(p, &v, 4); break; }
    case program::DTYPE_F64: { double v = 1; std::memcpy(p, &v, 8); break; }
    case program::DTYPE_I32: { int32_t v = 1; std::memcpy(p, &v, 4); break; }
    case program::DTYPE_I64: { int64_t v = 1; std::memcpy(p, &v, 8); break; }
    case program::DTYPE_BF16: { uint16_t v = 0x3F80; std::memcpy(p, &v, 2); break; }
    case program::DTYPE_F16: { uint16_t v = 0x3C00; std::memcpy(p, &v, 2); break; }
    default: *p = 1; break; // bool, u8
    }
  }
  return a;
}

} // namespace

// For many (op, dtypes), runs the kernel on cuda:0 and checks that
// nativeSupport's answer is what the backend did: native means it ran as a
// CUDA kernel (no host fallback), not native that it ran on the host or
// failed on both backends.
TEST(CudaNativeSupport, AgreesWithTheKernels) {
  REQUIRE_GPU();
  BackendRegistry reg;
  registerCpuBackend(reg);
  CudaOptions o;
  o.syncEachKernel = true;
  ASSERT_TRUE(registerCudaBackend(reg, o).isOk());
  const Backend *cuda = *reg.forDevice("cuda:0");
  const DType all[] = {program::DTYPE_F32, program::DTYPE_F64,  program::DTYPE_I32,
                       program::DTYPE_I64, program::DTYPE_BF16, program::DTYPE_F16,
                       program::DTYPE_BOOL};
  int checked = 0, native = 0;
  auto probe = [&](const std::string &op, const std::vector<Arr> &ins, std::vector<Arr> outs,
                   const Attrs &attrs = {}) {
    program::Kernel k;
    k.set_op(op);
    if (attrs)
      attrs(k);
    KernelSpec spec{&k, {}, {}};
    for (const Arr &a : ins)
      spec.inputs.push_back(OperandType{true, a.dtype, a.shape});
    for (const Arr &a : outs)
      spec.outputs.push_back(OperandType{true, a.dtype, a.shape});
    int64_t before = cudaHostFallbackCounts(*cuda)[op];
    Status s = runOn("cuda:0", reg, op, ins, outs, attrs);
    bool ranNatively = s.isOk() && cudaHostFallbackCounts(*cuda)[op] == before;
    NativeSupport n = nativeSupport(spec);
    EXPECT_EQ(n.native, ranNatively)
        << kernelSignature(spec) << ": nativeSupport says " << (n.native ? "native" : n.reason)
        << "; the backend " << (!s.isOk() ? "failed: " + s.toString()
                                : ranNatively ? std::string("ran it natively")
                                              : std::string("ran it on the host"));
    ++checked;
    native += ranNatively;
  };
  Shape s = {2, 3};
  for (DType t : all) {
    for (const char *op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"})
      probe(op, {onesOf(t, s), onesOf(t, s)}, {Arr::out(s, t)});
    for (const char *op : {"Equal", "Less", "Greater"})
      probe(op, {onesOf(t, s), onesOf(t, s)}, {Arr::out(s, program::DTYPE_BOOL)});
    for (const char *op : {"And", "Or"})
      probe(op, {onesOf(t, s), onesOf(t, s)}, {Arr::out(s, t)});
    for (const char *op : {"Neg", "Abs", "Exp", "Log", "Sqrt", "Relu", "Tanh", "Sigmoid", "Erf",
                           "Floor", "Not", "Gelu", "HardSigmoid", "HardSwish", "Softmax"})
      probe(op, {onesOf(t, s)}, {Arr::out(s, t)});
    for (DType to : all)
      probe("Cast", {onesOf(t, s)}, {Arr::out(s, to)},
            [to](program::Kernel &k) { setInt(k, "to", to); });
    probe("Transpose", {onesOf(t, s)}, {Arr::out({3, 2}, t)},
          [](program::Kernel &k) { setInts(k, "perm", {1, 0}); });
    for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMax"})
      probe(op, {onesOf(t, s)}, {Arr::out({2}, t)}, [](program::Kernel &k) {
        setInts(k, "axes", {1});
        setInt(k, "keepdims", 0);
      });
    probe("MatMul", {onesOf(t, {2, 3}), onesOf(t, {3, 4})}, {Arr::out({2, 4}, t)});
    probe("ReduceToShape", {onesOf(t, s)}, {Arr::out({3}, t)},
          [](program::Kernel &k) { setInts(k, "shape", {3}); });
    probe("Conv", {onesOf(t, {1, 2, 5, 5}), onesOf(t, {3, 2, 3, 3})}, {Arr::out({1, 3, 3, 3}, t)});
  }
  EXPECT_EQ(checked, 287);
  EXPECT_GT(native, 100);
}
