//===- FusedJit.cpp - FusedElementwise compiled at load through NVRTC -----===//
//
// Source generation (pure), NVRTC compilation, loading through the runtime
// API's library functions, the process-wide cache and the launcher. See
// FusedJit.h.
//
//===----------------------------------------------------------------------===//
#include "FusedJit.h"

#include "CudaKernels.h"

#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

namespace strait {
namespace rt {
namespace cuda {
namespace {

//===----------------------------------------------------------------------===//
// Source generation
//===----------------------------------------------------------------------===//

std::string reg(int32_t r) { return "r" + std::to_string(r); }

/// An exact f32 literal: the bits, with the value as a comment.
std::string floatLiteral(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  char buf[96];
  std::snprintf(buf, sizeof buf, "__int_as_float(0x%08" PRIx32 ") /* %.9g */", bits, v);
  return buf;
}

/// The expression of one instruction over its operand registers (the CPU
/// kernel's arithmetic: evalFusedScalar and runtime/lib/cpu/Fused.cpp).
std::string instrExpr(const FusedProgram &p, const FusedInstr &in) {
  std::string a = in.a >= 0 ? reg(in.a) : "0.0f", b = in.b >= 0 ? reg(in.b) : "0.0f",
              c = in.c >= 0 ? reg(in.c) : "0.0f";
  auto cmp = [&](const char *op) { return "(" + a + " " + op + " " + b + " ? 1.0f : 0.0f)"; };
  switch (in.op) {
  case FusedOp::Const: return floatLiteral(p.constants[in.a]);
  case FusedOp::Identity: return a;
  case FusedOp::Neg: return "-" + a;
  case FusedOp::Abs: return "(" + a + " < 0.0f ? -" + a + " : " + a + ")";
  case FusedOp::Exp: return "expf(" + a + ")";
  case FusedOp::Log: return "logf(" + a + ")";
  case FusedOp::Sqrt: return "sqrtf(" + a + ")";
  case FusedOp::Reciprocal: return "1.0f / " + a;
  case FusedOp::Tanh: return "tanhf(" + a + ")";
  case FusedOp::Sigmoid: return "strait_sigmoid(" + a + ")";
  case FusedOp::Relu: return "(" + a + " > 0.0f ? " + a + " : 0.0f)";
  case FusedOp::Erf: return "erff(" + a + ")";
  case FusedOp::Sin: return "sinf(" + a + ")";
  case FusedOp::Cos: return "cosf(" + a + ")";
  case FusedOp::Floor: return "floorf(" + a + ")";
  case FusedOp::Ceil: return "ceilf(" + a + ")";
  case FusedOp::Not: return "(" + a + " != 0.0f ? 0.0f : 1.0f)";
  case FusedOp::Add: return a + " + " + b;
  case FusedOp::Sub: return a + " - " + b;
  case FusedOp::Mul: return a + " * " + b;
  case FusedOp::Div: return a + " / " + b;
  case FusedOp::Pow:
    if (in.powInt == 2)
      return "(float)((double)" + a + " * (double)" + a + ")";
    if (in.powInt == 3)
      return "(float)((double)" + a + " * (double)" + a + " * (double)" + a + ")";
    return "(float)pow((double)" + a + ", (double)" + b + ")";
  case FusedOp::Max: return "strait_max(" + a + ", " + b + ")";
  case FusedOp::Min: return "strait_min(" + a + ", " + b + ")";
  case FusedOp::Equal: return cmp("==");
  case FusedOp::Less: return cmp("<");
  case FusedOp::LessOrEqual: return cmp("<=");
  case FusedOp::Greater: return cmp(">");
  case FusedOp::GreaterOrEqual: return cmp(">=");
  case FusedOp::And: return "((" + a + " != 0.0f && " + b + " != 0.0f) ? 1.0f : 0.0f)";
  case FusedOp::Or: return "((" + a + " != 0.0f || " + b + " != 0.0f) ? 1.0f : 0.0f)";
  case FusedOp::Where: return "(" + a + " != 0.0f ? " + b + " : " + c + ")";
  case FusedOp::RoundBF16: return "strait_bf16_to_f32(strait_f32_to_bf16(" + a + "))";
  case FusedOp::RoundF16: return "strait_f16_to_f32(strait_f32_to_f16(" + a + "))";
  }
  return "0.0f";
}

/// The offset expression of a Broadcast input at index `e`: the output dims
/// with the input's strides (0 where it broadcasts), size-1 dims dropped and
/// neighbours merged where the input walks them as one (both broadcast, or
/// both contiguous in the input), then sum of ((e / inner) % size) * stride.
std::string broadcastOffset(const Shape &in, const Shape &shape, const char *suffix) {
  size_t rank = shape.size();
  struct Dim {
    int64_t size, stride;
  };
  std::vector<Dim> dims; // outer to inner
  std::vector<int64_t> strides(rank, 0);
  int64_t st = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    size_t d = rank - 1 - k;
    int64_t s = in[in.size() - 1 - k];
    strides[d] = s == 1 ? 0 : st;
    st *= s;
  }
  for (size_t d = 0; d < rank; ++d) {
    if (shape[d] == 1)
      continue;
    Dim cur{shape[d], strides[d]};
    if (!dims.empty()) {
      Dim &prev = dims.back();
      bool bothBroadcast = prev.stride == 0 && cur.stride == 0;
      bool bothDense = cur.stride != 0 && prev.stride == cur.stride * cur.size;
      if (bothBroadcast || bothDense) {
        prev = {prev.size * cur.size, cur.stride};
        continue;
      }
    }
    dims.push_back(cur);
  }
  std::string expr;
  int64_t inner = 1;
  for (size_t k = dims.size(); k-- > 0;) {
    const Dim &d = dims[k];
    if (d.stride != 0) {
      std::string idx = inner == 1 ? "e" : "(e / " + std::to_string(inner) + suffix + ")";
      if (k != 0) // the outermost index needs no modulo: e < n
        idx = "(" + idx + " % " + std::to_string(d.size) + suffix + ")";
      if (d.stride != 1)
        idx += " * " + std::to_string(d.stride) + suffix;
      expr = expr.empty() ? idx : idx + " + " + expr;
    }
    inner *= d.size;
  }
  return expr.empty() ? "0" : expr;
}

constexpr const char *kPrelude = R"(// Generated by Strait (FusedJit.cpp): one FusedElementwise program.
__device__ __forceinline__ float strait_sigmoid(float x) {
  return x >= 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
}
__device__ __forceinline__ float strait_max(float a, float b) {
  return (a != a || b != b) ? __int_as_float(0x7fc00000) : (a > b ? a : b);
}
__device__ __forceinline__ float strait_min(float a, float b) {
  return (a != a || b != b) ? __int_as_float(0x7fc00000) : (a < b ? a : b);
}
// 16-bit floats as lib/codec/CodecLayout.h converts them (round to nearest
// even; NaN stays NaN).
__device__ __forceinline__ float strait_bf16_to_f32(unsigned short h) {
  return __uint_as_float((unsigned)h << 16);
}
__device__ __forceinline__ unsigned short strait_f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float strait_f16_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short strait_f32_to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
)";

/// The C type a pointer to elements of `t` has in the generated source.
const char *storageType(DType t) {
  switch (t) {
  case program::DTYPE_BOOL: return "unsigned char";
  case program::DTYPE_BF16:
  case program::DTYPE_F16: return "unsigned short";
  default: return "float";
  }
}

/// The f32 register value of the stored element `v` of type `t`.
std::string loadExpr(DType t, const std::string &v) {
  switch (t) {
  case program::DTYPE_BOOL: return "(" + v + " != 0 ? 1.0f : 0.0f)";
  case program::DTYPE_BF16: return "strait_bf16_to_f32(" + v + ")";
  case program::DTYPE_F16: return "strait_f16_to_f32(" + v + ")";
  default: return v;
  }
}

/// The stored element of type `t` for the f32 register value `y`.
std::string storeExpr(DType t, const std::string &y) {
  switch (t) {
  case program::DTYPE_BOOL: return y + " != 0.0f";
  case program::DTYPE_BF16: return "strait_f32_to_bf16(" + y + ")";
  case program::DTYPE_F16: return "strait_f32_to_f16(" + y + ")";
  default: return y;
  }
}

/// The four-element vector type of `t` (float4, ushort4, uchar4).
const char *vec4Type(DType t) {
  switch (t) {
  case program::DTYPE_BOOL: return "uchar4";
  case program::DTYPE_BF16:
  case program::DTYPE_F16: return "ushort4";
  default: return "float4";
  }
}

} // namespace

FusedAccess fusedAccess(const Shape &input, const Shape &shape) {
  int64_t numel = numElements(input), n = numElements(shape);
  if (numel == n)
    return FusedAccess::Contiguous;
  if (numel == 1)
    return FusedAccess::Scalar;
  return FusedAccess::Broadcast;
}

namespace {

/// What the emitters share: the spec, each input's access, the index type.
struct Emit {
  const FusedJitSpec &spec;
  std::vector<FusedAccess> access;
  const char *index, *suffix;
  std::ostringstream os;
  size_t ni() const { return spec.inputShapes.size(); }
  size_t no() const { return spec.outputTypes.size(); }
  /// An input element as f32 (bools as 0/1).
  std::string asFloat(size_t i, const std::string &v) const {
    return loadExpr(spec.inputTypes[i], v);
  }
};

/// strait_body(r0.., &o0..): the program, one local per instruction.
void emitBody(Emit &m, const FusedProgram &p) {
  m.os << "__device__ __forceinline__ void strait_body(";
  for (size_t i = 0; i < m.ni(); ++i)
    m.os << (i ? ", " : "") << "float " << reg(static_cast<int32_t>(i));
  for (size_t j = 0; j < m.no(); ++j)
    m.os << (m.ni() + j ? ", " : "") << "float &o" << j;
  m.os << ") {\n";
  for (size_t k = 0; k < p.code.size(); ++k)
    m.os << "  float " << reg(static_cast<int32_t>(p.numInputs + k)) << " = "
         << instrExpr(p, p.code[k]) << ";\n";
  for (size_t j = 0; j < m.no(); ++j)
    m.os << "  o" << j << " = " << reg(p.outputs[j]) << ";\n";
  m.os << "}\n";
}

/// The loop body of one element a thread.
void emitScalarLoop(Emit &m) {
  for (size_t i = 0; i < m.ni(); ++i) {
    std::string at = m.access[i] == FusedAccess::Contiguous ? "e"
                     : m.access[i] == FusedAccess::Scalar
                         ? "0"
                         : broadcastOffset(m.spec.inputShapes[i], m.spec.shape, m.suffix);
    m.os << "    const float x" << i << " = "
         << m.asFloat(i, "in" + std::to_string(i) + "[" + at + "]") << ";\n";
  }
  m.os << "    float";
  for (size_t j = 0; j < m.no(); ++j)
    m.os << (j ? ", " : " ") << "y" << j;
  m.os << ";\n    strait_body(";
  for (size_t i = 0; i < m.ni(); ++i)
    m.os << (i ? ", " : "") << "x" << i;
  for (size_t j = 0; j < m.no(); ++j)
    m.os << (m.ni() + j ? ", " : "") << "y" << j;
  m.os << ");\n";
  for (size_t j = 0; j < m.no(); ++j)
    m.os << "    out" << j << "[e] = " << storeExpr(m.spec.outputTypes[j], "y" + std::to_string(j))
         << ";\n";
}

/// The loop body of four elements a thread (e indexes groups of four).
void emitVec4Loop(Emit &m) {
  const char *lane[4] = {"x", "y", "z", "w"};
  for (size_t i = 0; i < m.ni(); ++i) {
    std::string in = "in" + std::to_string(i);
    const char *vt = vec4Type(m.spec.inputTypes[i]);
    if (m.access[i] == FusedAccess::Scalar)
      m.os << "    const float s" << i << " = " << m.asFloat(i, in + "[0]") << ";\n";
    else
      m.os << "    const " << vt << " v" << i << " = reinterpret_cast<const " << vt << " *>("
           << in << ")[e];\n";
  }
  m.os << "    float";
  for (size_t j = 0; j < m.no(); ++j)
    for (int l = 0; l < 4; ++l)
      m.os << (j + l ? ", " : " ") << "y" << j << "_" << l;
  m.os << ";\n";
  for (int l = 0; l < 4; ++l) {
    m.os << "    strait_body(";
    for (size_t i = 0; i < m.ni(); ++i)
      m.os << (i ? ", " : "")
           << (m.access[i] == FusedAccess::Scalar
                   ? "s" + std::to_string(i)
                   : m.asFloat(i, "v" + std::to_string(i) + "." + lane[l]));
    for (size_t j = 0; j < m.no(); ++j)
      m.os << (m.ni() + j ? ", " : "") << "y" << j << "_" << l;
    m.os << ");\n";
  }
  for (size_t j = 0; j < m.no(); ++j) {
    DType t = m.spec.outputTypes[j];
    std::string y = "y" + std::to_string(j) + "_", vt = vec4Type(t);
    m.os << "    reinterpret_cast<" << vt << " *>(out" << j << ")[e] = make_" << vt << "(";
    for (int l = 0; l < 4; ++l)
      m.os << (l ? ", " : "") << storeExpr(t, y + std::to_string(l));
    m.os << ");\n";
  }
}

} // namespace

std::string fusedJitSource(const FusedProgram &p, const FusedJitSpec &spec) {
  bool wide = numElements(spec.shape) >= (int64_t(1) << 31);
  Emit m{spec, {}, wide ? "unsigned long long" : "unsigned", wide ? "ull" : "u", {}};
  for (const Shape &s : spec.inputShapes)
    m.access.push_back(fusedAccess(s, spec.shape));
  m.os << kPrelude;
  emitBody(m, p);
  m.os << "extern \"C\" __global__ void __launch_bounds__(256) " << kFusedJitKernel << "(";
  for (size_t i = 0; i < m.ni(); ++i)
    m.os << "const " << storageType(spec.inputTypes[i]) << " *in" << i << ", ";
  for (size_t j = 0; j < m.no(); ++j)
    m.os << storageType(spec.outputTypes[j]) << " *out" << j << ", ";
  m.os << m.index << " n) {\n";
  m.os << "  for (" << m.index << " e = (" << m.index
       << ")blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (" << m.index
       << ")gridDim.x * blockDim.x) {\n";
  if (spec.vec4)
    emitVec4Loop(m);
  else
    emitScalarLoop(m);
  m.os << "  }\n}\n";
  return m.os.str();
}

//===----------------------------------------------------------------------===//
// NVRTC
//===----------------------------------------------------------------------===//

std::vector<std::string> fusedJitOptions(int arch) {
  // No --use_fast_math; --fmad=false: no a * b + c contracted into one
  // rounding, so the results follow the CPU kernel's.
  return {"--gpu-architecture=sm_" + std::to_string(arch), "-default-device", "--fmad=false",
          "--std=c++17"};
}

StatusOr<std::string> nvrtcVersionString() {
  int major = 0, minor = 0;
  nvrtcResult r = nvrtcVersion(&major, &minor);
  if (r != NVRTC_SUCCESS)
    return unavailable(std::string("cuda: nvrtcVersion failed: ") + nvrtcGetErrorString(r));
  return std::to_string(major) + "." + std::to_string(minor);
}

Status compileFusedJit(const std::string &source, int arch, std::string &cubin) {
  int count = 0;
  if (nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0)
    return unavailable("cuda: NVRTC lists no supported architecture");
  std::vector<int> archs(count);
  nvrtcGetSupportedArchs(archs.data());
  if (std::find(archs.begin(), archs.end(), arch) == archs.end())
    return unavailable("cuda: NVRTC cannot compile for sm_" + std::to_string(arch));
  nvrtcProgram prog = nullptr;
  nvrtcResult r = nvrtcCreateProgram(&prog, source.c_str(), "strait_fused.cu", 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS)
    return unavailable(std::string("cuda: nvrtcCreateProgram: ") + nvrtcGetErrorString(r));
  std::vector<std::string> opts = fusedJitOptions(arch);
  std::vector<const char *> optPtrs;
  for (const std::string &o : opts)
    optPtrs.push_back(o.c_str());
  r = nvrtcCompileProgram(prog, static_cast<int>(optPtrs.size()), optPtrs.data());
  Status status = Status::ok();
  if (r != NVRTC_SUCCESS) {
    size_t logSize = 0;
    nvrtcGetProgramLogSize(prog, &logSize);
    std::string log(logSize, '\0');
    if (logSize)
      nvrtcGetProgramLog(prog, log.data());
    status = internalError(std::string("cuda: NVRTC compile of a FusedElementwise kernel for sm_") +
                           std::to_string(arch) + " failed: " + nvrtcGetErrorString(r) + "\n" +
                           log.c_str());
  } else {
    size_t size = 0;
    r = nvrtcGetCUBINSize(prog, &size);
    if (r == NVRTC_SUCCESS && size > 0) {
      cubin.assign(size, '\0');
      r = nvrtcGetCUBIN(prog, cubin.data());
    }
    if (r != NVRTC_SUCCESS || size == 0)
      status = internalError(std::string("cuda: nvrtcGetCUBIN: ") + nvrtcGetErrorString(r));
  }
  nvrtcDestroyProgram(&prog);
  return status;
}

//===----------------------------------------------------------------------===//
// Cache and launch
//===----------------------------------------------------------------------===//

namespace {

std::atomic<int> jitMode{-1};
std::atomic<int64_t> nLaunches{0}, nVec4{0}, nCompiles{0}, nFallbacks{0};

/// A compiled kernel, or the reason there is none (then never retried).
struct JitEntry {
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
};

struct JitCache {
  std::mutex mutex;
  std::map<int, int> archOfDevice;
  /// Keyed by "sm_<arch>\n" + source. Never unloaded: the process keeps
  /// every kernel it compiled (one per distinct program and specialization).
  std::map<std::string, JitEntry> kernels;
};
JitCache &cache() {
  static JitCache *c = new JitCache; // leaked: no unload during exit
  return *c;
}

void warnOnce(const std::string &why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr,
                 "strait: warning: FusedElementwise JIT unavailable, using the interpreter "
                 "kernel: %s\n",
                 why.c_str());
  });
}

