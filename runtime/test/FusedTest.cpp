//===- FusedTest.cpp - FusedElementwise against the unfused kernels -------===//
//
// Conformance: each program runs once as one FusedElementwise kernel and
// once instruction by instruction through the CPU backend's own Add, Mul,
// Tanh, Where, Less, ... kernels on whole tensors (booleans as real bool
// tensors), and the results must agree. Plus the decoder's errors on bad
// programs: InvalidArgument naming the kernel and the field, never a crash.
//
//===----------------------------------------------------------------------===//
#include "FusedTestPrograms.h"
#include "TestUtil.h"

#include "strait/runtime/FusedProgram.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

/// Runs one kernel of the CPU backend on owned tensors.
StatusOr<std::vector<OwnedTensor>> runCpu(const program::Kernel &k,
                                          const std::vector<const Tensor *> &ins,
                                          const std::vector<std::pair<DType, Shape>> &outs) {
  static std::unique_ptr<Backend> cpu = createCpuBackend();
  STRAIT_ASSIGN_OR_RETURN(KernelFn fn, cpu->resolve(k));
  std::vector<OwnedTensor> results;
  std::vector<Tensor *> outPtrs;
  results.reserve(outs.size());
  for (auto &[dtype, shape] : outs)
    results.emplace_back(dtype, shape);
  for (OwnedTensor &t : results)
    outPtrs.push_back(&t.tensor);
  KernelContext ctx(k, ins, outPtrs);
  STRAIT_RETURN_IF_ERROR(fn(ctx));
  return results;
}

/// A Cast kernel to `to`.
program::Kernel castTo(DType to) {
  program::Kernel k;
  k.set_op("Cast");
  k.set_name("cast");
  (*k.mutable_attrs())["to"].set_i(to);
  return k;
}

Shape broadcast(const Shape &a, const Shape &b) {
  size_t r = std::max(a.size(), b.size());
  Shape s(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    s[i] = da == 1 ? db : da;
  }
  return s;
}

/// The program evaluated by the unfused kernels, one tensor per register.
std::vector<OwnedTensor> reference(const FusedCase &c, const Shape &shape) {
  std::vector<OwnedTensor> regs;
  for (const OwnedTensor &in : c.inputs) {
    OwnedTensor copy(in.tensor.dtype, in.tensor.shape);
    std::memcpy(copy.tensor.data, in.tensor.data, in.tensor.byteSize());
    regs.push_back(std::move(copy));
  }
  for (size_t i = 0; i < c.ops.size(); ++i) {
    const std::string &op = c.ops[i];
    const int64_t *a = &c.args[3 * i];
    if (op == "Const") {
      OwnedTensor t(program::DTYPE_F32, {});
      *t.as<float>() = c.constants[a[0]];
      regs.push_back(std::move(t));
      continue;
    }
    if (op == "RoundBF16" || op == "RoundF16") { // Cast to the type and back
      const Tensor &x = regs[a[0]].tensor;
      DType low = op == "RoundBF16" ? program::DTYPE_BF16 : program::DTYPE_F16;
      auto r = runCpu(castTo(low), {&x}, {{low, x.shape}});
      EXPECT_TRUE(r.isOk()) << op << ": " << r.getStatus().toString();
      if (!r.isOk())
        return {};
      auto back = runCpu(castTo(program::DTYPE_F32), {&(*r)[0].tensor},
                         {{program::DTYPE_F32, x.shape}});
      EXPECT_TRUE(back.isOk()) << op << ": " << back.getStatus().toString();
      if (!back.isOk())
        return {};
      regs.push_back(std::move((*back)[0]));
      continue;
    }
    program::Kernel k = op == "Identity" ? castTo(program::DTYPE_F32) : program::Kernel();
    if (op != "Identity")
      k.set_op(op);
    k.set_name("ref" + std::to_string(i));
    std::vector<const Tensor *> ins;
    Shape s;
    std::vector<OwnedTensor> widened; // 16-bit inputs as f32 (Cast, exact)
    widened.reserve(3);
    for (int j = 0; j < 3 && a[j] >= 0; ++j) {
      const Tensor *x = &regs[a[j]].tensor;
      if (op != "Identity" &&
          (x->dtype == program::DTYPE_BF16 || x->dtype == program::DTYPE_F16)) {
        auto w = runCpu(castTo(program::DTYPE_F32), {x}, {{program::DTYPE_F32, x->shape}});
        EXPECT_TRUE(w.isOk()) << w.getStatus().toString();
        if (!w.isOk())
          return {};
        widened.push_back(std::move((*w)[0]));
        x = &widened.back().tensor;
      }
      ins.push_back(x);
      s = broadcast(s, x->shape);
    }
    bool boolResult = op == "Equal" || op == "Less" || op == "LessOrEqual" || op == "Greater" ||
                      op == "GreaterOrEqual" || op == "Not" || op == "And" || op == "Or";
    auto r = runCpu(k, ins, {{boolResult ? program::DTYPE_BOOL : program::DTYPE_F32, s}});
    EXPECT_TRUE(r.isOk()) << op << ": " << r.getStatus().toString();
    if (!r.isOk())
      return {};
    regs.push_back(std::move((*r)[0]));
  }
  // Outputs at the iteration shape (a register may be smaller: broadcast
  // it), stored as their declared type (a Cast: 16-bit floats round).
  std::vector<OwnedTensor> outs, stored;
  for (size_t j = 0; j < c.outputs.size(); ++j) {
    const Tensor *reg = &regs[c.outputs[j]].tensor;
    DType want = c.outputTypes[j];
    if (want != reg->dtype) {
      auto r = runCpu(castTo(want), {reg}, {{want, reg->shape}});
      EXPECT_TRUE(r.isOk()) << r.getStatus().toString();
      if (!r.isOk())
        return {};
      stored.reserve(c.outputs.size());
      stored.push_back(std::move((*r)[0]));
      reg = &stored.back().tensor;
    }
    const Tensor &t = *reg;
    program::Kernel k;
    k.set_op("Expand");
    OwnedTensor dims(program::DTYPE_I64, {static_cast<int64_t>(shape.size())});
    for (size_t d = 0; d < shape.size(); ++d)
      dims.as<int64_t>()[d] = shape[d];
    auto r = runCpu(k, {&t, &dims.tensor}, {{t.dtype, shape}});
    EXPECT_TRUE(r.isOk()) << r.getStatus().toString();
    if (!r.isOk())
      return {};
    outs.push_back(std::move((*r)[0]));
  }
  return outs;
}

