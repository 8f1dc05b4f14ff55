//===- FusedProgram.cpp - Decoding FusedElementwise programs --------------===//

#include "strait/runtime/FusedProgram.h"

#include "../codec/CodecLayout.h"
#include "../cpu/RowMath.h"

#include <cmath>
#include <limits>

namespace strait {
namespace rt {
namespace {

struct OpInfo {
  const char *name;
  int arity;        ///< register operands (Const: 0)
  bool boolOperand; ///< operands are booleans (Where: operand 0 only)
  bool boolResult;
};

constexpr OpInfo kOps[] = {
    {"Const", 0, false, false},       {"Identity", 1, false, false},
    {"Neg", 1, false, false},         {"Abs", 1, false, false},
    {"Exp", 1, false, false},         {"Log", 1, false, false},
    {"Sqrt", 1, false, false},        {"Reciprocal", 1, false, false},
    {"Tanh", 1, false, false},        {"Sigmoid", 1, false, false},
    {"Relu", 1, false, false},        {"Erf", 1, false, false},
    {"Sin", 1, false, false},         {"Cos", 1, false, false},
    {"Floor", 1, false, false},       {"Ceil", 1, false, false},
    {"Not", 1, true, true},           {"Add", 2, false, false},
    {"Sub", 2, false, false},         {"Mul", 2, false, false},
    {"Div", 2, false, false},         {"Pow", 2, false, false},
    {"Max", 2, false, false},         {"Min", 2, false, false},
    {"Equal", 2, false, true},        {"Less", 2, false, true},
    {"LessOrEqual", 2, false, true},  {"Greater", 2, false, true},
    {"GreaterOrEqual", 2, false, true}, {"And", 2, true, true},
    {"Or", 2, true, true},            {"Where", 3, false, false},
    {"RoundBF16", 1, false, false},   {"RoundF16", 1, false, false}};
constexpr size_t kNumOps = sizeof(kOps) / sizeof(kOps[0]);
static_assert(kNumOps == static_cast<size_t>(FusedOp::Last) + 1,
              "one OpInfo per FusedOp");

std::string at(size_t i) { return "instruction " + std::to_string(i); }

} // namespace

bool fusedOpFromName(const std::string &name, FusedOp &op) {
  for (size_t i = 0; i < kNumOps; ++i)
    if (name == kOps[i].name) {
      op = static_cast<FusedOp>(i);
      return true;
    }
  return false;
}

const char *fusedOpName(FusedOp op) {
  size_t i = static_cast<size_t>(op);
  return i < kNumOps ? kOps[i].name : "?";
}

StatusOr<FusedProgram> decodeFusedProgram(const KernelContext &ctx,
                                          const std::vector<bool> &inputIsBool) {
  const AttrReader &attrs = ctx.getAttrs();
  FusedProgram p;
  p.numInputs = inputIsBool.size();
  if (p.numInputs > kFusedMaxInputs)
    return ctx.error(std::to_string(p.numInputs) + " inputs; at most " +
                     std::to_string(kFusedMaxInputs));
  // Attribute errors name the kernel (AttrReader's name only the field).
  auto named = [&](const Status &s) { return ctx.error(s.getMessage()); };
  StatusOr<std::vector<std::string>> namesOr = attrs.getStrings("ops", {});
  if (!namesOr.isOk())
    return named(namesOr.getStatus());
  const std::vector<std::string> &names = *namesOr;
  if (names.empty() || names.size() > kFusedMaxInstructions)
    return ctx.error("attribute 'ops' needs 1 to " +
                     std::to_string(kFusedMaxInstructions) + " instructions, has " +
                     std::to_string(names.size()));
  StatusOr<std::vector<int64_t>> argsOr = attrs.getInts("args", {});
  StatusOr<std::vector<float>> constsOr = attrs.getFloats("constants", {});
  StatusOr<std::vector<int64_t>> outsOr = attrs.getInts("outputs", {});
  if (!argsOr.isOk())
    return named(argsOr.getStatus());
  if (!constsOr.isOk())
    return named(constsOr.getStatus());
  if (!outsOr.isOk())
    return named(outsOr.getStatus());
  const std::vector<int64_t> &args = *argsOr, &outs = *outsOr;
  p.constants = *constsOr;
  if (args.size() != 3 * static_cast<size_t>(names.size()))
    return ctx.error("attribute 'args' has " + std::to_string(args.size()) +
                     " entries; expected 3 per instruction (" +
                     std::to_string(3 * names.size()) + ")");
  if (p.constants.size() > kFusedMaxConstants)
    return ctx.error("attribute 'constants' has " + std::to_string(p.constants.size()) +
                     " entries; at most " + std::to_string(kFusedMaxConstants));
  p.isBool = inputIsBool;
  for (size_t i = 0; i < names.size(); ++i) {
    FusedInstr in;
    if (!fusedOpFromName(names[i], in.op))
      return ctx.error("attribute 'ops': " + at(i) + " has unknown opcode '" +
                       names[i] + "'");
    const OpInfo &info = kOps[static_cast<size_t>(in.op)];
    int64_t a[3] = {args[3 * i], args[3 * i + 1], args[3 * i + 2]};
    size_t defined = p.numInputs + i;
    for (int j = 0; j < 3; ++j) {
      bool used = in.op == FusedOp::Const ? j == 0 : j < info.arity;
      if (!used) {
        if (a[j] != -1)
          return ctx.error("attribute 'args': " + at(i) + " (" + info.name +
                           ") operand " + std::to_string(j) + " is " +
                           std::to_string(a[j]) + "; unused operands are -1");
        continue;
      }
      if (in.op == FusedOp::Const) {
        if (a[0] < 0 || static_cast<size_t>(a[0]) >= p.constants.size())
          return ctx.error("attribute 'args': " + at(i) + " (Const) reads constant " +
                           std::to_string(a[0]) + " of " +
                           std::to_string(p.constants.size()));
        continue;
      }
      if (a[j] < 0 || static_cast<size_t>(a[j]) >= defined)
        return ctx.error("attribute 'args': " + at(i) + " (" + info.name +
                         ") reads register " + std::to_string(a[j]) +
                         " before it is written");
      bool wantBool = in.op == FusedOp::Where ? j == 0 : info.boolOperand;
      if (in.op != FusedOp::Identity && p.isBool[a[j]] != wantBool)
        return ctx.error("attribute 'args': " + at(i) + " (" + info.name +
                         ") operand " + std::to_string(j) + " reads a " +
                         (p.isBool[a[j]] ? "boolean" : "float") + " register");
    }
    in.a = static_cast<int32_t>(a[0]);
    in.b = static_cast<int32_t>(a[1]);
    in.c = static_cast<int32_t>(a[2]);
    if (in.op == FusedOp::Pow) {
      const FusedInstr *e = in.b >= static_cast<int32_t>(p.numInputs)
                                ? &p.code[in.b - p.numInputs]
                                : nullptr;
      if (e && e->op == FusedOp::Const) {
        float v = p.constants[e->a];
        in.powInt = v == 2.0f ? 2 : v == 3.0f ? 3 : 0;
      }
    }
    p.code.push_back(in);
    p.isBool.push_back(info.boolResult);
  }
  if (outs.empty() || outs.size() > kFusedMaxOutputs)
    return ctx.error("attribute 'outputs' needs 1 to " + std::to_string(kFusedMaxOutputs) +
                     " registers, has " + std::to_string(outs.size()));
  for (int64_t r : outs) {
    if (r < 0 || static_cast<size_t>(r) >= p.numRegisters())
      return ctx.error("attribute 'outputs' names register " + std::to_string(r) + " of " +
                       std::to_string(p.numRegisters()));
    p.outputs.push_back(static_cast<int32_t>(r));
  }
  return p;
}

StatusOr<FusedArgs> decodeFusedKernel(const KernelContext &ctx) {
  FusedArgs f;
  std::vector<bool> isBool;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(const Tensor *t, ctx.requireInput(i));
    if (!isFusedFloatStorage(t->dtype) && t->dtype != program::DTYPE_BOOL)
      return ctx.unsupported("input " + std::to_string(i) + " is " + t->typeString() +
                             "; fused programs read f32, bf16, f16 or bool");
    f.inputs.push_back(t);
    isBool.push_back(t->dtype == program::DTYPE_BOOL);
  }
  STRAIT_ASSIGN_OR_RETURN(f.program, decodeFusedProgram(ctx, isBool));
  if (ctx.numOutputs() != f.program.outputs.size())
    return ctx.error("attribute 'outputs' names " + std::to_string(f.program.outputs.size()) +
                     " registers for " + std::to_string(ctx.numOutputs()) + " outputs");
  if (!ctx.output(0))
    return ctx.error("missing output 0");
  f.shape = ctx.output(0)->shape;
  if (f.shape.size() > kFusedMaxRank)
    return ctx.unsupported("rank " + std::to_string(f.shape.size()) + " > " +
                           std::to_string(kFusedMaxRank));
  for (size_t i = 0; i < f.inputs.size(); ++i) {
    const Shape &s = f.inputs[i]->shape;
    bool ok = s.size() <= f.shape.size();
    for (size_t d = 0; ok && d < s.size(); ++d) {
      int64_t o = f.shape[f.shape.size() - s.size() + d];
      ok = s[d] == 1 || s[d] == o;
    }
    if (!ok)
      return ctx.error("input " + std::to_string(i) + " " + f.inputs[i]->typeString() +
                       " does not broadcast to " + shapeToString(f.shape));
  }
  for (size_t j = 0; j < f.program.outputs.size(); ++j) {
    // A float register is stored as the output's declared float type.
    const Tensor *declared = ctx.output(j);
    DType want = f.program.isBool[f.program.outputs[j]] ? program::DTYPE_BOOL
                 : declared && isFusedFloatStorage(declared->dtype) ? declared->dtype
                                                                    : program::DTYPE_F32;
    STRAIT_ASSIGN_OR_RETURN(Tensor * t, ctx.requireOutput(j, f.shape, want));
    f.outputs.push_back(t);
  }
  return f;
}

namespace {
float nanOr(float a, float b, bool max) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<float>::quiet_NaN();
  return max ? (a > b ? a : b) : (a < b ? a : b);
}
} // namespace