/// The compiled kernel for `source` on the current device; nullptr when
/// unavailable (warned once) or when `capturing` and not compiled yet.
cudaKernel_t kernelFor(const std::string &source, bool capturing) {
  JitCache &jc = cache();
  std::lock_guard<std::mutex> lock(jc.mutex);
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  auto archIt = jc.archOfDevice.find(device);
  if (archIt == jc.archOfDevice.end()) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      cudaGetLastError();
      warnOnce("cannot query the device's compute capability");
      return nullptr;
    }
    archIt = jc.archOfDevice.emplace(device, 10 * major + minor).first;
  }
  std::string key = "sm_" + std::to_string(archIt->second) + "\n" + source;
  auto it = jc.kernels.find(key);
  if (it != jc.kernels.end())
    return it->second.kernel;
  // NVRTC and cudaLibraryLoadData are no stream operations, but whether a
  // capture in global mode allows loading a library is not documented: the
  // interpreter runs inside the capture instead (the first, uncaptured run
  // of a segment normally compiled the kernel already).
  if (capturing)
    return nullptr;
  JitEntry &entry = jc.kernels[key];
  std::string cubin;
  Status s = compileFusedJit(source, archIt->second, cubin);
  if (!s.isOk()) {
    warnOnce(s.toString());
    return nullptr;
  }
  cudaError_t err = cudaLibraryLoadData(&entry.library, cubin.data(), nullptr, nullptr, 0,
                                        nullptr, nullptr, 0);
  if (err == cudaSuccess)
    err = cudaLibraryGetKernel(&entry.kernel, entry.library, kFusedJitKernel);
  if (err != cudaSuccess) {
    cudaGetLastError();
    entry.kernel = nullptr;
    warnOnce(std::string("cudaLibraryLoadData/cudaLibraryGetKernel: ") + cudaGetErrorString(err));
    return nullptr;
  }
  ++nCompiles;
  return entry.kernel;
}