float at(const Tensor &t, int64_t i) {
  switch (t.dtype) {
  case program::DTYPE_BOOL: return float(t.as<bool>()[i]);
  case program::DTYPE_BF16: return codec::bfloat16ToFloat(t.as<uint16_t>()[i]);
  case program::DTYPE_F16: return codec::halfToFloat(t.as<uint16_t>()[i]);
  default: return t.as<float>()[i];
  }
}

class FusedConformance : public ::testing::TestWithParam<int> {};

TEST_P(FusedConformance, MatchesUnfusedKernels) {
  FusedCase c = fusedCase(GetParam());
  SCOPED_TRACE(c.name);
  program::Kernel k = c.kernel();
  std::vector<std::pair<DType, Shape>> outTypes;
  for (DType d : c.outputTypes)
    outTypes.push_back({d, c.shape});
  auto fused = runCpu(k, c.inputPtrs(), outTypes);
  ASSERT_TRUE(fused.isOk()) << fused.getStatus().toString();
  std::vector<OwnedTensor> ref = reference(c, c.shape);
  ASSERT_EQ(ref.size(), fused->size());
  for (size_t j = 0; j < ref.size(); ++j) {
    const Tensor &got = (*fused)[j].tensor, &want = ref[j].tensor;
    ASSERT_EQ(got.dtype, want.dtype);
    ASSERT_EQ(got.numel(), want.numel());
    int64_t mismatches = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      float g = at(got, i), w = at(want, i);
      // Same f32 arithmetic as the unfused kernels: equal bits, NaN for NaN.
      bool same = g == w || (std::isnan(g) && std::isnan(w));
      if (!same && mismatches++ < 5)
        ADD_FAILURE() << "output " << j << " element " << i << ": fused " << g
                      << " unfused " << w;
    }
    EXPECT_EQ(mismatches, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Programs, FusedConformance,
                         ::testing::Range(0, numFusedCases()),
                         [](const ::testing::TestParamInfo<int> &info) {
                           return fusedCase(info.param).name;
                         });

/// A GELU program with one field replaced; the decoder must reject it.
struct BadCase {
  const char *name;
  std::function<void(program::Kernel &)> edit;
  const char *message; ///< part of the expected error
};

class FusedBadPrograms : public ::testing::TestWithParam<BadCase> {};

TEST_P(FusedBadPrograms, AreInvalidArgumentNamingTheKernel) {
  FusedCase c = fusedCase(0);
  program::Kernel k = c.kernel();
  GetParam().edit(k);
  std::vector<std::pair<DType, Shape>> outTypes;
  for (DType d : c.outputTypes)
    outTypes.push_back({d, c.shape});
  auto r = runCpu(k, c.inputPtrs(), outTypes);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.getStatus().getCode(), StatusCode::InvalidArgument);
  std::string text = r.getStatus().toString();
  EXPECT_NE(text.find("FusedElementwise 'fused'"), std::string::npos) << text;
  EXPECT_NE(text.find(GetParam().message), std::string::npos) << text;
}

