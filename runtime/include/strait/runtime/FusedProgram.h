//===- FusedProgram.h - FusedElementwise programs ----------------*- C++ -*-===//
//
// The program of a FusedElementwise kernel (domain "strait"): attributes
//   ops       strings, one opcode name per instruction
//   args      ints, three register operands per instruction (-1: unused;
//             Const: args[0] indexes `constants`)
//   constants floats
//   outputs   ints, the register of each kernel output
// Registers 0..N-1 are the N inputs broadcast to the iteration shape (the
// outputs' common shape); instruction i writes register N+i. Registers hold
// f32; boolean registers (bool inputs, comparisons, Not, And, Or) hold 0/1.
// Float inputs and outputs are stored as f32, bf16 or f16: a 16-bit input
// loads exactly, a 16-bit output rounds its register to nearest even (as
// Cast does); RoundBF16/RoundF16 round a register in the program.
// Every backend decodes and validates through decodeFusedKernel, so they
// accept and reject the same programs (docs/program-format.md).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_FUSEDPROGRAM_H
#define STRAIT_RUNTIME_FUSEDPROGRAM_H

#include "strait/runtime/Backend.h"

#include <cstdint>
#include <string>
#include <vector>

namespace strait {
namespace rt {

/// Opcodes, in the order of the graph dialect's FusedOpcode enum.
enum class FusedOp : uint8_t {
  Const, Identity, Neg, Abs, Exp, Log, Sqrt, Reciprocal, Tanh, Sigmoid, Relu,
  Erf, Sin, Cos, Floor, Ceil, Not, Add, Sub, Mul, Div, Pow, Max, Min, Equal,
  Less, LessOrEqual, Greater, GreaterOrEqual, And, Or, Where,
  RoundBF16, ///< to the nearest bf16 value (even on ties), still as f32
  RoundF16,  ///< to the nearest f16 value
  Last = RoundF16
};

/// Limits every backend supports (the compiler's verifier has the same).
constexpr size_t kFusedMaxInputs = 16, kFusedMaxOutputs = 8,
                 kFusedMaxInstructions = 64, kFusedMaxConstants = 64,
                 kFusedMaxRank = 8;

struct FusedInstr {
  FusedOp op = FusedOp::Const;
  int32_t a = -1, b = -1, c = -1; ///< registers (Const: a = constant index)
  /// Pow whose exponent is the constant 2 or 3 (else 0): computed by
  /// multiplication in double, as the exact result std::pow rounds.
  int8_t powInt = 0;
};

struct FusedProgram {
  size_t numInputs = 0;
  std::vector<FusedInstr> code;
  std::vector<float> constants;
  std::vector<int32_t> outputs;
  /// Per register: holds a boolean (0/1).
  std::vector<bool> isBool;
  size_t numRegisters() const { return numInputs + code.size(); }
};

/// The opcode named `name`, or false.
bool fusedOpFromName(const std::string &name, FusedOp &op);
const char *fusedOpName(FusedOp op);

/// Decodes the attributes of a FusedElementwise kernel (no tensor data is
/// read); `inputIsBool[i]` says input i is a bool tensor. Errors name the
/// kernel and the offending field.
StatusOr<FusedProgram> decodeFusedProgram(const KernelContext &ctx,
                                          const std::vector<bool> &inputIsBool);

/// A FusedElementwise kernel's checked operands: inputs f32, bf16, f16 or
/// bool, each broadcasting to the iteration shape (output 0's), outputs of
/// that shape: bool for boolean registers, else f32, bf16 or f16.
struct FusedArgs {
  FusedProgram program;
  Shape shape;
  std::vector<const Tensor *> inputs;
  std::vector<Tensor *> outputs;
};
StatusOr<FusedArgs> decodeFusedKernel(const KernelContext &ctx);

/// The instruction on one element (reference semantics; the CPU kernel uses
/// it per tile).
float evalFusedScalar(const FusedInstr &in, float a, float b, float c);

/// Whether `t` is a float storage type of registers: f32, bf16 or f16.
inline bool isFusedFloatStorage(DType t) {
  return t == program::DTYPE_F32 || t == program::DTYPE_BF16 || t == program::DTYPE_F16;
}

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_FUSEDPROGRAM_H
