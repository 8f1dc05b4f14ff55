//===- TestUtil.cpp - Helpers for runtime tests ---------------------------===//
//
// See TestUtil.h.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "strait/runtime/KernelArgs.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <gtest/gtest.h>
#include <mutex>
#include <random>
#include <stdlib.h>
#include <unistd.h>

namespace strait {
namespace rt {
namespace test {

ProgramBuilder::ProgramBuilder(int rank, int worldSize) {
  program.set_format_version(program::FORMAT_VERSION_1);
  program.set_rank(rank);
  program.set_world_size(worldSize);
  program.set_device("cpu");
}

uint32_t ProgramBuilder::addValue(const std::string &name, DType dtype,
                                  const Shape &shape, program::ValueRole role) {
  uint32_t id = static_cast<uint32_t>(program.values_size());
  program::Value *v = program.add_values();
  v->set_id(id);
  v->set_name(name);
  v->set_dtype(dtype);
  for (int64_t d : shape)
    v->add_shape(d);
  v->set_role(role);
  return id;
}

uint32_t ProgramBuilder::addConstant(const std::string &name,
                                     const std::vector<float> &data,
                                     const Shape &shape) {
  uint32_t id = addValue(name, program::DTYPE_F32, shape, program::ROLE_CONSTANT);
  program::TensorData *c = program.mutable_values(id)->mutable_constant();
  c->set_dtype(program::DTYPE_F32);
  for (int64_t d : shape)
    c->add_shape(d);
  for (float f : data)
    c->add_float_data(f);
  return id;
}

uint32_t ProgramBuilder::addParameter(const std::string &name, const Shape &shape) {
  uint32_t id = addValue(name, program::DTYPE_F32, shape, program::ROLE_PARAMETER);
  program.mutable_values(id)->set_parameter_name(name);
  return id;
}

program::Kernel &ProgramBuilder::addKernel(const std::string &op,
                                           const std::vector<uint32_t> &inputs,
                                           const std::vector<uint32_t> &outputs) {
  program::Kernel *k = program.add_kernels();
  k->set_id(static_cast<uint32_t>(program.kernels_size() - 1));
  k->set_op(op);
  k->set_name(op + "_" + std::to_string(k->id()));
  for (uint32_t i : inputs)
    k->add_inputs(i);
  for (uint32_t o : outputs)
    k->add_outputs(o);
  return *k;
}

void ProgramBuilder::addRunStep(std::vector<uint32_t> kernels) {
  if (kernels.empty())
    for (const auto &k : program.kernels())
      kernels.push_back(k.id());
  program::Step *s = program.add_steps();
  s->set_id(program.steps_size() - 1);
  for (uint32_t k : kernels)
    s->mutable_run()->add_kernel_ids(k);
}

void expectErrorNames(const std::string &msg, const std::string &op,
                      std::initializer_list<const char *> words) {
  ASSERT_FALSE(msg.empty()) << "expected an error";
  EXPECT_NE(msg.find(op), std::string::npos) << msg;
  for (const char *w : words)
    EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
}

void setInt(program::Kernel &k, const std::string &name, int64_t v) {
  (*k.mutable_attrs())[name].set_i(v);
}
void setFloat(program::Kernel &k, const std::string &name, float v) {
  (*k.mutable_attrs())[name].set_f(v);
}
void setInts(program::Kernel &k, const std::string &name,
             const std::vector<int64_t> &v) {
  auto *ints = (*k.mutable_attrs())[name].mutable_ints();
  for (int64_t x : v)
    ints->add_v(x);
}
void setString(program::Kernel &k, const std::string &name,
               const std::string &v) {
  (*k.mutable_attrs())[name].set_s(v);
}

StatusOr<std::vector<std::vector<float>>>
runKernel(const std::string &op, const std::vector<Input> &inputs,
          const std::vector<Output> &outputs,
          const std::function<void(program::Kernel &)> &setAttrs) {
  ProgramBuilder b;
  std::vector<uint32_t> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.push_back(b.addValue("in" + std::to_string(i), inputs[i].dtype,
                             inputs[i].shape, program::ROLE_INPUT));
  for (size_t i = 0; i < outputs.size(); ++i)
    outs.push_back(b.addValue("out" + std::to_string(i), outputs[i].dtype,
                              outputs[i].shape, program::ROLE_OUTPUT));
  program::Kernel &k = b.addKernel(op, ins, outs);
  if (setAttrs)
    setAttrs(k);
  b.addRunStep();
  BackendRegistry registry;
  registerCpuBackend(registry);
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec,
                          Executor::create(b.get(), registry));
  for (size_t i = 0; i < inputs.size(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec->getValue(ins[i]));
    if (inputs[i].dtype == program::DTYPE_F32)
      std::memcpy(t.data, inputs[i].f32.data(), t.byteSize());
    else
      std::memcpy(t.data, inputs[i].i64.data(), t.byteSize());
  }
  STRAIT_RETURN_IF_ERROR(exec->run());
  std::vector<std::vector<float>> result;
  for (uint32_t id : outs) {
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec->getValue(id));
    std::vector<float> v(t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) {
      switch (t.dtype) {
      case program::DTYPE_F32: v[i] = t.as<float>()[i]; break;
      case program::DTYPE_I64: v[i] = static_cast<float>(t.as<int64_t>()[i]); break;
      case program::DTYPE_BOOL: v[i] = t.as<bool>()[i]; break;
      default: return internalError("test output dtype " + dtypeName(t.dtype));
      }
    }
    result.push_back(std::move(v));
  }
  return result;
}

StatusOr<ConvWindow> convWindowOf(const Shape &x, const std::vector<int64_t> &kernel,
                                  bool pooling,
                                  const std::function<void(program::Kernel &)> &setAttrs) {
  program::Kernel k;
  k.set_op(pooling ? "MaxPool" : "Conv");
  k.set_name("w");
  setAttrs(k);
  KernelContext ctx(k, {}, {});
  return convWindow(ctx, x, kernel, pooling);
}

std::vector<float> pseudoRandom(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (float &x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>((s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
  }
  return v;
}

namespace {
/// The folders makeTempDir made, removed when the test program exits (by
/// the process that made them; STRAIT_KEEP_TEST_DIRS=1 keeps them).
struct TempDirs {
  std::mutex mutex;
  std::vector<std::string> dirs;
  pid_t owner = ::getpid();
  ~TempDirs() {
    if (::getpid() != owner || std::getenv("STRAIT_KEEP_TEST_DIRS"))
      return;
    std::error_code ec;
    for (const std::string &d : dirs)
      std::filesystem::remove_all(d, ec);
  }
};
TempDirs &tempDirs() {
  static TempDirs dirs;
  return dirs;
}
} // namespace

std::string makeTempDir(const std::string &prefix) {
  std::string tmpl = testing::TempDir() + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  char *dir = ::mkdtemp(buf.data());
  if (!dir)
    return "";
  TempDirs &t = tempDirs();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.dirs.push_back(dir);
  return dir;
}

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto &x : v)
    x = d(gen);
  return v;
}

Status runCpu(const program::Kernel &k, std::vector<const Tensor *> ins,
              std::vector<Tensor *> outs) {
  std::unique_ptr<Backend> cpu = createCpuBackend();
  STRAIT_ASSIGN_OR_RETURN(KernelFn fn, cpu->resolve(k));
  KernelContext ctx(k, std::move(ins), std::move(outs));
  return fn(ctx);
}

Status runCpuInMicroBatch(const program::Kernel &k, std::vector<const Tensor *> ins,
                          std::vector<Tensor *> outs, int mb) {
  std::unique_ptr<Backend> cpu = createCpuBackend();
  STRAIT_ASSIGN_OR_RETURN(KernelFn fn, cpu->resolve(k));
  KernelContext ctx(k, std::move(ins), std::move(outs));
  ctx.setMicroBatch(mb);
  return fn(ctx);
}

void runOp(const std::string &op, std::vector<const Tensor *> ins, std::vector<Tensor *> outs,
           const std::function<void(program::Kernel &)> &attrs) {
  program::Kernel k;
  k.set_op(op);
  if (attrs)
    attrs(k);
  Status st = runCpu(k, std::move(ins), std::move(outs));
  ASSERT_TRUE(st.isOk()) << op << ": " << st.toString();
}

OwnedTensor runF32Op(const std::string &op, std::vector<const Tensor *> ins,
                     const Shape &outShape,
                     const std::function<void(program::Kernel &)> &attrs) {
  program::Kernel k;
  k.set_op(op);
  k.set_name(op);
  if (attrs)
    attrs(k);
  OwnedTensor out(program::DTYPE_F32, outShape);
  Status st = runCpu(k, std::move(ins), {&out.tensor});
  EXPECT_TRUE(st.isOk()) << op << ": " << st.toString();
  return out;
}

OwnedTensor castTo(const Tensor &x, DType to) {
  OwnedTensor y(to, x.shape);
  runOp("Cast", {&x}, {&y.tensor}, [&](program::Kernel &k) { setInt(k, "to", to); });
  return y;
}

OwnedTensor f32Tensor(const Shape &shape, const std::vector<float> &v) {
  OwnedTensor t(program::DTYPE_F32, shape);
  std::copy(v.begin(), v.end(), t.tensor.as<float>());
  return t;
}

bool sameBytes(const Tensor &a, const Tensor &b) {
  return a.dtype == b.dtype && a.shape == b.shape &&
         std::memcmp(a.data, b.data, a.byteSize()) == 0;
}

float fromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

bool sameFloat(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}

int64_t ulpDistance(float a, float b) {
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);
  };
  return std::abs(ordered(a) - ordered(b));
}

int64_t roundedCount(const Tensor &f32, const Tensor &low) {
  OwnedTensor back = castTo(low, program::DTYPE_F32);
  int64_t n = 0;
  for (int64_t i = 0; i < f32.numel(); ++i)
    n += back.tensor.as<float>()[i] != f32.as<float>()[i];
  return n;
}

uint16_t bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t lower = u & 0xFFFFu, upper = u >> 16;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1)))
    ++upper;
  return static_cast<uint16_t>(upper);
}

float bf16Value(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

OwnedTensor bf16Tensor(const Shape &shape, const std::vector<float> &v) {
  OwnedTensor t(program::DTYPE_BF16, shape);
  for (size_t i = 0; i < v.size(); ++i)
    t.tensor.as<uint16_t>()[i] = bf16Bits(v[i]);
  return t;
}

} // namespace test
} // namespace rt
} // namespace strait
