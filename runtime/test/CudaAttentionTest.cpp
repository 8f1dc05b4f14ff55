//===- CudaAttentionTest.cpp - FusedAttention(+Grad) on the GPU -----------===//
//
// Each case runs FusedAttention and FusedAttentionGrad on the CUDA backend
// and compares them with an independent reference computed here in double
// from the contract (docs/runtime-cuda.md "Fused attention") and with the
// CPU backend's kernels (called by name through the kernel table). The
// gradient gets the reference's Y and LSE as inputs on every backend, so it
// is checked apart from the forward. Skips without a GPU, except the
// reference's own check and the flash dispatch rule (pure functions).
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "FlashAttention.h"

#include "strait/runtime/KernelArgs.h"

#include <algorithm>
#include <cfloat>
#include <limits>

namespace {

class CudaAttention : public Cuda {};

/// An array of `dtype` (f32, bf16 or f16) holding v (rounded to nearest even).
Arr typed(DType dtype, Shape s, const std::vector<double> &v) {
  if (dtype == program::DTYPE_F32) {
    std::vector<float> f(v.begin(), v.end());
    return Arr::f(std::move(s), f);
  }
  Arr a{dtype, std::move(s), {}};
  a.bytes.resize(v.size() * 2);
  for (size_t k = 0; k < v.size(); ++k) {
    uint16_t h;
    if (dtype == program::DTYPE_BF16) {
      h = bf16Bits(static_cast<float>(v[k]));
    } else {
      _Float16 x = static_cast<_Float16>(static_cast<float>(v[k]));
      std::memcpy(&h, &x, 2);
    }
    std::memcpy(a.bytes.data() + 2 * k, &h, 2);
  }
  return a;
}

Arr randomOf(DType dtype, Shape s, uint32_t seed) {
  std::vector<float> f = pseudoRandom(numElements(s), seed);
  return typed(dtype, std::move(s), std::vector<double>(f.begin(), f.end()));
}

/// Element k as a double (f16 here, the other types through Arr::at).
double elem(const Arr &a, int64_t k) {
  if (a.dtype != program::DTYPE_F16)
    return a.at(k);
  _Float16 x;
  std::memcpy(&x, a.bytes.data() + 2 * k, 2);
  return static_cast<float>(x);
}

std::vector<double> values(const Arr &a) {
  std::vector<double> v(numElements(a.shape));
  for (size_t k = 0; k < v.size(); ++k)
    v[k] = elem(a, static_cast<int64_t>(k));
  return v;
}

/// One attention problem: Q [b..., Tq, D], Kt [b..., D, Tk], V [b..., Tk, Dv],
/// an optional f32 bias of `biasShape` (masked entries finfo.min).
struct Problem {
  Shape batch;
  int64_t tq = 4, tk = 4, d = 8, dv = 8;
  bool causal = false;
  bool hasBias = false;
  Shape biasShape;
  DType dtype = program::DTYPE_F32;
  float scale = 0.35f;
  /// Permutation attributes (empty: the dense operand): each operand's
  /// tensor is the logical one laid out by its perm (laidOut).
  std::vector<int64_t> qPerm, ktPerm, vPerm, yPerm;

