//===- CpuFastPathTest.cpp - Vectorized CPU paths against their references -===//
//
// sigmoidFloat (RowMath.h) against libm's double sigmoid rounded to float;
// sceExp (SoftmaxCrossEntropy.h) against libm's exp;
// FusedElementwise's tile loops (compiled for AVX2 and the baseline,
// Fused.cpp) against the program evaluated element by element
// through evalFusedScalar, bit for bit, over sizes that end in every vector
// tail and span several tiles and tasks, with NaN, infinities and signed
// zeros among the inputs; and an output that shares its input's memory (the
// tile loop reads dense f32 inputs in place).
//
//===----------------------------------------------------------------------===//
#include "../lib/cpu/CpuKernels.h"
#include "../lib/cpu/RowMath.h"
#include "../lib/cpu/SoftmaxCrossEntropy.h"
#include "FusedTestPrograms.h"
#include "TestUtil.h"

#include "strait/runtime/FusedProgram.h"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::cpu;
using namespace strait::rt::test;

namespace {

double sigmoidRef(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }

TEST(SigmoidFloat, IsDoubleSigmoidRoundedOverASweepOfAllExponents) {
  // Every 389th float bit pattern of both signs: subnormals, tiny, the exp
  // range, the float underflow of sigmoid(x) near x = -104 and the clamp.
  int64_t checked = 0, inexact = 0;
  for (uint64_t b = 0; b < 0x7f800000u; b += 389)
    for (uint32_t sign : {0u, 0x80000000u}) {
      float x = fromBits(static_cast<uint32_t>(b) | sign);
      float want = static_cast<float>(sigmoidRef(x));
      float got = sigmoidFloat(x);
      ++checked;
      // libm's double exp is within 1 ulp of double: the reference itself
      // may round the other way at a float tie, never further.
      if (!sameFloat(got, want)) {
        ++inexact;
        ASSERT_LE(ulpDistance(got, want), 1) << "x = " << x << ": got " << got << " want " << want;
      }
    }
  EXPECT_LE(inexact, checked / 100000) << "of " << checked;
  EXPECT_EQ(sigmoidFloat(0.0f), 0.5f);
  EXPECT_EQ(sigmoidFloat(-0.0f), 0.5f);
  EXPECT_EQ(sigmoidFloat(INFINITY), 1.0f);
  EXPECT_EQ(sigmoidFloat(-INFINITY), 0.0f);
  EXPECT_EQ(sigmoidFloat(-200.0f), 0.0f);
  EXPECT_EQ(sigmoidFloat(18.0f), 1.0f); // 1 - 1.5e-8 rounds to 1
  EXPECT_GT(sigmoidFloat(-100.0f), 0.0f); // 3.7e-44: a float subnormal
  EXPECT_TRUE(std::isnan(sigmoidFloat(NAN)));
}

TEST(SigmoidKernel, F32EqualsSigmoidFloatAndF64IsLibm) {
  for (int64_t n : {1, 3, 17, 1000, 40001}) {
    std::vector<float> v = pseudoRandom(n, static_cast<uint32_t>(n) + 7);
    for (float &x : v)
      x *= 40;
    OwnedTensor x = f32Tensor({n}, v);
    OwnedTensor y = runF32Op("Sigmoid", {&x.tensor}, {n});
    for (int64_t i = 0; i < n; ++i)
      ASSERT_TRUE(sameFloat(y.as<float>()[i], sigmoidFloat(v[i]))) << "n " << n << " i " << i;
  }
  OwnedTensor xd(program::DTYPE_F64, {3}), yd(program::DTYPE_F64, {3});
  double in[3] = {-30.5, 0.001, 4.5};
  std::memcpy(xd.as<double>(), in, sizeof in);
  runOp("Sigmoid", {&xd.tensor}, {&yd.tensor});
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(yd.as<double>()[i], sigmoidRef(in[i]));
}

TEST(SceExp, IsWithin1e14OfLibmExpAndItsRowLoopIsTheScalar) {
  // t from 0 down to -745 (libm's exp underflows there) in uneven steps.
  double worst = 0;
  for (double t = 0; t > -745; t -= 0.0137) {
    double want = t < -700 ? 0.0 : std::exp(t);
    double got = sceExp(t);
    if (want == 0)
      ASSERT_EQ(got, 0.0) << t;
    else
      worst = std::max(worst, std::abs(got - want) / want);
  }
  EXPECT_LT(worst, 1e-14);
  EXPECT_EQ(sceExp(0.0), 1.0);
  EXPECT_EQ(sceExp(-INFINITY), 0.0);
  EXPECT_TRUE(std::isnan(sceExp(NAN)));
  // The vectorized row loop gives the scalar's bits (every tail length).
  for (int64_t c : {1, 3, 8, 13, 256, 1001}) {
    std::vector<float> v = pseudoRandom(c, static_cast<uint32_t>(c));
    std::vector<double> e(c);
    for (int64_t k = 0; k < c; ++k)
      e[k] = 30.0 * v[k];
    e[0] = c > 2 ? -INFINITY : e[0];
    std::vector<double> x = e;
    sceExpRow(e.data(), c, 30.0);
    for (int64_t k = 0; k < c; ++k) {
      double want = sceExp(x[k] - 30.0);
      ASSERT_TRUE(std::memcmp(&e[k], &want, sizeof want) == 0) << "c " << c << " k " << k;
    }
  }
}

/// Inputs of n elements: pseudo-random times `scale`, with NaN, +-inf, +-0
/// and a huge value planted at positions that move with the input.
void addSpecialF32(FusedCase &c, int64_t n, float scale, uint32_t seed) {
  c.addF32({n}, scale, seed);
  float *p = c.inputs.back().as<float>();
  const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 3e38f, -1e-40f};
  for (int64_t i = seed % 5; i < n; i += 97)
    p[i] = special[(i / 97) % 7];
}

