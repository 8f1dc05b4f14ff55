//===- ImportAttention.cpp - Attention and RotaryEmbedding (opset 23+) ----===//
//
// What PyTorch's dynamo exporter emits for LLaMA/GPT-class models at opset
// 23: the standard `Attention` and `RotaryEmbedding` ops.
//
// Attention becomes one graph.FusedAttention on [B, H, T, D] heads: 3-D
// inputs are reshaped to heads and transposed (graph-fold-transposes folds
// those Transposes into the op's permutations), past key/value are
// concatenated in front of K/V (the present outputs), grouped-query heads
// are repeated with a Reshape + Expand, a boolean mask becomes an additive
// 0/-inf bias, a mask shorter than the keys is padded with -inf, and the
// causal flag maps onto the op's bottom-right causal mask (an explicit
// constant bias where ONNX's top-left alignment differs). ONNX scales Q and
// K by sqrt(scale) each; FusedAttention scales the product once (equal up to
// rounding). With `softcap` or the fourth output (qk_matmul_output) the node
// decomposes into MatMul, Mul, Tanh, Add, Softmax and MatMul instead.
//
// RotaryEmbedding becomes graph.FusedRotaryEmbedding (rotate-half form) on
// the rotated part: cos/sin caches (gathered at position_ids) are repeated
// to the full rotary width, the interleaved form permutes (x0, x1, x2, ...)
// to (x0, x2, ..., x1, x3, ...) and back, and a partial rotation
// (rotary_embedding_dim) concatenates the untouched tail.
//
//===----------------------------------------------------------------------===//

#include "NodeImporter.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