  Shape full(std::initializer_list<int64_t> tail) const {
    Shape s = batch;
    s.insert(s.end(), tail.begin(), tail.end());
    return s;
  }
  int64_t entries() const { return numElements(batch); }
  Attrs attrs() const {
    float sc = scale;
    bool ca = causal;
    std::vector<std::pair<const char *, std::vector<int64_t>>> perms = {
        {"q_perm", qPerm}, {"kt_perm", ktPerm}, {"v_perm", vPerm}, {"y_perm", yPerm}};
    return [sc, ca, perms](program::Kernel &k) {
      setFloat(k, "scale", sc);
      if (ca)
        setInt(k, "causal", 1);
      for (const auto &[name, perm] : perms)
        if (!perm.empty())
          setInts(k, name, perm);
    };
  }
  std::string permString() const {
    auto one = [](const char *name, const std::vector<int64_t> &perm) {
      std::string s;
      for (int64_t x : perm)
        s += (s.empty() ? "" : ",") + std::to_string(x);
      return perm.empty() ? std::string() : std::string(" ") + name + " [" + s + "]";
    };
    return one("q_perm", qPerm) + one("kt_perm", ktPerm) + one("v_perm", vPerm) +
           one("y_perm", yPerm);
  }
};

/// Copies between a logical array (dims [b..., rows, cols]) and the tensor
/// that lays it out by `perm` (logical dim i is the tensor's dim perm[i]):
/// toTensor gives the tensor of `a`, else the logical array of tensor `a`.
/// An empty perm is the identity.
Arr permuteArr(const Arr &a, const std::vector<int64_t> &perm, bool toTensor) {
  if (perm.empty())
    return a;
  size_t r = a.shape.size();
  Shape logical(r), tensor(r);
  for (size_t i = 0; i < r; ++i) {
    if (toTensor) {
      logical[i] = a.shape[i];
      tensor[perm[i]] = a.shape[i];
    } else {
      tensor[i] = a.shape[i];
    }
  }
  if (!toTensor)
    for (size_t i = 0; i < r; ++i)
      logical[i] = tensor[perm[i]];
  std::vector<int64_t> tStride(r, 1);
  for (size_t k = r; k-- > 1;)
    tStride[k - 1] = tStride[k] * tensor[k];
  size_t es = a.dtype == program::DTYPE_F32 ? 4 : 2;
  Arr out{a.dtype, toTensor ? tensor : logical, std::vector<char>(a.bytes.size())};
  int64_t n = numElements(logical);
  std::vector<int64_t> x(r, 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t t = 0;
    for (size_t i = 0; i < r; ++i)
      t += x[i] * tStride[perm[i]];
    if (toTensor)
      std::memcpy(out.bytes.data() + t * es, a.bytes.data() + e * es, es);
    else
      std::memcpy(out.bytes.data() + e * es, a.bytes.data() + t * es, es);
    for (size_t i = r; i-- > 0;) {
      if (++x[i] < logical[i])
        break;
      x[i] = 0;
    }
  }
  return out;
}
/// The shape of the tensor that lays out a `logical` operand by `perm`.
Shape tensorShapeOf(const Shape &logical, const std::vector<int64_t> &perm) {
  Shape t = logical;
  for (size_t i = 0; i < perm.size(); ++i)
    t[perm[i]] = logical[i];
  return t;
}
Arr laidOut(const Arr &logical, const std::vector<int64_t> &perm) {
  return permuteArr(logical, perm, true);
}
Arr logicalOf(const Arr &tensor, const std::vector<int64_t> &perm) {
  return permuteArr(tensor, perm, false);
}

struct Inputs {
  Arr q, kt, v, bias;
};

/// Random inputs; the bias masks (finfo.min) a varying tail of keys per
/// broadcast row and holds small values elsewhere (never a whole row).
Inputs makeInputs(const Problem &p, uint32_t seed) {
  Inputs in;
  in.q = randomOf(p.dtype, p.full({p.tq, p.d}), seed);
  in.kt = randomOf(p.dtype, p.full({p.d, p.tk}), seed + 1);
  in.v = randomOf(p.dtype, p.full({p.tk, p.dv}), seed + 2);
  if (p.hasBias) {
    int64_t n = numElements(p.biasShape);
    int64_t cols = p.biasShape.empty() ? 1 : p.biasShape.back();
    std::vector<float> b = pseudoRandom(n, seed + 3);
    for (int64_t k = 0; k < n; ++k) {
      int64_t row = k / cols, j = k % cols;
      if (cols > 1 && j >= cols - 1 - (row % 3))
        b[k] = -FLT_MAX;
      else
        b[k] *= 0.5f;
    }
    in.bias = Arr::f(p.biasShape, b);
  }
  return in;
}

/// The bias at (batch entry g, i, j), broadcast numpy-style.
double biasAt(const Problem &p, const std::vector<double> &bias, int64_t g, int64_t i,
              int64_t j) {
  Shape full = p.full({p.tq, p.tk});
  std::vector<int64_t> coord(full.size());
  coord[full.size() - 1] = j;
  coord[full.size() - 2] = i;
  for (int64_t d = static_cast<int64_t>(p.batch.size()) - 1; d >= 0; --d) {
    coord[d] = g % p.batch[d];
    g /= p.batch[d];
  }
  int64_t off = 0;
  size_t r = p.biasShape.size();
  for (size_t k = 0; k < r; ++k) {
    int64_t dim = p.biasShape[k];
    off = off * dim + (dim == 1 ? 0 : coord[full.size() - r + k]);
  }
  return bias[off];
}

/// The contract's forward in double (scores rounded to f32 before the bias
/// is added, as the kernels do, so finfo.min masks behave alike).
void referenceForward(const Problem &p, const Inputs &in, std::vector<double> &y,
                      std::vector<double> &lse) {
  std::vector<double> q = values(in.q), kt = values(in.kt), v = values(in.v);
  std::vector<double> bias = p.hasBias ? values(in.bias) : std::vector<double>();
  y.assign(p.entries() * p.tq * p.dv, 0.0);
  lse.assign(p.entries() * p.tq, 0.0);
  std::vector<double> s(p.tk);
  for (int64_t g = 0; g < p.entries(); ++g)
    for (int64_t i = 0; i < p.tq; ++i) {
      double m = -INFINITY;
      for (int64_t j = 0; j < p.tk; ++j) {
        s[j] = -INFINITY;
        if (p.causal && j > i + (p.tk - p.tq))
          continue;
        double acc = 0;
        for (int64_t d = 0; d < p.d; ++d)
          acc += q[(g * p.tq + i) * p.d + d] * kt[(g * p.d + d) * p.tk + j];
        float sf = static_cast<float>(p.scale * acc);
        if (p.hasBias)
          sf += static_cast<float>(biasAt(p, bias, g, i, j));
        s[j] = sf;
        m = std::max(m, s[j]);
      }
      int64_t r = g * p.tq + i;
      if (m == -INFINITY) {
        lse[r] = -INFINITY;
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < p.tk; ++j)
        sum += s[j] == -INFINITY ? 0.0 : std::exp(s[j] - m);
      lse[r] = m + std::log(sum);
      for (int64_t j = 0; j < p.tk; ++j) {
        double pj = s[j] == -INFINITY ? 0.0 : std::exp(s[j] - lse[r]);
        for (int64_t c = 0; c < p.dv; ++c)
          y[r * p.dv + c] += pj * v[(g * p.tk + j) * p.dv + c];
      }
    }
}

/// The contract's gradient in double from the given Y and LSE.
void referenceGrad(const Problem &p, const Inputs &in, const Arr &dyA, const Arr &yA,
                   const Arr &lseA, std::vector<double> &dq, std::vector<double> &dkt,
                   std::vector<double> &dv) {
  std::vector<double> q = values(in.q), kt = values(in.kt), v = values(in.v);
  std::vector<double> dy = values(dyA), y = values(yA), lse = values(lseA);
  std::vector<double> bias = p.hasBias ? values(in.bias) : std::vector<double>();
  dq.assign(q.size(), 0.0);
  dkt.assign(kt.size(), 0.0);
  dv.assign(v.size(), 0.0);
  for (int64_t g = 0; g < p.entries(); ++g)
    for (int64_t i = 0; i < p.tq; ++i) {
      int64_t r = g * p.tq + i;
      double drow = 0;
      for (int64_t c = 0; c < p.dv; ++c)
        drow += dy[r * p.dv + c] * y[r * p.dv + c];
      for (int64_t j = 0; j < p.tk; ++j) {
        if (lse[r] == -INFINITY || (p.causal && j > i + (p.tk - p.tq)))
          continue;
        double acc = 0;
        for (int64_t d = 0; d < p.d; ++d)
          acc += q[r * p.d + d] * kt[(g * p.d + d) * p.tk + j];
        float sf = static_cast<float>(p.scale * acc);
        if (p.hasBias)
          sf += static_cast<float>(biasAt(p, bias, g, i, j));
        double pij = std::exp(double(sf) - lse[r]);
        double dp = 0;
        for (int64_t c = 0; c < p.dv; ++c) {
          dv[(g * p.tk + j) * p.dv + c] += pij * dy[r * p.dv + c];
          dp += dy[r * p.dv + c] * v[(g * p.tk + j) * p.dv + c];
        }
        double ds = pij * (dp - drow);
        for (int64_t d = 0; d < p.d; ++d) {
          dq[r * p.d + d] += p.scale * ds * kt[(g * p.d + d) * p.tk + j];
          dkt[(g * p.d + d) * p.tk + j] += p.scale * q[r * p.d + d] * ds;
        }
      }
    }
}

/// Every element within atol * max(1, max|want|) + rtol * |want|; equal
/// infinities match.
void expectClose(const std::string &what, const Arr &got, const std::vector<double> &want,
                 double rtol, double atol) {
  ASSERT_EQ(numElements(got.shape), static_cast<int64_t>(want.size())) << what;
  double scale = 1.0;
  for (double w : want)
    if (std::isfinite(w))
      scale = std::max(scale, std::abs(w));
  int bad = 0;
  for (size_t k = 0; k < want.size() && bad < 5; ++k) {
    double g = elem(got, static_cast<int64_t>(k)), w = want[k];
    bool ok = g == w || std::abs(g - w) <= atol * scale + rtol * std::abs(w);
    if (!ok) {
      ADD_FAILURE() << what << " element " << k << ": got " << g << ", want " << w;
      ++bad;
    }
  }
}

struct Tolerance {
  double rtol = 1e-4, atol = 2e-5;
};
Tolerance f32Tol() { return {}; }
/// bf16 operands: P and dS are rounded to bf16 (8 bits) before their GEMMs.
Tolerance bf16Tol() { return {2e-2, 1e-2}; }
/// f16 operands: 11 bits.
Tolerance f16Tol() { return {4e-3, 2e-3}; }
/// The gradients: dS is rounded to Q's dtype before two more GEMMs.
Tolerance gradTol(DType t) {
  if (t == program::DTYPE_F32)
    return {1e-3, 1e-4};
  return t == program::DTYPE_F16 ? Tolerance{6e-3, 4e-3} : Tolerance{3e-2, 2e-2};
}

/// The forward's operands as tensors (laid out by the problem's perms).
std::vector<Arr> forwardInputs(const Problem &p, const Inputs &in) {
  std::vector<Arr> ins = {laidOut(in.q, p.qPerm), laidOut(in.kt, p.ktPerm),
                          laidOut(in.v, p.vPerm)};
  if (p.hasBias)
    ins.push_back(in.bias);
  return ins;
}

/// Runs the forward and the gradient of `p` on cuda:0 (and cpu) and checks
/// both against the double reference.
void checkAttention(const BackendRegistry &registry, const Problem &p, uint32_t seed,
                    Tolerance tol, std::vector<const char *> devices = {"cuda:0", "cpu"}) {
  SCOPED_TRACE("Q " + dtypeName(p.dtype) + shapeToString(p.full({p.tq, p.d})) + " Tk " +
               std::to_string(p.tk) + " Dv " + std::to_string(p.dv) + (p.causal ? " causal" : "") +
               (p.hasBias ? " bias " + shapeToString(p.biasShape) : "") + p.permString() +
               (cuda::flashAttentionEnabled() ? "" : " (flash path off)"));
  Inputs in = makeInputs(p, seed);
  std::vector<double> yRef, lseRef;
  referenceForward(p, in, yRef, lseRef);
  // Outputs are declared with their tensor shapes and compared logically.
  for (const char *device : devices) {
    std::vector<Arr> outs = {Arr::out(tensorShapeOf(p.full({p.tq, p.dv}), p.yPerm), p.dtype),
                             Arr::out(p.full({p.tq}), program::DTYPE_F32)};
    Status s = runOn(device, registry, "FusedAttention", forwardInputs(p, in), outs, p.attrs());
    ASSERT_TRUE(s.isOk()) << device << ": " << s.toString();
    expectClose(std::string(device) + " Y", logicalOf(outs[0], p.yPerm), yRef, tol.rtol,
                tol.atol);
    expectClose(std::string(device) + " LSE", outs[1], lseRef, 1e-5, 1e-5);
  }
  // The gradient from the reference's Y and LSE (Y in Q's dtype).
  Arr y = typed(p.dtype, p.full({p.tq, p.dv}), yRef);
  Arr lse = typed(program::DTYPE_F32, p.full({p.tq}), lseRef);
  Arr dy = randomOf(p.dtype, p.full({p.tq, p.dv}), seed + 7);
  std::vector<double> dqRef, dktRef, dvRef;
  referenceGrad(p, in, dy, y, lse, dqRef, dktRef, dvRef);
  std::vector<Arr> ins = forwardInputs(p, in);
  ins.insert(ins.begin(), laidOut(dy, p.yPerm));
  ins.insert(ins.begin() + 4, laidOut(y, p.yPerm));
  ins.insert(ins.begin() + 5, lse);
  for (const char *device : devices) {
    std::vector<Arr> outs = {Arr::out(ins[1].shape, p.dtype), Arr::out(ins[2].shape, p.dtype),
                             Arr::out(ins[3].shape, p.dtype)};
    Status s = runOn(device, registry, "FusedAttentionGrad", ins, outs, p.attrs());
    ASSERT_TRUE(s.isOk()) << device << ": " << s.toString();
    Tolerance g = gradTol(p.dtype);
    double rtol = g.rtol, atol = g.atol;
    expectClose(std::string(device) + " dQ", logicalOf(outs[0], p.qPerm), dqRef, rtol, atol);
    expectClose(std::string(device) + " dKt", logicalOf(outs[1], p.ktPerm), dktRef, rtol, atol);
    expectClose(std::string(device) + " dV", logicalOf(outs[2], p.vPerm), dvRef, rtol, atol);
  }
}

} // namespace

