//===- FusedTestPrograms.h - FusedElementwise test programs -----*- C++ -*-===//
//
// Programs with their inputs, shared by the CPU conformance test
// (FusedTest.cpp: fused vs the unfused kernels) and the CUDA test
// (CudaTest.cpp: CUDA vs CPU). Case 0 (GELU, tanh form, two outputs) is also
// the base the decoder's error tests edit.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TEST_FUSEDTESTPROGRAMS_H
#define STRAIT_RUNTIME_TEST_FUSEDTESTPROGRAMS_H

#include "TestUtil.h"

#include "../lib/codec/CodecLayout.h"
#include "strait/runtime/Tensor.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace strait {
namespace rt {
namespace test {

struct FusedCase {
  std::string name;
  std::vector<std::string> ops;
  std::vector<int64_t> args;
  std::vector<float> constants;
  std::vector<int64_t> outputs;
  Shape shape;
  std::vector<OwnedTensor> inputs;
  std::vector<DType> outputTypes;

  program::Kernel kernel() const {
    program::Kernel k;
    k.set_op("FusedElementwise");
    k.set_domain("strait");
    k.set_name("fused");
    auto &attrs = *k.mutable_attrs();
    for (const std::string &o : ops)
      attrs["ops"].mutable_strings()->add_v(o);
    for (int64_t a : args)
      attrs["args"].mutable_ints()->add_v(a);
    attrs["constants"].mutable_floats();
    for (float c : constants)
      attrs["constants"].mutable_floats()->add_v(c);
    for (int64_t o : outputs)
      attrs["outputs"].mutable_ints()->add_v(o);
    return k;
  }
  std::vector<const Tensor *> inputPtrs() const {
    std::vector<const Tensor *> v;
    for (const OwnedTensor &t : inputs)
      v.push_back(&t.tensor);
    return v;
  }
  /// An f32 input filled from `values` (scaled pseudo-random when empty).
  void addF32(Shape s, float scale, uint32_t seed) {
    OwnedTensor t(program::DTYPE_F32, s);
    std::vector<float> v = pseudoRandom(t.tensor.numel(), seed);
    for (int64_t i = 0; i < t.tensor.numel(); ++i)
      t.as<float>()[i] = scale * v[i];
    inputs.push_back(std::move(t));
  }
  /// A bf16 or f16 input: scaled pseudo-random values rounded to the type.
  void addLow(DType t, Shape s, float scale, uint32_t seed) {
    OwnedTensor x(t, s);
    std::vector<float> v = pseudoRandom(x.tensor.numel(), seed);
    for (int64_t i = 0; i < x.tensor.numel(); ++i)
      x.as<uint16_t>()[i] = t == program::DTYPE_BF16 ? codec::floatToBFloat16(scale * v[i])
                                                     : codec::floatToHalf(scale * v[i]);
    inputs.push_back(std::move(x));
  }
  void addBool(Shape s, uint32_t seed) {
    OwnedTensor t(program::DTYPE_BOOL, s);
    std::vector<float> v = pseudoRandom(t.tensor.numel(), seed);
    for (int64_t i = 0; i < t.tensor.numel(); ++i)
      t.as<bool>()[i] = v[i] > 0;
    inputs.push_back(std::move(t));
  }
};

constexpr int64_t U = -1; ///< an unused operand

inline int numFusedCases() { return 9; }

inline FusedCase fusedCase(int i) {
  FusedCase c;
  switch (i) {
  case 0: // GELU (tanh): outputs y and the tanh, as the forward pass keeps it
    c.name = "GeluTanhTwoOutputs";
    c.shape = {3, 5, 37};
    c.addF32(c.shape, 3, 1);
    c.ops = {"Const", "Mul", "Const", "Pow", "Const", "Mul", "Add",
             "Const", "Mul", "Tanh", "Const", "Add", "Mul"};
    c.args = {0, U, U, 0, 1, U, 1, U, U, 0, 3, U, 2, U, U, 5, 4, U, 0, 6, U,
              3, U, U, 7, 8, U, 9, U, U, 4, U, U, 10, 11, U, 2, 12, U};
    c.constants = {0.5f, 3.0f, 0.044715f, 0.7978845608f, 1.0f};
    c.outputs = {13, 10};
    c.outputTypes = {program::DTYPE_F32, program::DTYPE_F32};
    break;
  case 1: // attention scores: s * 0.25 + mask[2,1,16,16]
    c.name = "ScaledMaskedScores";
    c.shape = {2, 4, 16, 16};
    c.addF32(c.shape, 4, 2);
    c.addF32({2, 1, 16, 16}, 1, 3);
    c.ops = {"Const", "Mul", "Add"};
    c.args = {0, U, U, 0, 2, U, 3, 1, U};
    c.constants = {0.25f};
    c.outputs = {4};
    c.outputTypes = {program::DTYPE_F32};
    break;
  case 2: // Where over a broadcast bool mask and constants
    c.name = "WhereBoolMask";
    c.shape = {2, 4, 16, 16};
    c.addBool({1, 1, 16, 16}, 4);
    c.addF32(c.shape, 2, 5);
    c.ops = {"Const", "Const", "Where", "Add"};
    c.args = {0, U, U, 1, U, U, 0, 2, 3, 4, 1, U};
    c.constants = {0.0f, -3.4028234e38f};
    c.outputs = {5};
    c.outputTypes = {program::DTYPE_F32};
    break;
  case 3: // comparisons and logic, a bool output; large enough for threads
    c.name = "PredicatesAndBoolOutput";
    c.shape = {4, 130, 67};
    c.addF32(c.shape, 1, 6);
    c.addF32({130, 1}, 1, 7);
    c.addBool({67}, 8);
    c.ops = {"Less", "Not", "And", "Or", "Identity", "Max", "Min", "Where"};
    c.args = {0, 1, U, 3, U, U, 4, 2, U, 5, 3, U, 6, U, U, 0, 1, U, 8, 7, U, 6, 9, 0};
    c.outputs = {6, 10};
    c.outputTypes = {program::DTYPE_BOOL, program::DTYPE_F32};
    break;
  case 4: // unary math and Pow by constants 2 and 3
    c.name = "UnaryMath";
    c.shape = {1000};
    c.addF32(c.shape, 3, 9);
    c.ops = {"Abs", "Const", "Add", "Log", "Sqrt", "Exp", "Reciprocal", "Sigmoid",
             "Erf", "Const", "Pow", "Const", "Pow"};
    c.args = {0, U, U, 0, U, U, 1, 2, U, 3, U, U, 3, U, U, 0, U, U, 3, U, U,
              0, U, U, 0, U, U, 1, U, U, 0, 10, U, 2, U, U, 0, 12, U};
    c.constants = {1.0f, 2.0f, 3.0f};
    c.outputs = {4, 5, 6, 7, 8, 9, 11, 13};
    c.outputTypes = std::vector<DType>(8, program::DTYPE_F32);
    break;
  case 5: // more unary math, Div, Sub and Pow with a tensor exponent
    c.name = "MoreMath";
    c.shape = {7, 33};
    c.addF32(c.shape, 3, 10);
    c.addF32({33}, 2, 11);
    c.ops = {"Sin", "Cos", "Floor", "Ceil", "Neg", "Relu", "Div", "Abs", "Pow", "Sub", "Tanh"};
    c.args = {0, U, U, 0, U, U, 0, U, U, 1, U, U, 0, U, U, 1, U, U, 2, 3, U,
              0, U, U, 9, 1, U, 2, 6, U, 11, U, U};
    c.outputs = {4, 5, 6, 7, 8, 10, 11, 12};
    c.outputTypes = std::vector<DType>(8, program::DTYPE_F32);
    break;
  case 6: // three-way broadcast with strided inner dimensions
    c.name = "StridedBroadcast";
    c.shape = {5, 6, 7};
    c.addF32({5, 1, 7}, 1, 12);
    c.addF32({1, 6, 1}, 1, 13);
    c.addF32({6, 7}, 1, 14);
    c.ops = {"Sub", "Mul", "Add"};
    c.args = {0, 1, U, 3, 2, U, 4, 1, U};
    c.outputs = {5};
    c.outputTypes = {program::DTYPE_F32};
    break;
  case 7: // 16-bit storage: bf16 and f16 inputs (one broadcast), rounding in
          // the program, bf16/f16/f32 outputs; exact ops only, so every
          // backend agrees bit for bit
    c.name = "LowPrecisionStorage";
    c.shape = {5, 6, 7};
    c.addLow(program::DTYPE_BF16, c.shape, 3, 15);
    c.addLow(program::DTYPE_F16, {6, 7}, 2, 16);
    c.addF32({7}, 1, 17);
    // 3 x*h, 4 round bf16, 5 + b, 6 round f16, 7 const, 8 x*0.1 (unrounded),
    // 9 (x*h)_bf16 - x*0.1
    c.ops = {"Mul", "RoundBF16", "Add", "RoundF16", "Const", "Mul", "Sub"};
    c.args = {0, 1, U, 3, U, U, 4, 2, U, 5, U, U, 0, U, U, 0, 7, U, 4, 8, U};
    c.constants = {0.1f};
    c.outputs = {9, 6, 5, 3};
    c.outputTypes = {program::DTYPE_BF16, program::DTYPE_F16, program::DTYPE_F32,
                     program::DTYPE_F32};
    break;
  case 8: // every comparison, on values in quarter steps (many ties), one
          // row broadcast; a Where on a comparison
    c.name = "ComparisonsWithTies";
    c.shape = {9, 41};
    c.addF32(c.shape, 1, 18);
    c.addF32({41}, 1, 19);
    for (OwnedTensor &t : c.inputs)
      for (int64_t i = 0; i < t.tensor.numel(); ++i)
        t.as<float>()[i] = std::round(t.as<float>()[i] * 4) / 4;
    c.ops = {"Equal", "Greater", "GreaterOrEqual", "LessOrEqual", "Less", "Where"};
    c.args = {0, 1, U, 0, 1, U, 0, 1, U, 0, 1, U, 0, 1, U, 3, 0, 1};
    c.outputs = {2, 3, 4, 5, 6, 7};
    c.outputTypes = {program::DTYPE_BOOL, program::DTYPE_BOOL, program::DTYPE_BOOL,
                     program::DTYPE_BOOL, program::DTYPE_BOOL, program::DTYPE_F32};
    break;
  }
  return c;
}

} // namespace test
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_TEST_FUSEDTESTPROGRAMS_H