float evalFusedScalar(const FusedInstr &in, float a, float b, float c) {
  switch (in.op) {
  case FusedOp::Const: return a;
  case FusedOp::Identity: return a;
  case FusedOp::Neg: return -a;
  case FusedOp::Abs: return a < 0 ? -a : a;
  case FusedOp::Exp: return std::exp(a);
  case FusedOp::Log: return std::log(a);
  case FusedOp::Sqrt: return std::sqrt(a);
  case FusedOp::Reciprocal: return 1.0f / a;
  // Tanh and Sigmoid as the CPU kernels compute them (RowMath.h): the
  // correctly rounded float but for ties within 1e-12 of a boundary.
  case FusedOp::Tanh: return cpu::tanhFloat(a);
  case FusedOp::Sigmoid: return cpu::sigmoidFloat(a);
  case FusedOp::Relu: return a > 0 ? a : 0.0f;
  case FusedOp::Erf: return std::erf(a);
  case FusedOp::Sin: return std::sin(a);
  case FusedOp::Cos: return std::cos(a);
  case FusedOp::Floor: return std::floor(a);
  case FusedOp::Ceil: return std::ceil(a);
  case FusedOp::Not: return a != 0 ? 0.0f : 1.0f;
  case FusedOp::Add: return a + b;
  case FusedOp::Sub: return a - b;
  case FusedOp::Mul: return a * b;
  case FusedOp::Div: return a / b;
  case FusedOp::Pow:
    if (in.powInt == 2)
      return static_cast<float>(double(a) * double(a));
    if (in.powInt == 3)
      return static_cast<float>(double(a) * double(a) * double(a));
    return static_cast<float>(std::pow(double(a), double(b)));
  case FusedOp::Max: return nanOr(a, b, true);
  case FusedOp::Min: return nanOr(a, b, false);
  case FusedOp::Equal: return a == b;
  case FusedOp::Less: return a < b;
  case FusedOp::LessOrEqual: return a <= b;
  case FusedOp::Greater: return a > b;
  case FusedOp::GreaterOrEqual: return a >= b;
  case FusedOp::And: return (a != 0) && (b != 0);
  case FusedOp::Or: return (a != 0) || (b != 0);
  case FusedOp::Where: return a != 0 ? b : c;
  case FusedOp::RoundBF16: return codec::bfloat16ToFloat(codec::floatToBFloat16(a));
  case FusedOp::RoundF16: return codec::halfToFloat(codec::floatToHalf(a));
  }
  return 0;
}

} // namespace rt
} // namespace strait