// Runs everywhere: the double reference above against the CPU backend's
// kernels, so that the GPU tests' reference is itself checked on machines
// without a GPU.
TEST(CudaAttentionReference, MatchesCpuKernels) {
  std::vector<std::string> ops = createCpuBackend()->supportedOps();
  if (std::find(ops.begin(), ops.end(), "FusedAttentionGrad") == ops.end())
    GTEST_SKIP() << "the CPU backend has no FusedAttention(+Grad) kernel yet";
  BackendRegistry cpu;
  registerCpuBackend(cpu);
  Problem p;
  p.batch = {2, 3};
  p.tq = p.tk = 16;
  p.hasBias = true;
  p.biasShape = {2, 1, 16, 16};
  checkAttention(cpu, p, 11, f32Tol(), {"cpu"});
  p.hasBias = false;
  p.causal = true;
  p.tq = 12;
  p.tk = 5;
  checkAttention(cpu, p, 31, f32Tol(), {"cpu"});
  Problem odd;
  odd.batch = {};
  odd.tq = 37;
  odd.tk = 53;
  odd.d = 24;
  odd.dv = 40;
  odd.hasBias = true;
  odd.biasShape = {1, 53};
  odd.causal = true;
  checkAttention(cpu, odd, 42, f32Tol(), {"cpu"});
  Problem bf;
  bf.batch = {2, 2};
  bf.tq = bf.tk = 32;
  bf.d = bf.dv = 16;
  bf.dtype = program::DTYPE_BF16;
  bf.causal = true;
  bf.hasBias = true;
  bf.biasShape = {2, 1, 1, 32};
  checkAttention(cpu, bf, 61, bf16Tol(), {"cpu"});
  bf.dtype = program::DTYPE_F16;
  checkAttention(cpu, bf, 62, f16Tol(), {"cpu"});
}

namespace {

/// GPT-2's heads as graph-fuse-attention folds them: Q, V and Y are
/// [B, T, H, D] tensors (perm [0, 2, 1, 3]) and K is the untransposed
/// [B, T, H, D] (kt_perm [0, 2, 3, 1]: Kt's D contiguous, the K rows form).
void gpt2Layout(Problem &p) {
  p.qPerm = p.vPerm = p.yPerm = {0, 2, 1, 3};
  p.ktPerm = {0, 2, 3, 1};
}
/// Q, V, Y as GPT-2's; Kt a [B, D, H, Tk] tensor (kt_perm [0, 2, 1, 3]):
/// Tk contiguous, the Kt form with the D rows H * Tk apart.
void ktFormLayout(Problem &p) {
  p.qPerm = p.vPerm = p.yPerm = {0, 2, 1, 3};
  p.ktPerm = {0, 2, 1, 3};
}
/// Q and K permuted as GPT-2's, V and Y dense.
void mixedLayout(Problem &p) {
  p.qPerm = {0, 2, 1, 3};
  p.ktPerm = {0, 2, 3, 1};
  p.vPerm.clear();
  p.yPerm.clear();
}

} // namespace