void setStrings(program::Kernel &k, const char *name, std::vector<std::string> v) {
  auto *s = (*k.mutable_attrs())[name].mutable_strings();
  s->clear_v();
  for (auto &x : v)
    s->add_v(x);
}

INSTANTIATE_TEST_SUITE_P(
    Decoder, FusedBadPrograms,
    ::testing::Values(
        BadCase{"UnknownOpcode", [](program::Kernel &k) {
                  (*k.mutable_attrs())["ops"].mutable_strings()->set_v(1, "Frobnicate");
                }, "unknown opcode 'Frobnicate'"},
        BadCase{"MissingOps", [](program::Kernel &k) { k.mutable_attrs()->erase("ops"); },
                "'ops' needs 1 to 64"},
        BadCase{"OpsOfWrongKind", [](program::Kernel &k) { (*k.mutable_attrs())["ops"].set_i(3); },
                "'ops'"},
        BadCase{"ArgsTooShort", [](program::Kernel &k) {
                  (*k.mutable_attrs())["args"].mutable_ints()->mutable_v()->RemoveLast();
                }, "expected 3 per instruction"},
        BadCase{"ReadsLaterRegister", [](program::Kernel &k) {
                  (*k.mutable_attrs())["args"].mutable_ints()->set_v(3, 40);
                }, "before it is written"},
        BadCase{"NegativeRegister", [](program::Kernel &k) {
                  (*k.mutable_attrs())["args"].mutable_ints()->set_v(3, -7);
                }, "reads register -7"},
        BadCase{"UnusedOperandSet", [](program::Kernel &k) {
                  (*k.mutable_attrs())["args"].mutable_ints()->set_v(5, 0);
                }, "unused operands are -1"},
        BadCase{"ConstantOutOfRange", [](program::Kernel &k) {
                  (*k.mutable_attrs())["args"].mutable_ints()->set_v(0, 99);
                }, "reads constant 99"},
        BadCase{"BooleanOperandToArithmetic", [](program::Kernel &k) {
                  setStrings(k, "ops", {"Const", "Less", "Const", "Pow", "Const", "Mul", "Add",
                                        "Const", "Mul", "Tanh", "Const", "Add", "Mul"});
                }, "reads a boolean register"},
        BadCase{"OutputOutOfRange", [](program::Kernel &k) {
                  (*k.mutable_attrs())["outputs"].mutable_ints()->set_v(0, 1000);
                }, "names register 1000"},
        BadCase{"OutputCountMismatch", [](program::Kernel &k) {
                  (*k.mutable_attrs())["outputs"].mutable_ints()->add_v(1);
                }, "names 3 registers for 2 outputs"},
        BadCase{"FloatOutputIntoBoolRegister", [](program::Kernel &k) {
                  setStrings(k, "ops", {"Const", "Mul", "Const", "Pow", "Const", "Mul", "Add",
                                        "Const", "Mul", "Tanh", "Const", "Add", "Less"});
                }, "declared f32"},
        BadCase{"ArgsAsFloats", [](program::Kernel &k) {
                  (*k.mutable_attrs())["args"].mutable_floats()->add_v(1);
                }, "args"},
        BadCase{"TooManyInstructions", [](program::Kernel &k) {
                  std::vector<std::string> ops(65, "Const");
                  setStrings(k, "ops", ops);
                }, "'ops' needs 1 to 64 instructions, has 65"}),
    [](const ::testing::TestParamInfo<BadCase> &info) { return info.param.name; });

TEST(FusedKernel, InputThatDoesNotBroadcastIsAnError) {
  FusedCase c = fusedCase(0);
  program::Kernel k = c.kernel();
  OwnedTensor bad(program::DTYPE_F32, {7});
  auto r = runCpu(k, {&bad.tensor}, {{program::DTYPE_F32, c.shape}, {program::DTYPE_F32, c.shape}});
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.getStatus().toString().find("does not broadcast"), std::string::npos)
      << r.getStatus().toString();
}

} // namespace
