//===- TestUtil.h - Helpers for runtime tests -------------------*- C++ -*-===//
//
// A small builder for programs and a runner for one-kernel programs on the
// CPU backend, so kernel tests read as "inputs, attributes, expected output".
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TEST_TESTUTIL_H
#define STRAIT_RUNTIME_TEST_TESTUTIL_H

#include "strait/runtime/ConvWindow.h"
#include "strait/runtime/Executor.h"
#include "strait/runtime/Program.h"

#include <functional>
#include <string>
#include <vector>

namespace strait {
namespace rt {
namespace test {

/// Builds programs value by value and kernel by kernel.
class ProgramBuilder {
public:
  ProgramBuilder(int rank = 0, int worldSize = 1);
  uint32_t addValue(const std::string &name, DType dtype, const Shape &shape,
                    program::ValueRole role);
  uint32_t addConstant(const std::string &name, const std::vector<float> &data,
                       const Shape &shape);
  uint32_t addParameter(const std::string &name, const Shape &shape);
  program::Kernel &addKernel(const std::string &op,
                             const std::vector<uint32_t> &inputs,
                             const std::vector<uint32_t> &outputs);
  /// A run step with the given kernels (all kernels when empty).
  void addRunStep(std::vector<uint32_t> kernels = {});
  program::Program &get() { return program; }

private:
  program::Program program;
};

/// Expects a non-empty error message that names `op` and contains every
/// one of `words` (the operand, the attribute, the shapes).
void expectErrorNames(const std::string &msg, const std::string &op,
                      std::initializer_list<const char *> words);

void setInt(program::Kernel &k, const std::string &name, int64_t v);
void setFloat(program::Kernel &k, const std::string &name, float v);
void setInts(program::Kernel &k, const std::string &name,
             const std::vector<int64_t> &v);
void setString(program::Kernel &k, const std::string &name,
               const std::string &v);

/// An input of a one-kernel test: f32 data or i64 data.
struct Input {
  DType dtype;
  Shape shape;
  std::vector<float> f32;
  std::vector<int64_t> i64;
  static Input f(Shape shape, std::vector<float> data) {
    return {program::DTYPE_F32, std::move(shape), std::move(data), {}};
  }
  static Input i(Shape shape, std::vector<int64_t> data) {
    return {program::DTYPE_I64, std::move(shape), {}, std::move(data)};
  }
};

struct Output {
  DType dtype;
  Shape shape;
};

/// Runs `op` once with the inputs; returns the outputs as f32 vectors
/// (integer outputs converted), or the error.
StatusOr<std::vector<std::vector<float>>>
runKernel(const std::string &op, const std::vector<Input> &inputs,
          const std::vector<Output> &outputs,
          const std::function<void(program::Kernel &)> &setAttrs = {});

/// rt::convWindow (no tensors, no backend) of a Conv, or with `pooling` a
/// MaxPool, kernel named 'w' with the attributes `setAttrs` sets.
StatusOr<ConvWindow> convWindowOf(const Shape &x, const std::vector<int64_t> &kernel,
                                  bool pooling,
                                  const std::function<void(program::Kernel &)> &setAttrs);

/// Fills a vector with a deterministic pseudo-random sequence in [-1, 1).
std::vector<float> pseudoRandom(size_t n, uint32_t seed);

/// A fresh directory under gtest's temp dir ("" on failure), e.g. a file
/// store for communicator tests; removed with everything in it when the
/// test program exits.
std::string makeTempDir(const std::string &prefix);

/// n samples of N(0, 1), reproducible from `seed`.
std::vector<float> gaussian(size_t n, uint32_t seed);

/// Runs one CPU kernel on tensors directly (the backend's resolve, as the
/// executor calls it).
Status runCpu(const program::Kernel &k, std::vector<const Tensor *> ins,
              std::vector<Tensor *> outs);
/// The same in micro-batch `mb` (what AccumulateGrad reads).
Status runCpuInMicroBatch(const program::Kernel &k, std::vector<const Tensor *> ins,
                          std::vector<Tensor *> outs, int mb);
/// One CPU kernel `op` on tensors, with attributes set by `attrs`; fails the
/// test on error.
void runOp(const std::string &op, std::vector<const Tensor *> ins, std::vector<Tensor *> outs,
           const std::function<void(program::Kernel &)> &attrs = {});
/// One CPU kernel `op` with one f32 output of `outShape` (named after the
/// op); fails the test on error.
OwnedTensor runF32Op(const std::string &op, std::vector<const Tensor *> ins,
                     const Shape &outShape,
                     const std::function<void(program::Kernel &)> &attrs = {});
/// The Cast kernel of `x` to `to`.
OwnedTensor castTo(const Tensor &x, DType to);
/// `v` in a new f32 tensor of `shape`.
OwnedTensor f32Tensor(const Shape &shape, const std::vector<float> &v);
/// Same dtype, shape and bytes.
bool sameBytes(const Tensor &a, const Tensor &b);
/// The float with bit pattern `b`.
float fromBits(uint32_t b);
/// Equal bits, or both NaN.
bool sameFloat(float a, float b);
/// Floats between a and b in the ordered bit patterns (0 and -0 adjacent).
int64_t ulpDistance(float a, float b);
/// Elements of the f32 tensor `f32` whose value the 16-bit `low` (widened)
/// does not hold: how much a rounding test's rounding actually rounds.
int64_t roundedCount(const Tensor &f32, const Tensor &low);

/// Reference bf16 rounding, written independently of the backends: f32 ->
/// bf16 bits, round to nearest even; and back.
uint16_t bf16Bits(float f);
float bf16Value(uint16_t b);
/// A bf16 tensor holding `v` rounded to nearest even.
OwnedTensor bf16Tensor(const Shape &shape, const std::vector<float> &v);

} // namespace test
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_TEST_TESTUTIL_H