// The permuted operands' harness (laidOut, logicalOf, the perm attributes)
// against the CPU kernels, which address permuted operands themselves:
// GPT-2's heads, the Kt form, a mix, f32 with a bias and bf16 causal.
TEST(CudaAttentionReference, PermutedMatchesCpuKernels) {
  std::vector<std::string> ops = createCpuBackend()->supportedOps();
  if (std::find(ops.begin(), ops.end(), "FusedAttentionGrad") == ops.end())
    GTEST_SKIP() << "the CPU backend has no FusedAttention(+Grad) kernel yet";
  BackendRegistry cpu;
  registerCpuBackend(cpu);
  uint32_t seed = 900;
  for (auto layout : {gpt2Layout, ktFormLayout, mixedLayout}) {
    Problem p;
    p.batch = {2, 3};
    p.tq = p.tk = 21;
    p.d = 8;
    p.dv = 8;
    p.hasBias = true;
    p.biasShape = {21, 21};
    layout(p);
    checkAttention(cpu, p, seed++, f32Tol(), {"cpu"});
    p.hasBias = false;
    p.causal = true;
    p.dtype = program::DTYPE_BF16;
    p.tk = 13;
    checkAttention(cpu, p, seed++, bf16Tol(), {"cpu"});
  }
}

// A [B, 1, T, T] padding mask with finfo.min entries, as exported models add.
TEST_F(CudaAttention, F32BiasMask) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2, 3};
  p.tq = p.tk = 16;
  p.hasBias = true;
  p.biasShape = {2, 1, 16, 16};
  checkAttention(registry, p, 11, f32Tol());
}

TEST_F(CudaAttention, F32NoBias) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {4};
  p.tq = 9;
  p.tk = 13;
  checkAttention(registry, p, 21, f32Tol());
}

// causal: key j masked for query i when j > i + (Tk - Tq); Tq > Tk leaves the
// first Tq - Tk rows without a key (LSE = -inf, Y = 0).
TEST_F(CudaAttention, Causal) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2, 2};
  p.causal = true;
  for (auto [tq, tk] : std::vector<std::pair<int64_t, int64_t>>{{20, 20}, {5, 12}, {12, 5}}) {
    p.tq = tq;
    p.tk = tk;
    checkAttention(registry, p, 31, f32Tol());
  }
}

// Sizes that fill no warp or block evenly, a [Tq, Tk] bias broadcast over the
// batch, causal on top.
TEST_F(CudaAttention, OddSizes) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {3};
  p.tq = 37;
  p.tk = 53;
  p.d = 24;
  p.dv = 40;
  p.hasBias = true;
  p.biasShape = {37, 53};
  checkAttention(registry, p, 41, f32Tol());
  p.causal = true;
  p.biasShape = {1, 53}; // one row broadcast over the queries
  checkAttention(registry, p, 42, f32Tol());
}

TEST_F(CudaAttention, BatchRanks) {
  REQUIRE_GPU();
  for (Shape batch : {Shape{}, Shape{3}, Shape{2, 3}}) {
    Problem p;
    p.batch = batch;
    p.tq = 7;
    p.tk = 11;
    p.d = 5;
    p.dv = 6;
    checkAttention(registry, p, 51, f32Tol());
  }
}

// bf16 Q, Kt, V with an f32 bias and causal masking: f32 scores and
// statistics, P and dS rounded to bf16 for the tensor-core GEMMs.
TEST_F(CudaAttention, Bf16) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2, 2};
  p.tq = p.tk = 32;
  p.d = 16;
  p.dv = 16;
  p.dtype = program::DTYPE_BF16;
  p.causal = true;
  p.hasBias = true;
  p.biasShape = {2, 1, 1, 32};
  checkAttention(registry, p, 61, bf16Tol());
}

// f16 Q, Kt, V: the __half instantiations of the row kernels.
TEST_F(CudaAttention, F16) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2, 2};
  p.tq = 24;
  p.tk = 40;
  p.d = 16;
  p.dv = 8;
  p.dtype = program::DTYPE_F16;
  p.causal = true;
  p.hasBias = true;
  p.biasShape = {2, 1, 1, 40};
  checkAttention(registry, p, 62, f16Tol());
}

// A chunk limit of two batch entries: chunks of 2, 2 and 1 entries.
TEST_F(CudaAttention, Chunked) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {5};
  p.tq = 10;
  p.tk = 12;
  p.hasBias = true;
  p.biasShape = {5, 1, 12};
  cuda::setAttentionChunkBytes(2 * 10 * 12 * (4 + 4));
  checkAttention(registry, p, 71, f32Tol());
  p.causal = true;
  cuda::setAttentionChunkBytes(1); // one entry per chunk
  checkAttention(registry, p, 72, f32Tol());
  cuda::setAttentionChunkBytes(0);
}

// --- The flash path (FlashAttention.cu) ------------------------------------

// Which problems take the flash kernels: f16/bf16, no bias, D == Dv in
// {64, 128}, non-empty, and the switch on. No GPU needed.
TEST(CudaFlashAttentionDispatch, AppliesExactly) {
  cuda::FlashQuery base;
  base.dtype = program::DTYPE_BF16;
  base.d = base.dv = 64;
  base.tq = 77;
  base.tk = 130;
  EXPECT_TRUE(cuda::flashAttentionApplies(base));
  auto with = [&](auto change) {
    cuda::FlashQuery q = base;
    change(q);
    return cuda::flashAttentionApplies(q);
  };
  EXPECT_TRUE(with([](auto &q) { q.dtype = program::DTYPE_F16; }));
  EXPECT_TRUE(with([](auto &q) { q.d = q.dv = 128; }));
  EXPECT_TRUE(with([](auto &q) { q.tq = q.tk = 1; }));
  EXPECT_FALSE(with([](auto &q) { q.dtype = program::DTYPE_F32; }));
  EXPECT_FALSE(with([](auto &q) { q.dtype = program::DTYPE_F64; }));
  EXPECT_FALSE(with([](auto &q) { q.hasBias = true; }));
  EXPECT_FALSE(with([](auto &q) { q.enabled = false; }));
  for (int64_t d : {0, 8, 16, 32, 48, 80, 96, 112, 144, 256})
    EXPECT_FALSE(with([d](auto &q) { q.d = q.dv = d; })) << "D " << d;
  EXPECT_FALSE(with([](auto &q) { q.dv = 128; }));
  EXPECT_FALSE(with([](auto &q) { q.d = 128; }));
  EXPECT_FALSE(with([](auto &q) { q.tq = 0; }));
  EXPECT_FALSE(with([](auto &q) { q.tk = 0; }));
}

// The switch: the override wins over STRAIT_CUDA_FLASH_ATTENTION, -1 goes
// back to the environment's value (on unless it is "0").
TEST(CudaFlashAttentionDispatch, Switch) {
  const char *env = std::getenv("STRAIT_CUDA_FLASH_ATTENTION");
  bool envOn = !(env && std::string(env) == "0");
  cuda::setFlashAttentionEnabled(0);
  EXPECT_FALSE(cuda::flashAttentionEnabled());
  cuda::setFlashAttentionEnabled(1);
  EXPECT_TRUE(cuda::flashAttentionEnabled());
  cuda::setFlashAttentionEnabled(-1);
  EXPECT_EQ(cuda::flashAttentionEnabled(), envOn);
}