bool aligned(const void *p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

} // namespace

bool fusedJitEnabled() {
  int mode = jitMode.load();
  if (mode >= 0)
    return mode == 1;
  static const bool fromEnv = [] {
    const char *v = std::getenv("STRAIT_CUDA_FUSED_JIT");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return fromEnv;
}

void setFusedJitMode(int mode) { jitMode.store(mode < 0 ? -1 : mode ? 1 : 0); }

FusedJitCounters fusedJitCounters() {
  FusedJitCounters c;
  c.launches = nLaunches.load();
  c.vec4Launches = nVec4.load();
  c.compiles = nCompiles.load();
  c.fallbacks = nFallbacks.load();
  return c;
}

bool launchFusedJit(CudaContext &c, const FusedArgs &f) {
  if (!fusedJitEnabled())
    return false;
  int64_t n = numElements(f.shape);
  if (n == 0)
    return true;
  FusedJitSpec spec;
  spec.shape = f.shape;
  std::vector<void *> ptrs;
  bool vec4 = n % 4 == 0;
  // Four elements of the type: float4 16 bytes, ushort4 8, uchar4 4.
  auto vecBytes = [](const Tensor *t) { return 4 * dtypeSize(t->dtype); };
  for (const Tensor *t : f.inputs) {
    spec.inputShapes.push_back(t->shape);
    spec.inputTypes.push_back(t->dtype);
    ptrs.push_back(t->data);
    FusedAccess a = fusedAccess(t->shape, f.shape);
    if (a == FusedAccess::Broadcast ||
        (a == FusedAccess::Contiguous && !aligned(t->data, vecBytes(t))))
      vec4 = false;
  }
  for (const Tensor *t : f.outputs) {
    spec.outputTypes.push_back(t->dtype);
    ptrs.push_back(t->data);
    if (!aligned(t->data, vecBytes(t)))
      vec4 = false;
  }
  spec.vec4 = vec4;
  cudaKernel_t kernel = kernelFor(fusedJitSource(f.program, spec), c.capturing());
  if (!kernel) {
    ++nFallbacks;
    return false;
  }
  int64_t threads = vec4 ? n / 4 : n;
  int64_t blocks = std::min<int64_t>((threads + 255) / 256, int64_t(1) << 20);
  unsigned n32 = static_cast<unsigned>(threads);
  unsigned long long n64 = static_cast<unsigned long long>(threads);
  std::vector<void *> args;
  for (void *&p : ptrs)
    args.push_back(&p);
  args.push_back(n >= (int64_t(1) << 31) ? static_cast<void *>(&n64) : static_cast<void *>(&n32));
  cudaError_t err = cudaLaunchKernel(reinterpret_cast<const void *>(kernel),
                                     dim3(static_cast<unsigned>(blocks)), dim3(256), args.data(),
                                     0, c.stream);
  if (err != cudaSuccess) {
    // Not a sticky error (a bad launch configuration or image): clear it
    // and leave this launch to the interpreter.
    cudaGetLastError();
    warnOnce(std::string("cudaLaunchKernel: ") + cudaGetErrorString(err));
    ++nFallbacks;
    return false;
  }
  ++nLaunches;
  if (vec4)
    ++nVec4;
  return true;
}

} // namespace cuda
} // namespace rt
} // namespace strait
