//===- CudaAttentionTestUtil.h - The attention tests' harness ---*- C++ -*-===//
//
// The double reference of FusedAttention(+Grad) from the contract
// (docs/runtime-cuda.md "Fused attention"), the operand builders, the
// permuted-operand layouts and checkAttention, which runs a problem on the
// named backends against the reference. Used by CudaAttentionTest.cpp and
// CudaAttentionLayoutTest.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TEST_CUDAATTENTIONTESTUTIL_H
#define STRAIT_RUNTIME_TEST_CUDAATTENTIONTESTUTIL_H

#include "CudaTestUtil.h"
#include "FlashAttention.h"

#include "strait/runtime/KernelArgs.h"

#include <algorithm>
#include <cfloat>
#include <limits>

namespace {

/// An array of `dtype` (f32, bf16 or f16) holding v (rounded to nearest even).
inline Arr typed(DType dtype, Shape s, const std::vector<double> &v) {
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

inline Arr randomOf(DType dtype, Shape s, uint32_t seed) {
  std::vector<float> f = pseudoRandom(numElements(s), seed);
  return typed(dtype, std::move(s), std::vector<double>(f.begin(), f.end()));
}

/// Element k as a double (f16 here, the other types through Arr::at).
inline double elem(const Arr &a, int64_t k) {
  if (a.dtype != program::DTYPE_F16)
    return a.at(k);
  _Float16 x;
  std::memcpy(&x, a.bytes.data() + 2 * k, 2);
  return static_cast<float>(x);
}

inline std::vector<double> values(const Arr &a) {
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
  /// When >= 0: Q, Kt and V (their tensors, of one shape) are slices 0, 1,
  /// 2 along this axis of one packed tensor (q_select, kt_select, v_select
  /// = [packAxis, i]; GPT-2's [B, T, 3, H, D] projection at 2).
  int64_t packAxis = -1;
  /// With packAxis: FusedAttentionGrad writes one packed dQKV (packed_grad).
  bool packedGrad = false;

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
    if (packAxis >= 0)
      perms.insert(perms.end(), {{"q_select", {packAxis, 0}},
                                 {"kt_select", {packAxis, 1}},
                                 {"v_select", {packAxis, 2}}});
    bool pg = packedGrad;
    return [sc, ca, pg, perms](program::Kernel &k) {
      setFloat(k, "scale", sc);
      if (ca)
        setInt(k, "causal", 1);
      if (pg && k.op() == "FusedAttentionGrad")
        setInt(k, "packed_grad", 1);
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
           one("y_perm", yPerm) + (packAxis >= 0 ? " packed" : "") +
           (packedGrad ? " packed_grad" : "");
  }
};

/// Copies between a logical array (dims [b..., rows, cols]) and the tensor
/// that lays it out by `perm` (logical dim i is the tensor's dim perm[i]):
/// toTensor gives the tensor of `a`, else the logical array of tensor `a`.
/// An empty perm is the identity.
inline Arr permuteArr(const Arr &a, const std::vector<int64_t> &perm, bool toTensor) {
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
inline Shape tensorShapeOf(const Shape &logical, const std::vector<int64_t> &perm) {
  Shape t = logical;
  for (size_t i = 0; i < perm.size(); ++i)
    t[perm[i]] = logical[i];
  return t;
}
inline Arr laidOut(const Arr &logical, const std::vector<int64_t> &perm) {
  return permuteArr(logical, perm, true);
}
inline Arr logicalOf(const Arr &tensor, const std::vector<int64_t> &perm) {
  return permuteArr(tensor, perm, false);
}

struct Inputs {
  Arr q, kt, v, bias;
};

/// Random inputs; the bias masks (finfo.min) a varying tail of keys per
/// broadcast row and holds small values elsewhere (never a whole row).
inline Inputs makeInputs(const Problem &p, uint32_t seed) {
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
inline double biasAt(const Problem &p, const std::vector<double> &bias, int64_t g, int64_t i,
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
inline void referenceForward(const Problem &p, const Inputs &in, std::vector<double> &y,
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
inline void referenceGrad(const Problem &p, const Inputs &in, const Arr &dyA, const Arr &yA,
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
inline void expectClose(const std::string &what, const Arr &got, const std::vector<double> &want,
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
inline Tolerance f32Tol() { return {}; }
/// bf16 operands: P and dS are rounded to bf16 (8 bits) before their GEMMs.
inline Tolerance bf16Tol() { return {2e-2, 1e-2}; }
/// f16 operands: 11 bits.
inline Tolerance f16Tol() { return {4e-3, 2e-3}; }
/// The gradients: dS is rounded to Q's dtype before two more GEMMs.
inline Tolerance gradTol(DType t) {
  if (t == program::DTYPE_F32)
    return {1e-3, 1e-4};
  return t == program::DTYPE_F16 ? Tolerance{6e-3, 4e-3} : Tolerance{3e-2, 2e-2};
}

/// The forward's operands as tensors (laid out by the problem's perms).
/// Tensors a, b, c of one shape stacked along a new dimension `axis`.
inline Arr pack3(const Arr &a, const Arr &b, const Arr &c, int64_t axis) {
  Shape s = a.shape;
  int64_t inner = numElements(Shape(s.begin() + axis, s.end()));
  int64_t outer = numElements(s) / std::max<int64_t>(inner, 1);
  size_t es = a.dtype == program::DTYPE_F32 ? 4 : 2, row = size_t(inner) * es;
  s.insert(s.begin() + axis, 3);
  Arr out{a.dtype, s, std::vector<char>(3 * a.bytes.size())};
  const Arr *parts[3] = {&a, &b, &c};
  for (int64_t o = 0; o < outer; ++o)
    for (int i = 0; i < 3; ++i)
      std::memcpy(out.bytes.data() + (o * 3 + i) * row, parts[i]->bytes.data() + o * row, row);
  return out;
}

/// The three slices along `axis` of a tensor pack3 made.
inline std::vector<Arr> unpack3(const Arr &packed, int64_t axis) {
  Shape s = packed.shape;
  s.erase(s.begin() + axis);
  int64_t inner = numElements(Shape(s.begin() + axis, s.end()));
  int64_t outer = numElements(s) / std::max<int64_t>(inner, 1);
  size_t es = packed.dtype == program::DTYPE_F32 ? 4 : 2, row = size_t(inner) * es;
  std::vector<Arr> out(3, Arr{packed.dtype, s, std::vector<char>(packed.bytes.size() / 3)});
  for (int64_t o = 0; o < outer; ++o)
    for (int i = 0; i < 3; ++i)
      std::memcpy(out[i].bytes.data() + o * row, packed.bytes.data() + (o * 3 + i) * row, row);
  return out;
}

inline std::vector<Arr> forwardInputs(const Problem &p, const Inputs &in) {
  std::vector<Arr> ins = {laidOut(in.q, p.qPerm), laidOut(in.kt, p.ktPerm), laidOut(in.v, p.vPerm)};
  if (p.packAxis >= 0) {
    Arr packed = pack3(ins[0], ins[1], ins[2], p.packAxis);
    ins = {packed, packed, packed};
  }
  if (p.hasBias)
    ins.push_back(in.bias);
  return ins;
}

/// Runs the forward and the gradient of `p` on cuda:0 (and cpu) and checks
/// both against the double reference.
inline void checkAttention(const BackendRegistry &registry, const Problem &p, uint32_t seed,
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
    expectClose(std::string(device) + " Y", logicalOf(outs[0], p.yPerm), yRef, tol.rtol, tol.atol);
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
    // The gradients' tensors: their operands' (the slices' when packed).
    std::vector<Arr> outs = {
        Arr::out(tensorShapeOf(p.full({p.tq, p.d}), p.qPerm), p.dtype),
        Arr::out(tensorShapeOf(p.full({p.d, p.tk}), p.ktPerm), p.dtype),
        Arr::out(tensorShapeOf(p.full({p.tk, p.dv}), p.vPerm), p.dtype)};
    std::vector<Arr> packedOut = {Arr::out(ins[1].shape, p.dtype)};
    Status s = runOn(device, registry, "FusedAttentionGrad", ins, p.packedGrad ? packedOut : outs,
                     p.attrs());
    ASSERT_TRUE(s.isOk()) << device << ": " << s.toString();
    if (p.packedGrad)
      outs = unpack3(packedOut[0], p.packAxis);
    Tolerance g = gradTol(p.dtype);
    double rtol = g.rtol, atol = g.atol;
    expectClose(std::string(device) + " dQ", logicalOf(outs[0], p.qPerm), dqRef, rtol, atol);
    expectClose(std::string(device) + " dKt", logicalOf(outs[1], p.ktPerm), dktRef, rtol, atol);
    expectClose(std::string(device) + " dV", logicalOf(outs[2], p.vPerm), dvRef, rtol, atol);
  }
}

} // namespace

namespace {

/// GPT-2's heads as graph-fuse-attention folds them: Q, V and Y are
/// [B, T, H, D] tensors (perm [0, 2, 1, 3]) and K is the untransposed
/// [B, T, H, D] (kt_perm [0, 2, 3, 1]: Kt's D contiguous, the K rows form).
inline void gpt2Layout(Problem &p) {
  p.qPerm = p.vPerm = p.yPerm = {0, 2, 1, 3};
  p.ktPerm = {0, 2, 3, 1};
}
/// Q, V, Y as GPT-2's; Kt a [B, D, H, Tk] tensor (kt_perm [0, 2, 1, 3]):
/// Tk contiguous, the Kt form with the D rows H * Tk apart.
inline void ktFormLayout(Problem &p) {
  p.qPerm = p.vPerm = p.yPerm = {0, 2, 1, 3};
  p.ktPerm = {0, 2, 1, 3};
}
/// Q and K permuted as GPT-2's, V and Y dense.
inline void mixedLayout(Problem &p) {
  p.qPerm = {0, 2, 1, 3};
  p.ktPerm = {0, 2, 3, 1};
  p.vPerm.clear();
  p.yPerm.clear();
}

} // namespace

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
inline void checkFlash(const BackendRegistry &registry, DType dtype, int64_t d, uint32_t seed) {
  FlashSwitch on(true);
  Tolerance tol = dtype == program::DTYPE_BF16 ? bf16Tol() : f16Tol();
  std::vector<std::pair<int64_t, int64_t>> sizes = {{77, 130},  {130, 77}, {1, 64}, {64, 1},
                                                    {128, 128}, {65, 63},  {1, 1}};
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

#endif // STRAIT_RUNTIME_TEST_CUDAATTENTIONTESTUTIL_H