namespace {

/// Forces the flash path on (or off) for a scope.
struct FlashSwitch {
  explicit FlashSwitch(bool on) { cuda::setFlashAttentionEnabled(on ? 1 : 0); }
  ~FlashSwitch() { cuda::setFlashAttentionEnabled(-1); }
};

/// The flash path's cases for one dtype and head dim: Tq == Tk, Tq < Tk,
/// Tq > Tk (under causal its first Tq - Tk rows see no key: Y = 0, LSE =
/// -inf, no gradient), single rows and keys, sizes off the 64-row tiles,
/// with and without causal. Tolerances: the cuBLAS path's for the dtype
/// (bf16Tol / f16Tol, gradTol): the flash kernels round P and dS to the
/// operands' dtype before their products as that path does, and accumulate
/// in f32.
void checkFlash(const BackendRegistry &registry, DType dtype, int64_t d, uint32_t seed) {
  FlashSwitch on(true);
  Tolerance tol = dtype == program::DTYPE_BF16 ? bf16Tol() : f16Tol();
  std::vector<std::pair<int64_t, int64_t>> sizes = {{77, 130}, {130, 77}, {1, 64}, {64, 1},
                                                    {128, 128}, {65, 63}, {1, 1}};
  for (bool causal : {false, true})
    for (auto [tq, tk] : sizes) {
      Problem p;
      p.batch = {2, 3};
      p.tq = tq;
      p.tk = tk;
      p.d = p.dv = d;
      p.dtype = dtype;
      p.causal = causal;
      p.scale = 1.0f / std::sqrt(float(d));
      checkAttention(registry, p, seed++, tol, {"cuda:0"});
    }
}

} // namespace

TEST_F(CudaAttention, FlashBf16D64) {
  REQUIRE_GPU();
  checkFlash(registry, program::DTYPE_BF16, 64, 300);
}

TEST_F(CudaAttention, FlashBf16D128) {
  REQUIRE_GPU();
  checkFlash(registry, program::DTYPE_BF16, 128, 400);
}

TEST_F(CudaAttention, FlashF16D64) {
  REQUIRE_GPU();
  checkFlash(registry, program::DTYPE_F16, 64, 500);
}

TEST_F(CudaAttention, FlashF16D128) {
  REQUIRE_GPU();
  checkFlash(registry, program::DTYPE_F16, 128, 600);
}

// GPT-2's sequence length: 16 query and key tiles, causal skipping of whole
// blocks, the dQ atomics of 16 key blocks per row; a larger scale so that
// the softmax is peaked. Checked against the double reference only.
TEST_F(CudaAttention, FlashLong) {
  REQUIRE_GPU();
  FlashSwitch on(true);
  for (auto [dtype, d, causal] : std::vector<std::tuple<DType, int64_t, bool>>{
           {program::DTYPE_BF16, 64, true},
           {program::DTYPE_F16, 128, false},
           {program::DTYPE_BF16, 128, true}}) {
    Problem p;
    p.batch = {1, 1};
    p.tq = p.tk = 1024;
    p.d = p.dv = d;
    p.dtype = dtype;
    p.causal = causal;
    p.scale = 2.0f / std::sqrt(float(d));
    checkAttention(registry, p, 700 + uint32_t(d), dtype == program::DTYPE_BF16 ? bf16Tol() : f16Tol(),
                   {"cuda:0"});
  }
}

// The same problems on the flash path and on the cuBLAS path (switch off)
// agree within the dtype's tolerance (both also against the reference).
TEST_F(CudaAttention, FlashMatchesCublasPath) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2};
  p.tq = 200;
  p.tk = 333;
  p.d = p.dv = 64;
  p.dtype = program::DTYPE_BF16;
  p.causal = true;
  p.scale = 0.125f;
  Inputs in = makeInputs(p, 801);
  auto forward = [&](bool flash) {
    FlashSwitch sw(flash);
    std::vector<Arr> outs = {Arr::out(p.full({p.tq, p.dv}), p.dtype),
                             Arr::out(p.full({p.tq}), program::DTYPE_F32)};
    Status s = runOn("cuda:0", registry, "FusedAttention", forwardInputs(p, in), outs, p.attrs());
    EXPECT_TRUE(s.isOk()) << (flash ? "flash: " : "cuBLAS: ") << s.toString();
    return outs;
  };
  std::vector<Arr> flash = forward(true), cublas = forward(false);
  SCOPED_TRACE("flash vs cuBLAS path, Q bf16" + shapeToString(p.full({p.tq, p.d})) + " Tk " +
               std::to_string(p.tk) + " causal");
  expectClose("Y", flash[0], values(cublas[0]), 2e-2, 1e-2);
  expectClose("LSE", flash[1], values(cublas[1]), 1e-5, 1e-5);
  // And both against the reference, forward and gradient.
  {
    FlashSwitch off(false);
    checkAttention(registry, p, 802, bf16Tol(), {"cuda:0"});
  }
  FlashSwitch on(true);
  checkAttention(registry, p, 802, bf16Tol(), {"cuda:0"});
}

// --- Permuted operands (q_perm, kt_perm, v_perm, y_perm) -------------------

namespace {

/// The shared checks' layout (AttnLayout) of a logical [b..., rows, cols]
/// operand laid out by `perm` (empty: dense), from its tensor's row-major
/// strides: logical dim i steps by the stride of tensor dim perm[i].
AttnLayout layoutOf(const Shape &logical, const std::vector<int64_t> &perm) {
  size_t r = logical.size();
  Shape tensor = logical;
  for (size_t i = 0; i < perm.size(); ++i)
    tensor[perm[i]] = logical[i];
  std::vector<int64_t> st(r, 1);
  for (size_t k = r; k-- > 1;)
    st[k - 1] = st[k] * tensor[k];
  AttnLayout l;
  for (size_t i = 0; i < r; ++i) {
    int64_t s = st[perm.empty() ? i : size_t(perm[i])];
    if (i + 2 < r)
      l.batch.push_back(s);
    else if (i + 2 == r)
      l.row = s;
    else
      l.col = s;
  }
  return l;
}

/// The shared checks' result for problem p (no tensors).
AttentionArgs argsOf(const Problem &p) {
  AttentionArgs a;
  a.dtype = p.dtype;
  a.batch = p.batch;
  a.nBatch = p.entries();
  a.tq = p.tq;
  a.tk = p.tk;
  a.d = p.d;
  a.dv = p.dv;
  a.scale = p.scale;
  a.causal = p.causal;
  a.qL = layoutOf(p.full({p.tq, p.d}), p.qPerm);
  a.ktL = layoutOf(p.full({p.d, p.tk}), p.ktPerm);
  a.vL = layoutOf(p.full({p.tk, p.dv}), p.vPerm);
  a.yL = layoutOf(p.full({p.tq, p.dv}), p.yPerm);
  return a;
}

Problem flashProblemFor(Shape batch, int64_t t, int64_t d) {
  Problem p;
  p.batch = std::move(batch);
  p.tq = p.tk = t;
  p.d = p.dv = d;
  p.dtype = program::DTYPE_BF16;
  return p;
}

} // namespace

