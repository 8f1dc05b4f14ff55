//===- fused_program_fuzzer.cpp - libFuzzer target: fused programs --------===//
//
// FusedElementwise programs come from untrusted program files. The input is
// a serialized strait.program.Kernel or, when it does not parse, bytes that a
// small generator turns into one (opcode names, register operands, constants,
// outputs, input kinds). The shared decoder (runtime/lib/core/FusedProgram.cpp)
// must accept or reject it with a Status; an accepted program is then run with
// the reference semantics over a 2x3 iteration shape, reading registers and
// constants through raw arrays so that ASan catches any index the decoder
// let through. Built by fuzz/build-fused.sh.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/FusedProgram.h"
#include "strait/runtime/Tensor.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

using namespace strait;
using namespace strait::rt;

namespace {

const char *const kNames[] = {
    "Const", "Identity", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Sigmoid",
    "Relu", "Erf", "Sin", "Cos", "Floor", "Ceil", "Not", "Add", "Sub", "Mul", "Div", "Pow",
    "Max", "Min", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or",
    "Where", "Bogus", ""};

struct Bytes {
  const uint8_t *p;
  size_t n;
  uint8_t next() {
    if (!n)
      return 0;
    --n;
    return *p++;
  }
};

/// A kernel from raw bytes: small programs with mostly plausible operands.
program::Kernel generate(Bytes b) {
  program::Kernel k;
  k.set_op("FusedElementwise");
  k.set_name("fuzz");
  auto &attrs = *k.mutable_attrs();
  int numInst = b.next() % 70;
  for (int i = 0; i < numInst; ++i) {
    attrs["ops"].mutable_strings()->add_v(kNames[b.next() % (sizeof(kNames) / sizeof(*kNames))]);
    for (int j = 0; j < 3; ++j)
      attrs["args"].mutable_ints()->add_v(static_cast<int8_t>(b.next()) % 24);
  }
  if (b.next() & 1) // a wrong kind or count now and then
    attrs["args"].mutable_ints()->add_v(b.next());
  int numConst = b.next() % 6;
  attrs["constants"].mutable_floats();
  for (int i = 0; i < numConst; ++i)
    attrs["constants"].mutable_floats()->add_v(static_cast<float>(static_cast<int8_t>(b.next())));
  int numOut = b.next() % 4;
  for (int i = 0; i < numOut; ++i)
    attrs["outputs"].mutable_ints()->add_v(static_cast<int8_t>(b.next()) % 40);
  return k;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  program::Kernel k;
  Bytes b{data, size};
  uint8_t mode = b.next();
  if (!(mode & 1) || !k.ParseFromArray(b.p, static_cast<int>(b.n)))
    k = generate(b);
  // Inputs: up to 4, f32 or bool, of shapes that broadcast (or not) to 2x3.
  const Shape shapes[] = {{2, 3}, {3}, {1}, {2, 1}, {4}};
  std::vector<OwnedTensor> ins;
  int numIn = (mode >> 1) % 5;
  for (int i = 0; i < numIn; ++i) {
    uint8_t s = b.next();
    ins.emplace_back(s & 0x80 ? program::DTYPE_BOOL : program::DTYPE_F32, shapes[s % 5]);
  }
  std::vector<OwnedTensor> outs;
  int numOut = (mode >> 4) % 4;
  for (int j = 0; j < numOut; ++j)
    outs.emplace_back(b.next() & 1 ? program::DTYPE_BOOL : program::DTYPE_F32, Shape{2, 3});
  std::vector<const Tensor *> inPtrs;
  std::vector<Tensor *> outPtrs;
  for (OwnedTensor &t : ins)
    inPtrs.push_back(&t.tensor);
  for (OwnedTensor &t : outs)
    outPtrs.push_back(&t.tensor);
  KernelContext ctx(k, inPtrs, outPtrs);
  StatusOr<FusedArgs> f = decodeFusedKernel(ctx);
  if (!f.isOk())
    return 0;
  const FusedProgram &p = f->program;
  // Raw arrays: an out-of-range register or constant is an ASan report.
  std::unique_ptr<float[]> regs(new float[p.numRegisters()]);
  std::unique_ptr<float[]> consts(new float[p.constants.size() + 1]);
  for (size_t i = 0; i < p.constants.size(); ++i)
    consts[i] = p.constants[i];
  for (int64_t e = 0; e < numElements(f->shape); ++e) {
    for (size_t i = 0; i < p.numInputs; ++i)
      regs[i] = static_cast<float>(e + i);
    for (size_t k2 = 0; k2 < p.code.size(); ++k2) {
      const FusedInstr &in = p.code[k2];
      float a = in.op == FusedOp::Const ? consts[in.a] : in.a >= 0 ? regs[in.a] : 0;
      float b2 = in.b >= 0 ? regs[in.b] : 0, c = in.c >= 0 ? regs[in.c] : 0;
      regs[p.numInputs + k2] = evalFusedScalar(in, a, b2, c);
    }
    for (int32_t r : p.outputs)
      (void)regs[r];
  }
  return 0;
}
