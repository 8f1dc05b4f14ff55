//===- Fused.cu - FusedElementwise on the GPU ------------------------------===//
//
// One thread per output element (grid-stride): the thread computes its
// input offsets from the output index (the host marks each input contiguous,
// scalar or strided; only strided ones walk the dimensions, in 32-bit index
// math when n < 2^31), loads the inputs into its registers,
// runs the program (FusedLaunch.h, in kernel-parameter memory) and stores
// the outputs. Arithmetic follows the CPU kernel (Fused.cpp): f32 registers,
// booleans as 0/1, Pow through double, 16-bit floats converted by
// CodecLayout.h's functions (the CPU kernel's too).
//
//===----------------------------------------------------------------------===//
#include "DeviceCommon.cuh"
#include "FusedLaunch.h"

#include "../codec/CodecLayout.h"

#include <cstdint>

namespace strait {
namespace rt {
namespace cuda {
namespace {

// Opcodes: the order of rt::FusedOp (strait/runtime/FusedProgram.h), which
// this file cannot include (protobuf headers); CudaFused.cpp checks it.
enum Op : uint8_t {
  Const, Identity, Neg, Abs, Exp, Log, Sqrt, Reciprocal, Tanh, Sigmoid, Relu,
  Erf, Sin, Cos, Floor, Ceil, Not, Add, Sub, Mul, Div, Pow, Max, Min, Equal,
  Less, LessOrEqual, Greater, GreaterOrEqual, And, Or, Where, RoundBF16, RoundF16
};

__device__ float sigmoidOf(float x) {
  return x >= 0 ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
}

__device__ float evalOp(const FusedDeviceProgram &p, int k, float a, float b, float c) {
  switch (p.op[k]) {
  case Const: return p.constants[p.a[k]];
  case Identity: return a;
  case Neg: return -a;
  case Abs: return fabsf(a);
  case Exp: return expf(a);
  case Log: return logf(a);
  case Sqrt: return sqrtf(a);
  case Reciprocal: return 1.0f / a;
  case Tanh: return tanhf(a);
  case Sigmoid: return sigmoidOf(a);
  case Relu: return a > 0 ? a : 0.0f;
  case Erf: return erff(a);
  case Sin: return sinf(a);
  case Cos: return cosf(a);
  case Floor: return floorf(a);
  case Ceil: return ceilf(a);
  case Not: return a != 0 ? 0.0f : 1.0f;
  case Add: return a + b;
  case Sub: return a - b;
  case Mul: return a * b;
  case Div: return a / b;
  case Pow:
    if (p.powInt[k] == 2)
      return static_cast<float>(double(a) * double(a));
    if (p.powInt[k] == 3)
      return static_cast<float>(double(a) * double(a) * double(a));
    return static_cast<float>(pow(double(a), double(b)));
  case Max: return (isnan(a) || isnan(b)) ? __int_as_float(0x7fc00000) : (a > b ? a : b);
  case Min: return (isnan(a) || isnan(b)) ? __int_as_float(0x7fc00000) : (a < b ? a : b);
  case Equal: return a == b;
  case Less: return a < b;
  case LessOrEqual: return a <= b;
  case Greater: return a > b;
  case GreaterOrEqual: return a >= b;
  case And: return (a != 0) && (b != 0);
  case Or: return (a != 0) || (b != 0);
  case Where: return a != 0 ? b : c;
  case RoundBF16: return codec::bfloat16ToFloat(codec::floatToBFloat16(a));
  case RoundF16: return codec::halfToFloat(codec::floatToHalf(a));
  }
  return 0;
}

/// Element `i` of an input stored as `type` (FusedStorage), as f32 (exact).
template <typename I>
__device__ float load(uint8_t type, const void *data, I i) {
  switch (type) {
  case kFusedBool: return float(static_cast<const uint8_t *>(data)[i] != 0);
  case kFusedBF16: return codec::bfloat16ToFloat(static_cast<const uint16_t *>(data)[i]);
  case kFusedF16: return codec::halfToFloat(static_cast<const uint16_t *>(data)[i]);
  default: return static_cast<const float *>(data)[i];
  }
}

/// I: the index type, uint32_t when n < 2^31 (input offsets are below their
/// input's size, at most n), else int64_t. `anyStrided`: some input needs its
/// offset computed from the strides.
template <typename I, bool anyStrided>
__global__ void fusedKernel(const FusedDeviceProgram p) {
  constexpr int kRegs = FusedDeviceProgram::kInputs + FusedDeviceProgram::kInstructions;
  float r[kRegs];
  const I n = static_cast<I>(p.n);
  for (I e = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<I>(gridDim.x) * blockDim.x) {
    // Input offsets from the output index (row-major, innermost last); only
    // strided inputs walk the dimensions.
    I off[FusedDeviceProgram::kInputs];
    for (int i = 0; i < p.numInputs; ++i)
      off[i] = p.inputKind[i] == kFusedContiguous ? e : 0;
    if (anyStrided) {
      I rem = e;
      for (int d = p.rank - 1; d >= 0; --d) {
        I size = static_cast<I>(p.shape[d]);
        I idx = rem % size;
        rem /= size;
        for (int i = 0; i < p.numInputs; ++i)
          if (p.inputKind[i] == kFusedStrided)
            off[i] += idx * static_cast<I>(p.stride[i][d]);
      }
    }
    for (int i = 0; i < p.numInputs; ++i)
      r[i] = load(p.inputType[i], p.inputs[i], off[i]);
    for (int k = 0; k < p.numInstructions; ++k) {
      float a = p.a[k] >= 0 && p.op[k] != Const ? r[p.a[k]] : 0.0f;
      float b = p.b[k] >= 0 ? r[p.b[k]] : 0.0f;
      float c = p.c[k] >= 0 ? r[p.c[k]] : 0.0f;
      r[p.numInputs + k] = evalOp(p, k, a, b, c);
    }
    for (int j = 0; j < p.numOutputs; ++j) {
      float v = r[p.outputReg[j]];
      switch (p.outputType[j]) {
      case kFusedBool: static_cast<uint8_t *>(p.outputs[j])[e] = v != 0; break;
      case kFusedBF16: static_cast<uint16_t *>(p.outputs[j])[e] = codec::floatToBFloat16(v); break;
      case kFusedF16: static_cast<uint16_t *>(p.outputs[j])[e] = codec::floatToHalf(v); break;
      default: static_cast<float *>(p.outputs[j])[e] = v;
      }
    }
  }
}

} // namespace

bool launchFused(const FusedDeviceProgram &p, cudaStream_t s) {
  if (p.n == 0)
    return true;
  bool anyStrided = false;
  for (int i = 0; i < p.numInputs; ++i)
    anyStrided |= p.inputKind[i] == kFusedStrided;
  bool small = p.n < (int64_t(1) << 31);
  unsigned blocks = blocksFor(p.n);
  if (small && anyStrided)
    fusedKernel<uint32_t, true><<<blocks, kBlock, 0, s>>>(p);
  else if (small)
    fusedKernel<uint32_t, false><<<blocks, kBlock, 0, s>>>(p);
  else if (anyStrided)
    fusedKernel<int64_t, true><<<blocks, kBlock, 0, s>>>(p);
  else
    fusedKernel<int64_t, false><<<blocks, kBlock, 0, s>>>(p);
  return true;
}

} // namespace cuda
} // namespace rt
} // namespace strait