// GPT-2 small's heads (B 2, T 77, H 3, D 64): two batch dims that do not
// merge, every operand's strides as [B, T, H, D] tensors give them, K in
// the rows form, and each entry's offset b * T*H*D + h * D. No GPU needed.
TEST(CudaFlashAttentionLayout, Gpt2HeadsAddressTheBthdTensors) {
  Problem pr = flashProblemFor({2, 3}, 77, 64);
  gpt2Layout(pr);
  AttentionArgs a = argsOf(pr);
  const int64_t T = 77, H = 3, D = 64, THD = T * H * D;
  ASSERT_EQ(a.ktL.batch, (std::vector<int64_t>{THD, D}));
  ASSERT_EQ(a.ktL.row, 1);     // D
  ASSERT_EQ(a.ktL.col, H * D); // Tk
  cuda::FlashQuery q = cuda::flashQueryOf(a, true);
  EXPECT_EQ(q.batchRank, 2);
  EXPECT_TRUE(cuda::flashAttentionApplies(q));
  cuda::FlashProblem p = cuda::flashProblemOf(a);
  EXPECT_EQ(p.entries, 6);
  EXPECT_EQ(p.tq, T);
  EXPECT_EQ(p.tk, T);
  EXPECT_EQ(p.d, D);
  EXPECT_TRUE(p.bf16);
  ASSERT_EQ(p.batchRank, 2);
  EXPECT_EQ(p.batch[0], 2);
  EXPECT_EQ(p.batch[1], 3);
  EXPECT_TRUE(p.kRows);
  for (const cuda::FlashStrides *s : {&p.q, &p.k, &p.v, &p.y}) {
    EXPECT_EQ(s->batch[0], THD);
    EXPECT_EQ(s->batch[1], D);
    EXPECT_EQ(s->row, H * D);
  }
  for (int64_t e = 0; e < 6; ++e)
    EXPECT_EQ(cuda::flashEntryOffset(p, p.q, e), (e / 3) * THD + (e % 3) * D) << "entry " << e;
  // Y dense, the others permuted: Y's strides are its own.
  pr.yPerm.clear();
  p = cuda::flashProblemOf(argsOf(pr));
  ASSERT_EQ(p.batchRank, 2);
  EXPECT_EQ(p.y.batch[0], 3 * T * D);
  EXPECT_EQ(p.y.batch[1], T * D);
  EXPECT_EQ(p.y.row, D);
  EXPECT_EQ(p.q.row, H * D);
  EXPECT_EQ(cuda::flashEntryOffset(p, p.y, 5), 5 * T * D);
}

// The Kt form permuted ([B, D, H, Tk] tensor): Tk contiguous, rows (D) H *
// Tk apart, entry offsets b * D*H*Tk + h * Tk.
TEST(CudaFlashAttentionLayout, KtFormPermuted) {
  Problem pr = flashProblemFor({2, 3}, 200, 128);
  pr.dtype = program::DTYPE_F16;
  ktFormLayout(pr);
  pr.tk = 130;
  cuda::FlashQuery q = cuda::flashQueryOf(argsOf(pr), true);
  EXPECT_TRUE(cuda::flashAttentionApplies(q));
  cuda::FlashProblem p = cuda::flashProblemOf(argsOf(pr));
  EXPECT_FALSE(p.bf16);
  EXPECT_FALSE(p.kRows);
  EXPECT_EQ(p.k.row, 3 * 130);
  ASSERT_EQ(p.batchRank, 2);
  EXPECT_EQ(p.k.batch[0], 128 * 3 * 130);
  EXPECT_EQ(p.k.batch[1], 130);
  EXPECT_EQ(cuda::flashEntryOffset(p, p.k, 4), 128 * 3 * 130 + 130);
  EXPECT_EQ(p.q.row, 3 * 128);
}

// Dense operands: the batch dims merge into one dim of all entries, the
// strides are the dense ones and Kt is in its own form, as before layouts.
TEST(CudaFlashAttentionLayout, DenseFlattensToOneDim) {
  Problem pr = flashProblemFor({2, 1, 3}, 0, 64);
  pr.tq = 77;
  pr.tk = 130;
  AttentionArgs a = argsOf(pr);
  cuda::FlashQuery q = cuda::flashQueryOf(a, true);
  EXPECT_EQ(q.batchRank, 1);
  EXPECT_TRUE(cuda::flashAttentionApplies(q));
  cuda::FlashProblem p = cuda::flashProblemOf(a);
  ASSERT_EQ(p.batchRank, 1);
  EXPECT_EQ(p.batch[0], 6);
  EXPECT_FALSE(p.kRows);
  EXPECT_EQ(p.q.batch[0], 77 * 64);
  EXPECT_EQ(p.q.row, 64);
  EXPECT_EQ(p.k.batch[0], 64 * 130);
  EXPECT_EQ(p.k.row, 130);
  EXPECT_EQ(p.v.batch[0], 130 * 64);
  EXPECT_EQ(p.v.row, 64);
  EXPECT_EQ(p.y.batch[0], 77 * 64);
  for (int64_t e = 0; e < 6; ++e)
    EXPECT_EQ(cuda::flashEntryOffset(p, p.v, e), e * 130 * 64);
  // No batch dims at all: one entry at offset 0.
  pr.batch = {};
  p = cuda::flashProblemOf(argsOf(pr));
  EXPECT_EQ(p.batchRank, 0);
  EXPECT_EQ(p.entries, 1);
  EXPECT_EQ(cuda::flashEntryOffset(p, p.q, 0), 0);
}

// Layouts the flash kernels cannot take go to the cuBLAS path: D not
// contiguous in Q, V or Y, Kt with neither D nor Tk contiguous, more than
// kFlashMaxBatch batch dims left after merging.
TEST(CudaFlashAttentionLayout, RejectedLayouts) {
  auto applies = [](const Problem &pr) {
    return cuda::flashAttentionApplies(cuda::flashQueryOf(argsOf(pr), true));
  };
  Problem base = flashProblemFor({2, 3}, 40, 64);
  gpt2Layout(base);
  ASSERT_TRUE(applies(base));
  // Q, V or Y as [B, H, D, T] tensors: logical [B, H, T, D] with D T apart.
  for (int k = 0; k < 3; ++k) {
    Problem p = base;
    std::vector<int64_t> *perm[3] = {&p.qPerm, &p.vPerm, &p.yPerm};
    *perm[k] = {0, 1, 3, 2};
    cuda::FlashQuery fq = cuda::flashQueryOf(argsOf(p), true);
    int64_t col[3] = {fq.qCol, fq.vCol, fq.yCol};
    EXPECT_EQ(col[k], 40) << "operand " << k;
    EXPECT_FALSE(cuda::flashAttentionApplies(fq)) << "operand " << k;
  }
  // Kt as a [B, D, Tk, H] tensor: D H * Tk apart, Tk H apart.
  Problem k = base;
  k.ktPerm = {0, 3, 1, 2};
  cuda::FlashQuery kq = cuda::flashQueryOf(argsOf(k), true);
  EXPECT_EQ(kq.ktRow, 40 * 3);
  EXPECT_EQ(kq.ktCol, 3);
  EXPECT_FALSE(applies(k));
  // Five batch dims that never merge (Q's batch dims reversed in memory).
  Problem five = flashProblemFor({2, 2, 2, 2, 2}, 16, 64);
  five.qPerm = {4, 3, 2, 1, 0, 5, 6};
  EXPECT_EQ(cuda::flashQueryOf(argsOf(five), true).batchRank, 5);
  EXPECT_FALSE(applies(five));
  five.qPerm = {0, 1, 2, 4, 3, 5, 6}; // dims 3 and 4 swapped: 0-2 merge, then 3, then 4
  EXPECT_EQ(cuda::flashQueryOf(argsOf(five), true).batchRank, 3);
  EXPECT_TRUE(applies(five));
  // A bias or f32 still decide as without layouts.
  Problem bias = base;
  bias.hasBias = true;
  AttentionArgs ba = argsOf(bias);
  Tensor dummy;
  ba.bias = &dummy;
  EXPECT_FALSE(cuda::flashAttentionApplies(cuda::flashQueryOf(ba, true)));
  EXPECT_FALSE(cuda::flashAttentionApplies(cuda::flashQueryOf(argsOf(base), false)));
}