/// The program's outputs evaluated element by element through
/// evalFusedScalar (the reference semantics), inputs of shape [n] or [1].
std::vector<std::vector<float>> scalarReference(const FusedCase &c, int64_t n) {
  std::vector<FusedInstr> code;
  for (size_t i = 0; i < c.ops.size(); ++i) {
    FusedInstr in;
    EXPECT_TRUE(fusedOpFromName(c.ops[i], in.op)) << c.ops[i];
    in.a = static_cast<int32_t>(c.args[3 * i]);
    in.b = static_cast<int32_t>(c.args[3 * i + 1]);
    in.c = static_cast<int32_t>(c.args[3 * i + 2]);
    code.push_back(in);
  }
  size_t numInputs = c.inputs.size();
  for (FusedInstr &in : code) // Pow by a constant 2 or 3: products (as the decoder)
    if (in.op == FusedOp::Pow && in.b >= static_cast<int32_t>(numInputs)) {
      const FusedInstr &e = code[in.b - numInputs];
      if (e.op == FusedOp::Const)
        in.powInt = c.constants[e.a] == 2.0f ? 2 : c.constants[e.a] == 3.0f ? 3 : 0;
    }
  std::vector<std::vector<float>> outs(c.outputs.size(), std::vector<float>(n));
  std::vector<float> regs(numInputs + code.size());
  for (int64_t e = 0; e < n; ++e) {
    for (size_t i = 0; i < numInputs; ++i) {
      const Tensor &t = c.inputs[i].tensor;
      regs[i] = t.as<float>()[t.numel() == 1 ? 0 : e];
    }
    for (size_t k = 0; k < code.size(); ++k) {
      const FusedInstr &in = code[k];
      float a = in.op == FusedOp::Const ? c.constants[in.a] : regs[in.a];
      float b = in.b >= 0 ? regs[in.b] : 0, cc = in.c >= 0 ? regs[in.c] : 0;
      regs[numInputs + k] = evalFusedScalar(in, a, b, cc);
    }
    for (size_t j = 0; j < c.outputs.size(); ++j)
      outs[j][e] = regs[c.outputs[j]];
  }
  return outs;
}

constexpr int64_t U = -1;