namespace {

/// The single result of creating OpTy.
template <typename OpTy>
FailureOr<Value> one(NodeImporter &n, ValueRange operands,
                     ArrayRef<NamedAttribute> attrs = {}) {
  FailureOr<Values> r = n.create<OpTy>(operands, attrs);
  if (failed(r))
    return failure();
  return (*r)[0];
}

FailureOr<Value> reshape(NodeImporter &n, Value v, ArrayRef<int64_t> shape) {
  return one<graph::ReshapeOp>(n, v, {n.named("shape", n.i64s(shape))});
}

FailureOr<Value> transpose(NodeImporter &n, Value v, ArrayRef<int64_t> perm) {
  return one<graph::TransposeOp>(n, v, {n.named("perm", n.i64s(perm))});
}

FailureOr<Value> concat(NodeImporter &n, ValueRange vs, int64_t axis) {
  return one<graph::ConcatOp>(n, vs, {n.named("axis", n.i64(axis))});
}

FailureOr<Value> sliceLast(NodeImporter &n, Value v, int64_t begin, int64_t end) {
  int64_t axis = cast<RankedTensorType>(v.getType()).getRank() - 1;
  return one<graph::SliceOp>(n, v,
                             {n.named("starts", n.i64s({begin})), n.named("ends", n.i64s({end})),
                              n.named("axes", n.i64s({axis})), n.named("steps", n.i64s({1}))});
}

/// A constant of `shape` and element type `elt` filled with `values`
/// (one value: a splat).
Value floatConstant(NodeImporter &n, Type elt, ArrayRef<int64_t> shape, ArrayRef<double> values) {
  auto type = RankedTensorType::get(shape, elt);
  if (values.size() == 1)
    return n.constant(DenseElementsAttr::get(type, n.b().getFloatAttr(elt, values[0])));
  SmallVector<Attribute> attrs;
  for (double v : values)
    attrs.push_back(n.b().getFloatAttr(elt, v));
  return n.constant(DenseElementsAttr::get(type, attrs));
}

RankedTensorType rankedType(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Input `i` (named `what`) as a statically shaped tensor of rank `rank`
/// (any rank when 0).
FailureOr<Value> staticInput(NodeImporter &n, size_t i, StringRef what, int64_t rank = 0) {
  FailureOr<Value> v = n.requiredInput(i);
  if (failed(v))
    return failure();
  auto t = dyn_cast<RankedTensorType>(v->getType());
  if (!t || !t.hasStaticShape() || (rank && t.getRank() != rank))
    return n.error() << "input '" << what << "' must be a statically shaped"
                     << (rank ? " " + std::to_string(rank) + "-D" : std::string())
                     << " tensor, got " << v->getType();
  return v;
}

/// [B, S, H * D] -> [B, H, S, D].
FailureOr<Value> splitHeads(NodeImporter &n, Value v, int64_t heads, StringRef what) {
  RankedTensorType t = rankedType(v);
  if (heads <= 0 || t.getDimSize(2) % heads != 0)
    return n.error() << "input '" << what << "' hidden size " << t.getDimSize(2)
                     << " is not a multiple of the head count " << heads;
  FailureOr<Value> r =
      reshape(n, v, {t.getDimSize(0), t.getDimSize(1), heads, t.getDimSize(2) / heads});
  return failed(r) ? FailureOr<Value>(failure()) : transpose(n, *r, {0, 2, 1, 3});
}

/// [B, Hkv, T, D] -> [B, Hkv * rep, T, D], each head repeated `rep` times in
/// place (h0, h0, h1, h1, ...) as ONNX's grouped-query attention does.
FailureOr<Value> repeatHeads(NodeImporter &n, Value v, int64_t rep) {
  if (rep == 1)
    return v;
  ArrayRef<int64_t> s = rankedType(v).getShape();
  FailureOr<Value> r = reshape(n, v, {s[0], s[1], 1, s[2], s[3]});
  if (failed(r))
    return failure();
  FailureOr<Value> e =
      one<graph::ExpandOp>(n, *r, {n.named("shape", n.i64s({s[0], s[1], rep, s[2], s[3]}))});
  return failed(e) ? FailureOr<Value>(failure()) : reshape(n, *e, {s[0], s[1] * rep, s[2], s[3]});
}

/// The additive [Tq, Tk] bias that lets query i see key j iff j <= i + offset.
Value causalBias(NodeImporter &n, Type elt, int64_t tq, int64_t tk, int64_t offset) {
  SmallVector<double> v;
  v.reserve(tq * tk);
  for (int64_t i = 0; i < tq; ++i)
    for (int64_t j = 0; j < tk; ++j)
      v.push_back(j <= i + offset ? 0.0 : -std::numeric_limits<double>::infinity());
  return floatConstant(n, elt, {tq, tk}, v);
}

/// attn_mask as an additive bias over `tk` keys (bool: true attends).
FailureOr<Value> additiveMask(NodeImporter &n, Value mask, Type elt, int64_t tk) {
  RankedTensorType mt = rankedType(mask);
  double ninf = -std::numeric_limits<double>::infinity();
  bool isBool = mt.getElementType().isInteger(1);
  if (!isBool && !isa<FloatType>(mt.getElementType()))
    return n.error() << "input 'attn_mask' must be bool or float, got " << mt;
  if (isBool) {
    FailureOr<Value> w = one<graph::WhereOp>(
        n, {mask, floatConstant(n, elt, {}, {0.0}), floatConstant(n, elt, {}, {ninf})});
    if (failed(w))
      return failure();
    mask = *w;
    mt = rankedType(mask);
  }
  int64_t last = mt.getShape().back();
  if (last > tk)
    return n.error() << "input 'attn_mask' has " << last << " keys, more than the " << tk
                     << " of K (with past_key)";
  if (last < tk) {
    SmallVector<int64_t> pads(2 * mt.getRank(), 0);
    pads[2 * mt.getRank() - 1] = tk - last;
    return one<graph::PadOp>(n, mask, {n.named("pads", n.i64s(pads)),
                                       n.named("value", n.b().getF64FloatAttr(ninf))});
  }
  return mask;
}

LogicalResult importAttention(NodeImporter &n) {
  if (failed(n.checkAttributes({"is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode",
                                "scale", "softcap", "softmax_precision"})))
    return failure();
  FailureOr<int64_t> causal = n.getInt("is_causal", 0), mode = n.getInt("qk_matmul_output_mode", 0);
  FailureOr<std::optional<int64_t>> qHeadsAttr = n.getOptionalInt("q_num_heads"),
                                    kvHeadsAttr = n.getOptionalInt("kv_num_heads");
  FailureOr<std::optional<float>> scaleAttr = n.getOptionalFloat("scale");
  FailureOr<float> softcap = n.getFloat("softcap", 0.0f);
  FailureOr<int64_t> precision = n.getInt("softmax_precision", 1);
  FailureOr<Value> q = staticInput(n, 0, "Q"), k = staticInput(n, 1, "K"), v = staticInput(n, 2, "V");
  if (failed(causal) || failed(mode) || failed(qHeadsAttr) || failed(kvHeadsAttr) ||
      failed(scaleAttr) || failed(softcap) || failed(precision) || failed(q) || failed(k) ||
      failed(v))
    return failure();
  if (*causal != 0 && *causal != 1)
    return n.error() << "attribute 'is_causal' must be 0 or 1, got " << *causal;
  if (*mode < 0 || *mode > 3)
    return n.error() << "attribute 'qk_matmul_output_mode' must be 0 to 3, got " << *mode;
  // The kernels accumulate in f32 whatever the element type: f32, f16 and
  // bf16 (1, 10, 16) are all at least that precise for the softmax.
  if (*precision != 1 && *precision != 10 && *precision != 16)
    return n.error() << "attribute 'softmax_precision' " << *precision
                     << " is not supported (float, float16 or bfloat16)";
  if (n.input(6))
    return n.error() << "input 'nonpad_kv_seqlen' is not supported";
  int64_t rank = rankedType(*q).getRank();
  Type elt = rankedType(*q).getElementType();
  if ((rank != 3 && rank != 4) || rankedType(*k).getRank() != rank ||
      rankedType(*v).getRank() != rank)
    return n.error() << "Q, K and V must all be 3-D or all 4-D, got " << q->getType() << ", "
                     << k->getType() << ", " << v->getType();
  if (rankedType(*k).getElementType() != elt || rankedType(*v).getElementType() != elt)
    return n.error() << "Q, K and V must have one element type";
  Value qh = *q, kh = *k, vh = *v;
  if (rank == 3) {
    if (!*qHeadsAttr || !*kvHeadsAttr)
      return n.error() << "3-D inputs need attributes 'q_num_heads' and 'kv_num_heads'";
    FailureOr<Value> a = splitHeads(n, qh, **qHeadsAttr, "Q"),
                     b = splitHeads(n, kh, **kvHeadsAttr, "K"),
                     c = splitHeads(n, vh, **kvHeadsAttr, "V");
    if (failed(a) || failed(b) || failed(c))
      return failure();
    qh = *a, kh = *b, vh = *c;
  }
  // Past key/value go in front of this step's keys: the present outputs.
  Value pastK = n.input(4), pastV = n.input(5);
  if (!pastK != !pastV)
    return n.error() << "inputs 'past_key' and 'past_value' must be given together";
  int64_t past = 0;
  if (pastK) {
    FailureOr<Value> pk = staticInput(n, 4, "past_key", 4), pv = staticInput(n, 5, "past_value", 4);
    if (failed(pk) || failed(pv))
      return failure();
    past = rankedType(*pk).getDimSize(2);
    FailureOr<Value> ck = concat(n, {*pk, kh}, 2), cv = concat(n, {*pv, vh}, 2);
    if (failed(ck) || failed(cv))
      return failure();
    kh = *ck, vh = *cv;
  }
  Value presentK = kh, presentV = vh;
  ArrayRef<int64_t> qs = rankedType(qh).getShape(), ks = rankedType(kh).getShape(),
                    vs = rankedType(vh).getShape();
  int64_t hq = qs[1], hkv = ks[1], tq = qs[2], tk = ks[2], d = qs[3];
  if (vs[1] != hkv || vs[2] != tk || ks[3] != d || ks[0] != qs[0] || vs[0] != qs[0])
    return n.error() << "K " << kh.getType() << " and V " << vh.getType()
                     << " (as heads) do not match Q " << qh.getType();
  if (hq % hkv != 0)
    return n.error() << "q_num_heads " << hq << " is not a multiple of kv_num_heads " << hkv;
  FailureOr<Value> kr = repeatHeads(n, kh, hq / hkv), vr = repeatHeads(n, vh, hq / hkv);
  if (failed(kr) || failed(vr))
    return failure();
  float scale = scaleAttr->value_or(1.0f / std::sqrt(static_cast<float>(d)));

  // The additive bias: the mask, and the causal mask where it cannot be the
  // op's flag (ONNX aligns it top-left without a past, the op bottom-right).
  // FusedAttention takes an f32 bias whatever Q's type (the CPU kernels have
  // no 16-bit Add); the decomposed form computes in f32 (the CPU's Softmax
  // is f32 only) and rounds Y and the scores to Q's type at the end.
  bool decompose =
      *softcap > 0.0f || (n.proto().output_size() > 3 && !n.proto().output(3).empty());
  Type f32 = n.b().getF32Type(), biasElt = f32;
  auto castTo = [&](Value v, Type t) -> FailureOr<Value> {
    if (rankedType(v).getElementType() == t)
      return v;
    return one<graph::CastOp>(n, v, {n.named("to", TypeAttr::get(t))});
  };
  Value bias;
  if (Value m = n.input(3)) {
    FailureOr<Value> am = additiveMask(n, m, biasElt, tk);
    if (failed(am))
      return failure();
    bias = *am;
    if (rankedType(bias).getElementType() != biasElt) {
      FailureOr<Value> c = one<graph::CastOp>(n, bias, {n.named("to", TypeAttr::get(biasElt))});
      if (failed(c))
        return failure();
      bias = *c;
    }
  }
  bool causalFlag = *causal && !decompose && tk - tq == past;
  if (*causal && !causalFlag) {
    Value cb = causalBias(n, biasElt, tq, tk, past);
    if (bias) {
      FailureOr<Value> s = one<graph::AddOp>(n, {bias, cb});
      if (failed(s))
        return failure();
      bias = *s;
    } else {
      bias = cb;
    }
  }

  Value y, qk;
  if (!decompose) {
    FailureOr<Value> kt = transpose(n, *kr, {0, 1, 3, 2});
    if (failed(kt))
      return failure();
    SmallVector<NamedAttribute> attrs{n.named("scale", n.f32(scale))};
    if (causalFlag)
      attrs.push_back(n.named("causal", n.i64(1)));
    FailureOr<Values> r = n.create<graph::FusedAttentionOp>({qh, *kt, *vr, bias}, attrs);
    if (failed(r))
      return failure();
    y = (*r)[0];
  } else {
    // S = scale Q K^T, softcapped, plus the bias; P = softmax(S); Y = P V.
    FailureOr<Value> q32 = castTo(qh, f32), k32 = castTo(*kr, f32), v32 = castTo(*vr, f32);
    if (failed(q32) || failed(k32) || failed(v32))
      return failure();
    Type outElt = elt;
    elt = f32, qh = *q32, kr = k32, vr = v32;
    FailureOr<Value> kt = transpose(n, *kr, {0, 1, 3, 2});
    FailureOr<Value> s = failed(kt) ? FailureOr<Value>(failure()) : one<graph::MatMulOp>(n, {qh, *kt});
    if (failed(s))
      return failure();
    FailureOr<Value> scaled = one<graph::MulOp>(n, {*s, floatConstant(n, elt, {}, {scale})});
    if (failed(scaled))
      return failure();
    Value logits = *scaled;
    if (*softcap > 0.0f) {
      FailureOr<Value> a = one<graph::MulOp>(n, {logits, floatConstant(n, elt, {}, {1.0 / *softcap})});
      FailureOr<Value> t = failed(a) ? FailureOr<Value>(failure()) : one<graph::TanhOp>(n, *a);
      FailureOr<Value> c =
          failed(t) ? FailureOr<Value>(failure()) : one<graph::MulOp>(n, {*t, floatConstant(n, elt, {}, {*softcap})});
      if (failed(c))
        return failure();
      logits = *c;
    }
    qk = logits;
    if (bias) {
      FailureOr<Value> a = one<graph::AddOp>(n, {logits, bias});
      if (failed(a))
        return failure();
      logits = *a;
    }
    if (*mode == 2)
      qk = logits;
    FailureOr<Value> p = one<graph::SoftmaxOp>(n, logits, {n.named("axis", n.i64(-1))});
    if (failed(p))
      return failure();
    if (bias) {
      // A query whose bias masks every key attends to nothing: P = 0 there
      // (Softmax alone would give NaN), as ONNX and FusedAttention define.
      int64_t last = rankedType(bias).getRank() - 1;
      FailureOr<Value> mx = one<graph::ReduceMaxOp>(n, bias, {n.named("axes", n.i64s({last})),
                                                              n.named("keepdims", n.i64(1))});
      FailureOr<Value> none =
          failed(mx) ? FailureOr<Value>(failure())
                     : one<graph::EqualOp>(n, {*mx, floatConstant(n, rankedType(bias).getElementType(),
                                                                  {}, {-INFINITY})});
      FailureOr<Value> z = failed(none) ? FailureOr<Value>(failure())
                                        : one<graph::WhereOp>(n, {*none, floatConstant(n, elt, {}, {0.0}), *p});
      if (failed(z))
        return failure();
      p = z;
    }
    if (*mode == 3)
      qk = *p;
    FailureOr<Value> pv = one<graph::MatMulOp>(n, {*p, *vr});
    FailureOr<Value> y16 = failed(pv) ? FailureOr<Value>(failure()) : castTo(*pv, outElt);
    FailureOr<Value> qk16 = failed(y16) ? FailureOr<Value>(failure()) : castTo(qk, outElt);
    if (failed(qk16))
      return failure();
    y = *y16, qk = *qk16;
  }
  if (rank == 3) {
    ArrayRef<int64_t> ys = rankedType(y).getShape();
    FailureOr<Value> t = transpose(n, y, {0, 2, 1, 3});
    FailureOr<Value> r = failed(t) ? FailureOr<Value>(failure()) : reshape(n, *t, {ys[0], ys[2], ys[1] * ys[3]});
    if (failed(r))
      return failure();
    y = *r;
  }
  SmallVector<Value> results{y, presentK, presentV};
  if (qk)
    results.push_back(qk);
  return n.setResults(results);
}

LogicalResult importRotaryEmbedding(NodeImporter &n) {
  if (failed(n.checkAttributes({"interleaved", "num_heads", "rotary_embedding_dim"})))
    return failure();
  FailureOr<int64_t> interleaved = n.getInt("interleaved", 0), heads = n.getInt("num_heads", 0),
                     rotDim = n.getInt("rotary_embedding_dim", 0);
  FailureOr<Value> x = staticInput(n, 0, "X"), cosC = staticInput(n, 1, "cos_cache"),
                   sinC = staticInput(n, 2, "sin_cache");
  if (failed(interleaved) || failed(heads) || failed(rotDim) || failed(x) || failed(cosC) ||
      failed(sinC))
    return failure();
  RankedTensorType xt = rankedType(*x);
  if (xt.getRank() != 3 && xt.getRank() != 4)
    return n.error() << "input 'X' must be 3-D or 4-D, got " << xt;
  // Work on [B, S, H, D] (4-D input: [B, H, S, D]).
  Value xs = *x;
  int64_t b = xt.getDimSize(0), s, h, d;
  if (xt.getRank() == 3) {
    if (*heads <= 0 || xt.getDimSize(2) % *heads)
      return n.error() << "3-D input needs attribute 'num_heads' dividing its hidden size "
                       << xt.getDimSize(2) << ", got " << *heads;
    s = xt.getDimSize(1), h = *heads, d = xt.getDimSize(2) / h;
    FailureOr<Value> r = reshape(n, xs, {b, s, h, d});
    if (failed(r))
      return failure();
    xs = *r;
  } else {
    h = xt.getDimSize(1), s = xt.getDimSize(2), d = xt.getDimSize(3);
  }
  int64_t rd = *rotDim ? *rotDim : d;
  if (rd <= 0 || rd > d || rd % 2)
    return n.error() << "attribute 'rotary_embedding_dim' " << rd
                     << " must be even and at most the head size " << d;
  // The caches at the positions: [B, S, rd / 2].
  Value cosT = *cosC, sinT = *sinC;
  if (Value pos = n.input(3)) {
    FailureOr<Value> c = one<graph::GatherOp>(n, {cosT, pos}, {n.named("axis", n.i64(0))});
    FailureOr<Value> sn = one<graph::GatherOp>(n, {sinT, pos}, {n.named("axis", n.i64(0))});
    if (failed(c) || failed(sn))
      return failure();
    cosT = *c, sinT = *sn;
  }
  for (Value t : {cosT, sinT}) {
    ArrayRef<int64_t> ts = rankedType(t).getShape();
    if (ts.size() != 3 || ts[0] != b || ts[1] != s || ts[2] != rd / 2)
      return n.error() << "cos_cache/sin_cache at the positions must be [" << b << ", " << s
                       << ", " << rd / 2 << "] (batch, sequence, rotary_embedding_dim / 2), got "
                       << t.getType();
  }
  // Full rotary width (rotate-half pairs i and i + rd/2 share an angle),
  // shaped to broadcast against the heads layout.
  SmallVector<int64_t> tableShape = xt.getRank() == 4 ? SmallVector<int64_t>{b, 1, s, rd}
                                                      : SmallVector<int64_t>{b, s, 1, rd};
  SmallVector<Value, 2> tables;
  for (Value t : {cosT, sinT}) {
    FailureOr<Value> c = concat(n, {t, t}, 2);
    FailureOr<Value> r = failed(c) ? FailureOr<Value>(failure()) : reshape(n, *c, tableShape);
    if (failed(r))
      return failure();
    tables.push_back(*r);
  }
  Value rot = xs, rest;
  if (rd < d) {
    FailureOr<Value> a = sliceLast(n, xs, 0, rd), c = sliceLast(n, xs, rd, d);
    if (failed(a) || failed(c))
      return failure();
    rot = *a, rest = *c;
  }
  // Interleaved pairs (2i, 2i + 1) become rotate-half pairs (i, i + rd/2).
  SmallVector<int64_t> lead(rankedType(rot).getShape().drop_back());
  auto regroup = [&](Value v, int64_t a, int64_t c) -> FailureOr<Value> {
    SmallVector<int64_t> split(lead), flat(lead);
    split.append({a, c});
    flat.push_back(rd);
    FailureOr<Value> r = reshape(n, v, split);
    FailureOr<Value> t = failed(r) ? FailureOr<Value>(failure()) : transpose(n, *r, {0, 1, 2, 4, 3});
    return failed(t) ? FailureOr<Value>(failure()) : reshape(n, *t, flat);
  };
  if (*interleaved) {
    FailureOr<Value> r = regroup(rot, rd / 2, 2);
    if (failed(r))
      return failure();
    rot = *r;
  }
  FailureOr<Value> y = one<graph::FusedRotaryEmbeddingOp>(n, {rot, tables[0], tables[1]});
  if (failed(y))
    return failure();
  Value out = *y;
  if (*interleaved) {
    FailureOr<Value> r = regroup(out, 2, rd / 2);
    if (failed(r))
      return failure();
    out = *r;
  }
  if (rest) {
    FailureOr<Value> c = concat(n, {out, rest}, 3);
    if (failed(c))
      return failure();
    out = *c;
  }
  if (xt.getRank() == 3) {
    FailureOr<Value> r = reshape(n, out, xt.getShape());
    if (failed(r))
      return failure();
    out = *r;
  }
  return n.setResults(out);
}

} // namespace

void strait::onnximport::registerAttentionImporters(OpRegistry &r) {
  r.add("Attention", 23, importAttention);
  r.add("RotaryEmbedding", 23, importRotaryEmbedding);
}