namespace {

/// Permuted problems with Tq = Tk off the 64-row tiles, causal and not,
/// under GPT-2's layout, the Kt form and the mix; on cuda:0 and the CPU
/// kernels, both against the double reference.
void checkPermuted(const BackendRegistry &registry, DType dtype, int64_t d, bool hasBias,
                   uint32_t seed) {
  Tolerance tol = dtype == program::DTYPE_BF16  ? bf16Tol()
                  : dtype == program::DTYPE_F16 ? f16Tol()
                                                : f32Tol();
  for (auto layout : {gpt2Layout, ktFormLayout, mixedLayout})
    for (bool causal : {false, true})
      for (int64_t t : {77, 200}) {
        Problem p;
        p.batch = {2, 3};
        p.tq = p.tk = t;
        p.d = p.dv = d;
        p.dtype = dtype;
        p.causal = causal;
        p.scale = 1.0f / std::sqrt(float(d));
        if (hasBias) {
          p.hasBias = true;
          p.biasShape = {2, 1, 1, t};
        }
        layout(p);
        checkAttention(registry, p, seed++, tol, {"cuda:0", "cpu"});
      }
}

} // namespace

// The flash path on permuted operands (FlashAttention.cu's strides, both K
// forms, dQ rounded into Q's layout, Drow through Y's).
TEST_F(CudaAttention, PermutedFlashBf16) {
  REQUIRE_GPU();
  FlashSwitch on(true);
  checkPermuted(registry, program::DTYPE_BF16, 64, false, 1000);
  checkPermuted(registry, program::DTYPE_BF16, 128, false, 1100);
}

TEST_F(CudaAttention, PermutedFlashF16) {
  REQUIRE_GPU();
  FlashSwitch on(true);
  checkPermuted(registry, program::DTYPE_F16, 64, false, 1200);
  checkPermuted(registry, program::DTYPE_F16, 128, false, 1300);
}

// The cuBLAS path on permuted operands (gathered into dense scratch, the
// outputs scattered back): f32, a bias (bf16), odd head dims, and the
// flash-eligible bf16 problems with the flash path off.
TEST_F(CudaAttention, PermutedCublasPath) {
  REQUIRE_GPU();
  checkPermuted(registry, program::DTYPE_F32, 64, false, 1400);
  checkPermuted(registry, program::DTYPE_BF16, 64, true, 1500);
  {
    FlashSwitch off(false);
    checkPermuted(registry, program::DTYPE_BF16, 64, false, 1600);
  }
  Problem odd;
  odd.batch = {2, 3};
  odd.tq = 37;
  odd.tk = 53;
  odd.d = 24;
  odd.dv = 40;
  odd.hasBias = true;
  odd.biasShape = {1, 53};
  odd.causal = true;
  gpt2Layout(odd);
  checkAttention(registry, odd, 1700, f32Tol(), {"cuda:0", "cpu"});
}

namespace {

/// The error of FusedAttention on cuda:0 with the given inputs.
Status attentionError(const BackendRegistry &registry, const std::vector<Arr> &ins,
                      const Attrs &attrs, const Shape &y, const Shape &lse) {
  std::vector<Arr> outs = {Arr::out(y), Arr::out(lse)};
  return runOn("cuda:0", registry, "FusedAttention", ins, outs, attrs);
}

void expectError(const Status &s, const std::vector<std::string> &parts) {
  ASSERT_FALSE(s.isOk());
  for (const std::string &part : parts)
    EXPECT_NE(s.toString().find(part), std::string::npos) << s.toString() << " lacks " << part;
}

} // namespace

// Shape and attribute errors are Status values naming the kernel, the operand
// and the shapes.
TEST_F(CudaAttention, Errors) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2};
  Attrs ok = p.attrs();
  Arr q = Arr::rand({2, 4, 8}, 1), kt = Arr::rand({2, 8, 4}, 2), v = Arr::rand({2, 4, 8}, 3);
  expectError(attentionError(registry, {q, Arr::rand({2, 6, 4}, 2), v}, ok, {2, 4, 8}, {2, 4}),
              {"FusedAttention", "Kt f32[2x6x4]", "[2x8x4]"});
  expectError(attentionError(registry, {q, kt, Arr::rand({2, 5, 8}, 3)}, ok, {2, 4, 8}, {2, 4}),
              {"FusedAttention", "V f32[2x5x8]", "[2x4x8]"});
  expectError(attentionError(registry, {q, kt, v, Arr::rand({3, 4, 4}, 4)}, ok, {2, 4, 8},
                             {2, 4}),
              {"FusedAttention", "Bias f32[3x4x4]", "[2x4x4]"});
  expectError(attentionError(registry, {q, kt, v}, {}, {2, 4, 8}, {2, 4}),
              {"FusedAttention", "scale"});
  expectError(attentionError(registry, {q, kt, Arr::randBf16({2, 4, 8}, 3)}, ok, {2, 4, 8},
                             {2, 4}),
              {"FusedAttention", "V bf16[2x4x8]"});
  // The gradient checks Y and LSE against Q and V.
  Arr y = Arr::rand({2, 4, 8}, 5), lse = Arr::rand({2, 5}, 6);
  std::vector<Arr> outs = {Arr::out({2, 4, 8}), Arr::out({2, 8, 4}), Arr::out({2, 4, 8})};
  expectError(runOn("cuda:0", registry, "FusedAttentionGrad", {y, q, kt, v, y, lse}, outs, ok),
              {"FusedAttentionGrad", "LSE f32[2x5]", "[2x4]"});
}