/// The programs straitc emits for GPT-2's GELU forward (4 outputs) and
/// backward, llama's SiLU, and Max/Min/Where with a broadcast scalar.
FusedCase program(int which, int64_t n) {
  FusedCase c;
  c.shape = {n};
  switch (which) {
  case 0:
    c.name = "GeluForward";
    addSpecialF32(c, n, 6, 1);
    c.ops = {"Const", "Mul", "Const", "Pow", "Const", "Mul", "Add",
             "Const", "Mul", "Tanh", "Const", "Add", "Mul"};
    c.args = {0, U, U, 0, 1, U, 1, U, U, 0, 3, U, 2, U, U, 5, 4, U, 0, 6, U,
              3, U, U, 7, 8, U, 9, U, U, 4, U, U, 10, 11, U, 2, 12, U};
    c.constants = {0.5f, 3.0f, 0.044715f, 0.797884583f, 1.0f};
    c.outputs = {2, 10, 12, 13};
    break;
  case 1: // dx of y = 0.5 x (1 + t), t = tanh(k (x + a x^3)), from x, dy, t
    c.name = "GeluBackward";
    addSpecialF32(c, n, 6, 2); // 0: x
    c.addF32({n}, 1, 3);       // 1: dy
    c.addF32({n}, 1, 4);       // 2: t
    c.ops = {"Mul", "Const", "Sub", "Const", "Const", "Pow", "Mul", "Add", "Const", "Mul",
             "Mul", "Mul", "Const", "Mul", "Add", "Mul", "Add", "Mul"};
    c.args = {2,  2,  U,  // 3: t^2
              0,  U,  U,  // 4: 1
              4,  3,  U,  // 5: 1 - t^2
              1,  U,  U,  // 6: 3a
              2,  U,  U,  // 7: 2
              0,  7,  U,  // 8: x^2 (Pow by 2)
              6,  8,  U,  // 9: 3a x^2
              4,  9,  U,  // 10: 1 + 3a x^2
              3,  U,  U,  // 11: k
              11, 10, U,  // 12: k (1 + 3a x^2)
              12, 5,  U,  // 13: ... (1 - t^2)
              0,  13, U,  // 14: x ...
              4,  U,  U,  // 15: 0.5
              15, 14, U,  // 16: 0.5 x ...
              4,  2,  U,  // 17: 1 + t
              15, 17, U,  // 18: 0.5 (1 + t)
              18, 16, U,  // 19: dy/dx
              1,  19, U}; // 20: dy dy/dx
    c.constants = {1.0f, 0.134145f, 2.0f, 0.797884583f, 0.5f};
    c.outputs = {20};
    break;
  case 2:
    c.name = "SiluForward";
    addSpecialF32(c, n, 12, 5); // gate
    c.addF32({n}, 2, 6);        // up
    c.ops = {"Sigmoid", "Mul", "Mul"};
    c.args = {0, U, U, 0, 2, U, 3, 1, U};
    c.outputs = {2, 3, 4};
    break;
  default:
    c.name = "MaxMinWhereScalar";
    addSpecialF32(c, n, 3, 7);
    c.addF32({1}, 1, 8);
    c.inputs.back().as<float>()[0] = 0.25f;
    c.ops = {"Max", "Min", "Less", "Where", "Neg", "Abs", "Relu", "Div", "Sub"};
    c.args = {0, 1, U, 0, 1, U, 0, 1, U, 4, 2, 3, 5, U, U, 6, U, U, 7, U, U, 8, 1, U, 0, 9, U};
    c.outputs = {2, 3, 5, 6, 7, 8, 9, 10};
    break;
  }
  c.outputTypes = std::vector<DType>(c.outputs.size(), program::DTYPE_F32);
  return c;
}

TEST(FusedTiles, EqualScalarReferenceBitForBit) {
  // Every vector tail (16 and 8 lanes, 256-element tiles), several tasks.
  for (int which = 0; which < 4; ++which)
    for (int64_t n : {1, 7, 15, 17, 255, 256, 257, 1000, 40001}) {
      FusedCase c = program(which, n);
      SCOPED_TRACE(c.name + " n " + std::to_string(n));
      std::vector<OwnedTensor> outs;
      std::vector<Tensor *> outPtrs;
      outs.reserve(c.outputs.size());
      for (size_t j = 0; j < c.outputs.size(); ++j) {
        outs.emplace_back(program::DTYPE_F32, Shape{n});
        outPtrs.push_back(&outs.back().tensor);
      }
      ASSERT_TRUE(runCpu(c.kernel(), c.inputPtrs(), outPtrs).isOk());
      std::vector<std::vector<float>> want = scalarReference(c, n);
      for (size_t j = 0; j < outs.size(); ++j) {
        int64_t bad = 0;
        for (int64_t i = 0; i < n; ++i)
          if (!sameFloat(outs[j].as<float>()[i], want[j][i]) && bad++ < 3)
            ADD_FAILURE() << "output " << j << " element " << i << ": "
                          << outs[j].as<float>()[i] << " want " << want[j][i];
        EXPECT_EQ(bad, 0) << "output " << j;
      }
    }
}

TEST(FusedTiles, OutputSharingItsInputMemory) {
  // The GELU forward's y written over x: every tile reads x before it
  // stores y, so the in-place result is the out-of-place one.
  const int64_t n = 5000;
  FusedCase c = program(0, n);
  std::vector<OwnedTensor> outs;
  std::vector<Tensor *> outPtrs;
  outs.reserve(4);
  for (int j = 0; j < 4; ++j) {
    outs.emplace_back(program::DTYPE_F32, Shape{n});
    outPtrs.push_back(&outs.back().tensor);
  }
  ASSERT_TRUE(runCpu(c.kernel(), c.inputPtrs(), outPtrs).isOk());
  OwnedTensor x(program::DTYPE_F32, {n});
  std::memcpy(x.as<float>(), c.inputs[0].as<float>(), n * sizeof(float));
  std::vector<OwnedTensor> others;
  others.reserve(3);
  std::vector<Tensor *> inPlace = {&x.tensor};
  for (int j = 1; j < 4; ++j) {
    others.emplace_back(program::DTYPE_F32, Shape{n});
    inPlace.push_back(&others.back().tensor);
  }
  // outputs {2, 10, 12, 13}: output 3 (y) takes x's memory.
  std::swap(inPlace[0], inPlace[3]);
  ASSERT_TRUE(runCpu(c.kernel(), {&x.tensor}, inPlace).isOk());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_TRUE(sameFloat(x.as<float>()[i], outs[3].as<float>()[i])) << i;
}

} // namespace
