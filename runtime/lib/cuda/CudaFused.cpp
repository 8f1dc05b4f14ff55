//===- CudaFused.cpp - FusedElementwise (host side) -----------------------===//
//
// Decodes and validates the program with the CPU backend's decoder
// (strait/runtime/FusedProgram.h), then runs the kernel compiled for it
// through NVRTC (FusedJit.h), or, when the JIT is off or unavailable, packs
// the program into one kernel parameter and launches Fused.cu's
// one-thread-per-element interpreter.
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"
#include "FusedJit.h"
#include "FusedLaunch.h"

#include "strait/runtime/FusedProgram.h"

namespace strait {
namespace rt {
namespace cuda {
namespace {

static_assert(FusedDeviceProgram::kInputs == kFusedMaxInputs &&
                  FusedDeviceProgram::kOutputs == kFusedMaxOutputs &&
                  FusedDeviceProgram::kInstructions == kFusedMaxInstructions &&
                  FusedDeviceProgram::kConstants == kFusedMaxConstants &&
                  FusedDeviceProgram::kRank == kFusedMaxRank,
              "the device program holds every program the decoder accepts");
// Fused.cu numbers the opcodes itself; its first and last must agree.
static_assert(static_cast<int>(FusedOp::Const) == 0 && static_cast<int>(FusedOp::Last) == 33,
              "Fused.cu's Op enum follows rt::FusedOp");

uint8_t storageOf(DType t) {
  switch (t) {
  case program::DTYPE_BOOL: return kFusedBool;
  case program::DTYPE_BF16: return kFusedBF16;
  case program::DTYPE_F16: return kFusedF16;
  default: return kFusedF32;
  }
}

Status fusedKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(FusedArgs f, decodeFusedKernel(ctx));
  // The compiled kernel (FusedJit.h) when available, else the interpreter.
  if (launchFusedJit(c, f))
    return checkLaunch(ctx);
  const FusedProgram &prog = f.program;
  FusedDeviceProgram p;
  p.numInputs = static_cast<int>(f.inputs.size());
  p.numInstructions = static_cast<int>(prog.code.size());
  p.numOutputs = static_cast<int>(f.outputs.size());
  p.rank = static_cast<int>(f.shape.size());
  p.n = numElements(f.shape);
  for (int d = 0; d < p.rank; ++d)
    p.shape[d] = f.shape[d];
  for (int i = 0; i < p.numInputs; ++i) {
    const Shape &s = f.inputs[i]->shape;
    int64_t st = 1;
    for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
      p.stride[i][p.rank - s.size() + d] = s[d] == 1 ? 0 : st;
      st *= s[d];
    }
    int64_t numel = f.inputs[i]->numel();
    p.inputKind[i] = numel == p.n ? kFusedContiguous : numel == 1 ? kFusedScalar : kFusedStrided;
    p.inputs[i] = f.inputs[i]->data;
    p.inputType[i] = storageOf(f.inputs[i]->dtype);
  }
  for (int j = 0; j < p.numOutputs; ++j) {
    p.outputs[j] = f.outputs[j]->data;
    p.outputType[j] = storageOf(f.outputs[j]->dtype);
    p.outputReg[j] = static_cast<int16_t>(prog.outputs[j]);
  }
  for (int k = 0; k < p.numInstructions; ++k) {
    const FusedInstr &in = prog.code[k];
    p.op[k] = static_cast<uint8_t>(in.op);
    p.powInt[k] = in.powInt;
    p.a[k] = static_cast<int16_t>(in.a);
    p.b[k] = static_cast<int16_t>(in.b);
    p.c[k] = static_cast<int16_t>(in.c);
  }
  for (size_t i = 0; i < prog.constants.size(); ++i)
    p.constants[i] = prog.constants[i];
  if (!launchFused(p, c.stream))
    return ctx.unsupported("cuda: FusedElementwise launch refused");
  return checkLaunch(ctx);
}

} // namespace

void addFusedKernels(CudaKernelTable &table) { table.add("FusedElementwise", fusedKernel); }

} // namespace cuda
} // namespace rt
} // namespace strait