namespace {

/// FusedAttention then FusedAttentionGrad in one run step (one segment).
program::Program attentionStep(const Problem &p) {
  ProgramBuilder b;
  b.get().set_device("cuda:0");
  auto v = [&](const char *n, Shape s, program::ValueRole role) {
    return b.addValue(n, std::string(n) == "lse" ? program::DTYPE_F32 : p.dtype, s, role);
  };
  // Tensor shapes under the problem's perms (the attributes come with
  // p.attrs()).
  Shape qs = tensorShapeOf(p.full({p.tq, p.d}), p.qPerm),
        kts = tensorShapeOf(p.full({p.d, p.tk}), p.ktPerm),
        vs = tensorShapeOf(p.full({p.tk, p.dv}), p.vPerm),
        ys = tensorShapeOf(p.full({p.tq, p.dv}), p.yPerm);
  uint32_t q = v("q", qs, program::ROLE_INPUT), kt = v("kt", kts, program::ROLE_INPUT),
           vv = v("v", vs, program::ROLE_INPUT), dy = v("dy", ys, program::ROLE_INPUT),
           y = v("y", ys, program::ROLE_OUTPUT),
           lse = v("lse", p.full({p.tq}), program::ROLE_OUTPUT),
           dq = v("dq", qs, program::ROLE_OUTPUT), dkt = v("dkt", kts, program::ROLE_OUTPUT),
           dv = v("dv", vs, program::ROLE_OUTPUT);
  program::Kernel &f = b.addKernel("FusedAttention", {q, kt, vv}, {y, lse});
  p.attrs()(f);
  program::Kernel &g = b.addKernel("FusedAttentionGrad", {dy, q, kt, vv, y, lse}, {dq, dkt, dv});
  p.attrs()(g);
  b.addRunStep();
  return b.get();
}

/// Runs the step 3 times with fresh inputs each run; returns every output
/// of every run and the graph counters.
void runAttentionSteps(bool graphs, const Problem &p, std::vector<std::vector<float>> &results,
                       CudaGraphStats &stats) {
  CudaOptions o;
  o.graphs = graphs;
  BackendRegistry reg;
  ASSERT_TRUE(registerCudaBackend(reg, o).isOk());
  auto exec = Executor::create(attentionStep(p), reg);
  ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
  for (int step = 0; step < 3; ++step) {
    uint32_t seed = 100 + 10 * step;
    for (const char *name : {"q", "kt", "v", "dy"}) {
      Tensor t = *(*exec)->getValueByName(name);
      std::vector<float> x = pseudoRandom(t.numel(), seed++);
      if (t.dtype == program::DTYPE_BF16)
        for (int64_t k = 0; k < t.numel(); ++k)
          t.as<uint16_t>()[k] = bf16Bits(x[k]);
      else
        std::copy(x.begin(), x.end(), t.as<float>());
    }
    Status s = (*exec)->run();
    ASSERT_TRUE(s.isOk()) << s.toString();
    for (const char *name : {"y", "lse", "dq", "dkt", "dv"}) {
      Tensor t = *(*exec)->getValueByName(name);
      if (t.dtype == program::DTYPE_BF16) {
        std::vector<float> f(t.numel());
        for (int64_t k = 0; k < t.numel(); ++k)
          f[k] = bf16Value(t.as<uint16_t>()[k]);
        results.push_back(std::move(f));
      } else {
        results.emplace_back(t.as<float>(), t.as<float>() + t.numel());
      }
    }
  }
  stats = cudaGraphStats(*reg.forDevice("cuda:0").takeValue());
}

} // namespace

// The step captured into a CUDA graph on run 2 and replayed on run 3 gives
// the direct launches' results (the scratch block grows on run 1).
TEST(CudaAttentionGraphs, CapturedStepEqualsDirectLaunches) {
  REQUIRE_GPU();
  Problem p;
  p.batch = {2, 3};
  p.tq = p.tk = 24;
  p.causal = true;
  std::vector<std::vector<float>> on, off;
  CudaGraphStats statsOn, statsOff;
  runAttentionSteps(true, p, on, statsOn);
  runAttentionSteps(false, p, off, statsOff);
  ASSERT_EQ(on.size(), off.size());
  for (size_t k = 0; k < on.size(); ++k) {
    ASSERT_EQ(on[k].size(), off[k].size());
    for (size_t e = 0; e < on[k].size(); ++e)
      ASSERT_TRUE(on[k][e] == off[k][e] || std::abs(on[k][e] - off[k][e]) <= 1e-6f)
          << "output " << k % 5 << " of run " << k / 5 << " element " << e << ": " << on[k][e]
          << " vs " << off[k][e];
  }
  EXPECT_EQ(statsOn.captured, 1);
  EXPECT_EQ(statsOn.replays, 2);
  EXPECT_EQ(statsOn.direct, 1);
  EXPECT_EQ(statsOn.disabled, 0);
}

// The flash path (bf16, D 64, causal) captured and replayed: the same
// results as direct launches, up to one bf16 rounding step of dQ (its f32
// atomics add in any order).
TEST(CudaAttentionGraphs, CapturedFlashStepEqualsDirectLaunches) {
  REQUIRE_GPU();
  FlashSwitch on(true);
  Problem p;
  p.batch = {2, 3};
  p.tq = p.tk = 100;
  p.d = p.dv = 64;
  p.dtype = program::DTYPE_BF16;
  p.causal = true;
  std::vector<std::vector<float>> on1, off;
  CudaGraphStats statsOn, statsOff;
  runAttentionSteps(true, p, on1, statsOn);
  runAttentionSteps(false, p, off, statsOff);
  ASSERT_EQ(on1.size(), off.size());
  for (size_t k = 0; k < on1.size(); ++k) {
    ASSERT_EQ(on1[k].size(), off[k].size());
    for (size_t e = 0; e < on1[k].size(); ++e)
      ASSERT_TRUE(on1[k][e] == off[k][e] ||
                  std::abs(on1[k][e] - off[k][e]) <= 1e-2f * std::max(1.0f, std::abs(off[k][e])))
          << "output " << k % 5 << " of run " << k / 5 << " element " << e << ": " << on1[k][e]
          << " vs " << off[k][e];
  }
  EXPECT_EQ(statsOn.captured, 1);
  EXPECT_EQ(statsOn.replays, 2);
  EXPECT_EQ(statsOn.direct, 1);
  EXPECT_EQ(statsOn.disabled, 0);
}

// The flash path on GPT-2's permuted heads (bf16, D 64, causal), captured
// and replayed: the direct launches' results, up to one bf16 rounding of
// dQ; the permuted f32 problem on the cuBLAS path (gathers and scatters in
// the graph) likewise.
TEST(CudaAttentionGraphs, CapturedPermutedStepEqualsDirectLaunches) {
  REQUIRE_GPU();
  FlashSwitch on(true);
  for (DType dtype : {program::DTYPE_BF16, program::DTYPE_F32}) {
    Problem p;
    p.batch = {2, 3};
    p.tq = p.tk = 100;
    p.d = p.dv = 64;
    p.dtype = dtype;
    p.causal = true;
    gpt2Layout(p);
    std::vector<std::vector<float>> on1, off;
    CudaGraphStats statsOn, statsOff;
    runAttentionSteps(true, p, on1, statsOn);
    runAttentionSteps(false, p, off, statsOff);
    ASSERT_EQ(on1.size(), off.size());
    float tol = dtype == program::DTYPE_BF16 ? 1e-2f : 1e-6f;
    for (size_t k = 0; k < on1.size(); ++k) {
      ASSERT_EQ(on1[k].size(), off[k].size());
      for (size_t e = 0; e < on1[k].size(); ++e)
        ASSERT_TRUE(on1[k][e] == off[k][e] ||
                    std::abs(on1[k][e] - off[k][e]) <= tol * std::max(1.0f, std::abs(off[k][e])))
            << dtypeName(dtype) << " output " << k % 5 << " of run " << k / 5 << " element "
            << e << ": " << on1[k][e] << " vs " << off[k][e];
    }
    EXPECT_EQ(statsOn.captured, 1) << dtypeName(dtype);
    EXPECT_EQ(statsOn.replays, 2) << dtypeName(dtype);
    EXPECT_EQ(statsOn.disabled, 0) << dtypeName(dtype);
  }
}
