//===- ImportRecurrent.cpp - RNN, GRU and LSTM unrolled over time ---------===//
//
// The recurrent ops become graph ops over the static sequence length: one
// Gemm per direction projects every time step's input at once (X W^T + Wb +
// Rb), then each step adds H_{t-1} R^T (a Gemm), splits the gates, applies
// the activations and updates the state. Autodiff, fusion and the runtimes
// see ordinary ops; W, R, B and P are read once per direction, so their
// gradients accumulate over the time steps through those reads.
//
// sequence_lens shorter than seq_length mask the steps past each batch
// entry's end: the state keeps its value there and Y is zero, so Y_h and Y_c
// hold the last valid step (the reverse direction starts at the entry's last
// step). Constant lengths give constant masks; runtime lengths become
// Less/Cast masks. Limits (diagnostics naming the node): static shapes.
//
//===----------------------------------------------------------------------===//

#include "NodeImporter.h"

#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

namespace {

enum class CellKind { RNN, GRU, LSTM };

/// What differs between the three ops: gates per step and default
/// activations per direction (f for RNN; f, g for GRU; f, g, h for LSTM).
struct CellSpec {
  CellKind kind;
  int64_t gates;
  SmallVector<StringRef, 3> activations;
};

CellSpec specOf(CellKind kind) {
  switch (kind) {
  case CellKind::RNN:
    return {kind, 1, {"Tanh"}};
  case CellKind::GRU:
    return {kind, 3, {"Sigmoid", "Tanh"}};
  case CellKind::LSTM:
    return {kind, 4, {"Sigmoid", "Tanh", "Tanh"}};
  }
  return {kind, 1, {"Tanh"}};
}

/// One activation function of the spec's list, with its alpha and beta.
struct Activation {
  enum Kind {
    Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh,
    HardSigmoid, Elu, Softsign, Softplus, Unknown
  } kind;
  float alpha = 0.0f, beta = 0.0f;
};

/// Reads `activations`, `activation_alpha` and `activation_beta`: a list of
/// `perDirection` names per direction (one list is repeated for both
/// directions); alphas and betas are consumed in order by the activations
/// that take them, defaults as in the ONNX ops of the same name.
FailureOr<SmallVector<Activation>> readActivations(NodeImporter &n, const CellSpec &spec,
                                                   int64_t directions) {
  SmallVector<std::string> names;
  if (const onnx::AttributeProto *a = n.attr("activations")) {
    if (a->type() != onnx::AttributeProto::STRINGS &&
        a->type() != onnx::AttributeProto::UNDEFINED)
      return n.error() << "attribute 'activations' must be a list of strings";
    names.assign(a->strings().begin(), a->strings().end());
  }
  size_t per = spec.activations.size();
  if (names.empty())
    for (int64_t d = 0; d < directions; ++d)
      names.append(spec.activations.begin(), spec.activations.end());
  else if (names.size() == per && directions == 2)
    names.append(SmallVector<std::string>(names));
  if (names.size() != per * directions)
    return n.error() << "attribute 'activations' has " << names.size() << " entries, expected "
                     << per * directions << " (" << per << " per direction)";
  FailureOr<SmallVector<float>> alphas = n.getFloats("activation_alpha");
  FailureOr<SmallVector<float>> betas = n.getFloats("activation_beta");
  if (failed(alphas) || failed(betas))
    return failure();
  size_t nextAlpha = 0, nextBeta = 0;
  SmallVector<Activation> out;
  for (const std::string &name : names) {
    Activation act;
    act.kind = llvm::StringSwitch<Activation::Kind>(StringRef(name).lower())
                   .Case("relu", Activation::Relu)
                   .Case("tanh", Activation::Tanh)
                   .Case("sigmoid", Activation::Sigmoid)
                   .Case("affine", Activation::Affine)
                   .Case("leakyrelu", Activation::LeakyRelu)
                   .Case("thresholdedrelu", Activation::ThresholdedRelu)
                   .Case("scaledtanh", Activation::ScaledTanh)
                   .Case("hardsigmoid", Activation::HardSigmoid)
                   .Case("elu", Activation::Elu)
                   .Case("softsign", Activation::Softsign)
                   .Case("softplus", Activation::Softplus)
                   .Default(Activation::Unknown);
    bool usesAlpha = true, usesBeta = false;
    switch (act.kind) {
    case Activation::Affine:
      act.alpha = 1.0f, usesBeta = true;
      break;
    case Activation::LeakyRelu:
      act.alpha = 0.01f;
      break;
    case Activation::ThresholdedRelu:
    case Activation::Elu:
      act.alpha = 1.0f;
      break;
    case Activation::ScaledTanh:
      act.alpha = 1.0f, act.beta = 1.0f, usesBeta = true;
      break;
    case Activation::HardSigmoid:
      act.alpha = 0.2f, act.beta = 0.5f, usesBeta = true;
      break;
    case Activation::Unknown:
      return n.error() << "activation '" << name
                       << "' (attribute 'activations') is not one of Relu, Tanh, Sigmoid, "
                          "Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, "
                          "Softsign, Softplus";
    default:
      usesAlpha = false;
    }
    if (usesAlpha && nextAlpha < alphas->size())
      act.alpha = (*alphas)[nextAlpha++];
    if (usesBeta && nextBeta < betas->size())
      act.beta = (*betas)[nextBeta++];
    out.push_back(act);
  }
  return out;
}

/// Builds the unrolled graph. Every helper returns null once an op failed
/// (its diagnostic is out); the caller checks `failed()` at the end.
class Unroller {
public:
  Unroller(NodeImporter &n, Type elt) : n(n), elt(elt) {}

  bool failed() const { return bad; }

  template <typename OpTy>
  Value op(ArrayRef<Value> operands, ArrayRef<NamedAttribute> attrs = {}) {
    Values r = ops<OpTy>(operands, attrs);
    return r.empty() ? Value() : r[0];
  }

  template <typename OpTy>
  Values ops(ArrayRef<Value> operands, ArrayRef<NamedAttribute> attrs = {}) {
    if (bad)
      return {};
    FailureOr<Values> r = n.create<OpTy>(operands, attrs);
    if (mlir::failed(r)) {
      bad = true;
      return {};
    }
    return *r;
  }

  /// A rank-0 constant of the element type.
  Value scalar(double v) {
    auto type = RankedTensorType::get({}, elt);
    return n.constant(DenseElementsAttr::get(type, FloatAttr::get(elt, v)));
  }

  /// a + b, where a null operand counts as zero.
  Value add(Value a, Value b) {
    if (!a || !b)
      return a ? a : b;
    return op<graph::AddOp>({a, b});
  }
  Value mul(Value a, Value b) { return op<graph::MulOp>({a, b}); }
  Value sub(Value a, Value b) { return op<graph::SubOp>({a, b}); }

  /// v[start:end] along `axis`.
  Value slice(Value v, int64_t axis, int64_t start, int64_t end) {
    return op<graph::SliceOp>({v}, {n.named("starts", n.i64s({start})),
                                    n.named("ends", n.i64s({end})),
                                    n.named("axes", n.i64s({axis})),
                                    n.named("steps", n.i64s({1}))});
  }

  /// v[d] along `axis` with that axis removed (null stays null).
  Value pick(Value v, int64_t axis, int64_t d) {
    if (!v)
      return v;
    return op<graph::SqueezeOp>({slice(v, axis, d, d + 1)}, {n.named("axes", n.i64s({axis}))});
  }

  Value unsqueeze(Value v, ArrayRef<int64_t> axes) {
    return op<graph::UnsqueezeOp>({v}, {n.named("axes", n.i64s(axes))});
  }

  Value concat(ArrayRef<Value> parts, int64_t axis) {
    if (parts.size() == 1)
      return parts[0];
    return op<graph::ConcatOp>(parts, {n.named("axis", n.i64(axis))});
  }

  /// Equal pieces of `size` along `axis`.
  Values split(Value v, int64_t axis, int64_t pieces, int64_t size) {
    if (pieces == 1)
      return Values{v};
    return ops<graph::SplitOp>({v}, {n.named("axis", n.i64(axis)),
                                     n.named("split", n.i64s(SmallVector<int64_t>(pieces, size)))});
  }

  Value reshape(Value v, ArrayRef<int64_t> shape) {
    return op<graph::ReshapeOp>({v}, {n.named("shape", n.i64s(shape))});
  }

  /// a b^T + c (c may be null).
  Value linear(Value a, Value b, Value c) {
    return op<graph::GemmOp>({a, b, c}, {n.named("alpha", n.f32(1.0f)),
                                         n.named("beta", n.f32(1.0f)),
                                         n.named("transA", n.i64(0)),
                                         n.named("transB", n.i64(1))});
  }

  /// act(clip(x)).
  Value activate(const Activation &act, Value x, std::optional<float> clip) {
    if (clip)
      x = op<graph::ClipOp>({x}, {n.named("min", n.b().getF64FloatAttr(-*clip)),
                                  n.named("max", n.b().getF64FloatAttr(*clip))});
    auto alpha = n.named("alpha", n.f32(act.alpha));
    switch (act.kind) {
    case Activation::Relu:
      return op<graph::ReluOp>({x});
    case Activation::Tanh:
      return op<graph::TanhOp>({x});
    case Activation::Sigmoid:
      return op<graph::SigmoidOp>({x});
    case Activation::Affine:
      return add(mul(x, scalar(act.alpha)), scalar(act.beta));
    case Activation::LeakyRelu:
      return op<graph::LeakyReluOp>({x}, {alpha});
    case Activation::ThresholdedRelu:
      return op<graph::ThresholdedReluOp>({x}, {alpha});
    case Activation::ScaledTanh:
      return mul(op<graph::TanhOp>({mul(x, scalar(act.beta))}), scalar(act.alpha));
    case Activation::HardSigmoid:
      return op<graph::HardSigmoidOp>({x}, {alpha, n.named("beta", n.f32(act.beta))});
    case Activation::Elu:
      return op<graph::EluOp>({x}, {alpha});
    case Activation::Softsign:
      return op<graph::SoftsignOp>({x});
    case Activation::Softplus:
      return op<graph::SoftplusOp>({x});
    case Activation::Unknown:
      break;
    }
    bad = true;
    return {};
  }

private:
  NodeImporter &n;
  Type elt;
  bool bad = false;
};

/// The node's attributes and shapes, checked.
struct Problem {
  CellSpec spec;
  int64_t seq = 0, batch = 0, inputSize = 0, hidden = 0, directions = 1;
  bool reverse = false, batchFirst = false;
  bool linearBeforeReset = false, inputForget = false;
  std::optional<float> clip;
  SmallVector<Activation> activations; // per direction, spec.activations.size() each
  SmallVector<int64_t> lens;            // constant sequence_lens, when not all seq
  bool dynamicLens = false;             // sequence_lens known at run time only
};

/// Fails unless input `i` (if present) has static shape `expected`.
LogicalResult checkShape(NodeImporter &n, size_t i, StringRef what,
                         ArrayRef<int64_t> expected) {
  if (!n.input(i))
    return success();
  auto type = dyn_cast<RankedTensorType>(n.inputType(i));
  if (!type || type.getShape() != expected) {
    InFlightDiagnostic d = n.error() << "input '" << what << "' has type " << n.inputType(i)
                                     << ", expected shape [";
    llvm::interleaveComma(expected, d);
    return d << "]";
  }
  return success();
}

FailureOr<Problem> readProblem(NodeImporter &n, const CellSpec &spec) {
  SmallVector<StringRef> known = {"activation_alpha", "activation_beta", "activations",
                                  "clip", "direction", "hidden_size", "layout",
                                  "output_sequence"};
  if (spec.kind == CellKind::GRU)
    known.push_back("linear_before_reset");
  if (spec.kind == CellKind::LSTM)
    known.push_back("input_forget");
  if (failed(n.checkAttributes(known)))
    return failure();
  int outputs = spec.kind == CellKind::LSTM ? 3 : 2;
  for (int i = outputs; i < n.proto().output_size(); ++i)
    if (!n.proto().output(i).empty())
      return n.error() << "has " << outputs << " outputs, output " << i << " ('"
                       << n.proto().output(i) << "') does not exist";
  Problem p{spec};
  FailureOr<std::string> direction = n.getString("direction", "forward");
  FailureOr<std::optional<int64_t>> hidden = n.getOptionalInt("hidden_size");
  FailureOr<int64_t> layout = n.getInt("layout", 0);
  FailureOr<int64_t> lbr = n.getInt("linear_before_reset", 0);
  FailureOr<int64_t> inputForget = n.getInt("input_forget", 0);
  FailureOr<std::optional<float>> clip = n.getOptionalFloat("clip");
  FailureOr<Value> x = n.requiredInput(0), w = n.requiredInput(1), r = n.requiredInput(2);
  if (failed(direction) || failed(hidden) || failed(layout) || failed(lbr) ||
      failed(inputForget) || failed(clip) || failed(x) || failed(w) || failed(r))
    return failure();
  if (*direction == "bidirectional")
    p.directions = 2;
  else if (*direction == "reverse")
    p.reverse = true;
  else if (*direction != "forward")
    return n.error() << "attribute 'direction' is '" << *direction
                     << "', expected forward, reverse or bidirectional";
  if (*layout != 0 && *layout != 1)
    return n.error() << "attribute 'layout' is " << *layout << ", expected 0 or 1";
  if (*clip && !(**clip > 0.0f))
    return n.error() << "attribute 'clip' must be positive, got " << **clip;
  p.batchFirst = *layout == 1;
  p.linearBeforeReset = *lbr != 0;
  p.inputForget = *inputForget != 0;
  p.clip = *clip;

  auto xt = dyn_cast<RankedTensorType>(n.inputType(0));
  auto wt = dyn_cast<RankedTensorType>(n.inputType(1));
  auto rt = dyn_cast<RankedTensorType>(n.inputType(2));
  if (!xt || xt.getRank() != 3 || !xt.hasStaticShape())
    return n.error() << "input 'X' must have a static 3-D shape, got " << n.inputType(0)
                     << "; fix dynamic dimensions with --input-shape";
  if (!isa<FloatType>(xt.getElementType()))
    return n.error() << "input 'X' must hold floats, got " << xt.getElementType();
  if (!rt || rt.getRank() != 3 || !rt.hasStaticShape())
    return n.error() << "input 'R' must have a static 3-D shape, got " << n.inputType(2);
  p.seq = xt.getDimSize(p.batchFirst ? 1 : 0);
  p.batch = xt.getDimSize(p.batchFirst ? 0 : 1);
  p.inputSize = xt.getDimSize(2);
  p.hidden = rt.getDimSize(2);
  if (*hidden && **hidden != p.hidden)
    return n.error() << "attribute 'hidden_size' is " << **hidden
                     << " but input 'R' has hidden size " << p.hidden;
  if (p.seq < 1 || p.batch < 1 || p.inputSize < 1 || p.hidden < 1)
    return n.error() << "seq_length, batch_size, input_size and hidden_size must be "
                        "positive, got "
                     << p.seq << ", " << p.batch << ", " << p.inputSize << " and " << p.hidden;
  // Each step becomes ~20 ops: bound the graph an unrolled sequence can make.
  constexpr int64_t kMaxSteps = 1 << 16;
  if (p.seq * p.directions > kMaxSteps)
    return n.error() << "seq_length " << p.seq << " (times " << p.directions
                     << " directions) is too long to unroll (at most " << kMaxSteps
                     << " steps)";
  int64_t d = p.directions, gh = spec.gates * p.hidden, h = p.hidden;
  SmallVector<int64_t> stateShape = p.batchFirst ? SmallVector<int64_t>{p.batch, d, h}
                                                 : SmallVector<int64_t>{d, p.batch, h};
  if (!wt || wt.getElementType() != xt.getElementType() ||
      rt.getElementType() != xt.getElementType())
    return n.error() << "inputs 'W' and 'R' must have X's element type "
                     << xt.getElementType();
  if (failed(checkShape(n, 1, "W", {d, gh, p.inputSize})) ||
      failed(checkShape(n, 2, "R", {d, gh, h})) ||
      failed(checkShape(n, 3, "B", {d, 2 * gh})) ||
      failed(checkShape(n, 5, "initial_h", stateShape)))
    return failure();
  if (spec.kind == CellKind::LSTM &&
      (failed(checkShape(n, 6, "initial_c", stateShape)) ||
       failed(checkShape(n, 7, "P", {d, 3 * h}))))
    return failure();
  for (size_t i : {3, 5, 6, 7})
    if (n.input(i) && getElementTypeOrSelf(n.inputType(i)) != xt.getElementType())
      return n.error() << "input " << i << " must have X's element type "
                       << xt.getElementType();

  if (n.input(4)) {
    auto lt = dyn_cast<RankedTensorType>(n.inputType(4));
    if (!lt || lt.getShape() != ArrayRef<int64_t>{p.batch} ||
        !isa<IntegerType>(lt.getElementType()))
      return n.error() << "input 'sequence_lens' must be [batch_size = " << p.batch
                       << "] integers, got " << n.inputType(4);
    if (std::optional<SmallVector<int64_t>> lens = n.optionalConstantInts(4)) {
      for (int64_t len : *lens)
        if (len < 1 || len > p.seq)
          return n.error() << "input 'sequence_lens' holds " << len
                           << ", outside [1, seq_length " << p.seq << "]";
      if (llvm::any_of(*lens, [&](int64_t len) { return len != p.seq; }))
        p.lens = *lens;
    } else {
      p.dynamicLens = true;
    }
  }
  FailureOr<SmallVector<Activation>> acts = readActivations(n, spec, d);
  if (failed(acts))
    return failure();
  p.activations = std::move(*acts);
  return p;
}

/// One direction's inputs, sliced out of the node's.
struct Direction {
  Value w, r, wb, rb, p, h0, c0;
  ArrayRef<Activation> acts;
  ArrayRef<Value> masks; // per time step, [batch, 1]; empty without sequence_lens
  Value mask(int64_t t) const { return masks.empty() ? Value() : masks[t]; }
};

/// The state after a step: `next` where the step is inside the sequence
/// (mask 1), `prev` past its end (a null prev is zero).
Value keepPastEnd(Unroller &u, Value mask, Value prev, Value next) {
  if (!mask)
    return next;
  if (!prev)
    return u.mul(mask, next);
  return u.add(prev, u.mul(mask, u.sub(next, prev)));
}

/// Y at a step: zero past the sequence's end.
Value output(Unroller &u, Value mask, Value h) { return mask ? u.mul(mask, h) : h; }

/// One direction's results: H at every time step (in input order) and the
/// final states.
struct DirectionResult {
  SmallVector<Value> ys;
  Value h, c;
};

/// x_t W^T (+ bias) for every t, as [batch, width] values in time order.
SmallVector<Value> projectInputs(Unroller &u, const Problem &p, Value x2, Value w, Value bias) {
  int64_t width = p.spec.gates * p.hidden;
  Value proj = u.linear(x2, w, bias);
  if (u.failed())
    return SmallVector<Value>(p.seq); // the callers stop at the next check
  // Layout 0: the rows of time step t are contiguous.
  if (!p.batchFirst) {
    Values steps = u.split(proj, 0, p.seq, p.batch);
    steps.resize(p.seq);
    return SmallVector<Value>(steps.begin(), steps.end());
  }
  SmallVector<Value> steps;
  for (Value v : u.split(u.reshape(proj, {p.batch, p.seq, width}), 1, p.seq, 1))
    steps.push_back(u.reshape(v, {p.batch, width}));
  steps.resize(p.seq);
  return steps;
}

/// Time steps in the order this direction visits them.
SmallVector<int64_t> visitOrder(const Problem &p, bool backward) {
  SmallVector<int64_t> order;
  for (int64_t t = 0; t < p.seq; ++t)
    order.push_back(backward ? p.seq - 1 - t : t);
  return order;
}

DirectionResult runRNN(Unroller &u, const Problem &p, Value x2, const Direction &d,
                       bool backward) {
  SmallVector<Value> xs = projectInputs(u, p, x2, d.w, u.add(d.wb, d.rb));
  DirectionResult res{SmallVector<Value>(p.seq), d.h0, {}};
  for (int64_t t : visitOrder(p, backward)) {
    Value pre = xs[t];
    if (res.h)
      pre = u.add(pre, u.linear(res.h, d.r, {}));
    Value h = u.activate(d.acts[0], pre, p.clip);
    res.ys[t] = output(u, d.mask(t), h);
    res.h = res.h ? keepPastEnd(u, d.mask(t), res.h, h) : res.ys[t];
  }
  return res;
}

DirectionResult runGRU(Unroller &u, const Problem &p, Value x2, const Direction &d,
                       bool backward) {
  int64_t h = p.hidden;
  // Wb + Rb for z and r; for h, Rbh joins the projection unless it is
  // applied before the reset gate.
  Value bias, rbh;
  if (d.wb) {
    rbh = u.slice(d.rb, 0, 2 * h, 3 * h);
    bias = p.linearBeforeReset
               ? u.concat({u.add(u.slice(d.wb, 0, 0, 2 * h), u.slice(d.rb, 0, 0, 2 * h)),
                           u.slice(d.wb, 0, 2 * h, 3 * h)},
                          0)
               : u.add(d.wb, d.rb);
  }
  Value rzr = p.linearBeforeReset ? Value() : u.slice(d.r, 0, 0, 2 * h);
  Value rh = p.linearBeforeReset ? Value() : u.slice(d.r, 0, 2 * h, 3 * h);
  SmallVector<Value> xs = projectInputs(u, p, x2, d.w, bias);
  DirectionResult res{SmallVector<Value>(p.seq), d.h0, {}};
  for (int64_t t : visitOrder(p, backward)) {
    Values x = u.split(xs[t], 1, 3, h);
    if (u.failed())
      return res;
    Value zIn = x[0], rIn = x[1], hIn = x[2], hh;
    if (res.h) {
      Values hr = u.split(u.linear(res.h, p.linearBeforeReset ? d.r : rzr, {}), 1,
                          p.linearBeforeReset ? 3 : 2, h);
      if (u.failed())
        return res;
      zIn = u.add(zIn, hr[0]);
      rIn = u.add(rIn, hr[1]);
      if (p.linearBeforeReset)
        hh = hr[2];
    }
    Value z = u.activate(d.acts[0], zIn, p.clip);
    Value r = u.activate(d.acts[0], rIn, p.clip);
    if (p.linearBeforeReset) {
      Value gated = u.add(hh, rbh);
      if (gated)
        hIn = u.add(hIn, u.mul(r, gated));
    } else if (res.h) {
      hIn = u.add(hIn, u.linear(u.mul(r, res.h), rh, {}));
    }
    Value cand = u.activate(d.acts[1], hIn, p.clip);
    // H = (1 - z) h~ + z H_{t-1} = h~ + z (H_{t-1} - h~).
    Value h = res.h ? u.add(cand, u.mul(z, u.sub(res.h, cand))) : u.sub(cand, u.mul(z, cand));
    res.ys[t] = output(u, d.mask(t), h);
    res.h = res.h ? keepPastEnd(u, d.mask(t), res.h, h) : res.ys[t];
  }
  return res;
}

DirectionResult runLSTM(Unroller &u, const Problem &p, Value x2, const Direction &d,
                        bool backward) {
  int64_t h = p.hidden;
  SmallVector<Value> xs = projectInputs(u, p, x2, d.w, u.add(d.wb, d.rb));
  Value pi, po, pf;
  if (d.p) {
    Values ps = u.split(d.p, 0, 3, h);
    if (u.failed())
      return {};
    pi = ps[0], po = ps[1], pf = ps[2];
  }
  // A null state is zero: its products vanish.
  auto peep = [&](Value gate, Value weight, Value c) {
    return weight && c ? u.add(gate, u.mul(weight, c)) : gate;
  };
  DirectionResult res{SmallVector<Value>(p.seq), d.h0, d.c0};
  for (int64_t t : visitOrder(p, backward)) {
    Value pre = xs[t];
    if (res.h)
      pre = u.add(pre, u.linear(res.h, d.r, {}));
    Values g = u.split(pre, 1, 4, h); // i, o, f, c
    if (u.failed())
      return res;
    Value i = u.activate(d.acts[0], peep(g[0], pi, res.c), p.clip);
    Value cand = u.activate(d.acts[1], g[3], p.clip);
    Value c = u.mul(i, cand);
    if (res.c) { // the forget gate only matters for a nonzero state
      Value f = p.inputForget ? u.sub(u.scalar(1.0), i)
                              : u.activate(d.acts[0], peep(g[2], pf, res.c), p.clip);
      c = u.add(u.mul(f, res.c), c);
    }
    Value o = u.activate(d.acts[0], peep(g[1], po, c), p.clip);
    Value h = u.mul(o, u.activate(d.acts[2], c, std::nullopt));
    res.c = keepPastEnd(u, d.mask(t), res.c, c);
    res.ys[t] = output(u, d.mask(t), h);
    res.h = res.h ? keepPastEnd(u, d.mask(t), res.h, h) : res.ys[t];
  }
  return res;
}

LogicalResult bindOutputs(NodeImporter &n, Unroller &u, const Problem &p,
                          MutableArrayRef<DirectionResult> dirs);

/// [batch, 1] masks of the steps inside each batch entry's sequence (t <
/// sequence_lens[b]); none when every sequence is seq_length long.
SmallVector<Value> stepMasks(NodeImporter &n, Unroller &u, const Problem &p) {
  SmallVector<Value> masks;
  Type elt = getElementTypeOrSelf(n.inputType(0));
  auto maskType = RankedTensorType::get({p.batch, 1}, elt);
  for (int64_t t = 0; t < p.seq && !p.lens.empty(); ++t) {
    SmallVector<Attribute> m;
    for (int64_t len : p.lens)
      m.push_back(FloatAttr::get(elt, t < len ? 1.0 : 0.0));
    masks.push_back(n.constant(DenseElementsAttr::get(maskType, m)));
  }
  for (int64_t t = 0; t < p.seq && p.dynamicLens; ++t) {
    Type it = getElementTypeOrSelf(n.inputType(4));
    Value step = n.constant(DenseElementsAttr::get(RankedTensorType::get({}, it),
                                                   IntegerAttr::get(it, t)));
    Value inside = u.op<graph::LessOp>({step, n.input(4)});
    Value f = u.op<graph::CastOp>({inside}, {n.named("to", TypeAttr::get(elt))});
    masks.push_back(u.unsqueeze(f, {1}));
  }
  return masks;
}

LogicalResult importRecurrent(NodeImporter &n, CellKind kind) {
  FailureOr<Problem> prob = readProblem(n, specOf(kind));
  if (failed(prob))
    return failure();
  const Problem &p = *prob;
  Unroller u(n, getElementTypeOrSelf(n.inputType(0)));
  int64_t stateAxis = p.batchFirst ? 1 : 0;
  size_t per = p.spec.activations.size();
  // Both directions read the same flattened X and step masks.
  Value x2 = u.reshape(n.input(0), {p.seq * p.batch, p.inputSize});
  SmallVector<Value> masks = stepMasks(n, u, p);
  SmallVector<DirectionResult> dirs;
  for (int64_t di = 0; di < p.directions; ++di) {
    Direction d;
    d.w = u.pick(n.input(1), 0, di);
    d.r = u.pick(n.input(2), 0, di);
    if (Value b = u.pick(n.input(3), 0, di)) {
      int64_t gh = p.spec.gates * p.hidden;
      d.wb = u.slice(b, 0, 0, gh);
      d.rb = u.slice(b, 0, gh, 2 * gh);
    }
    d.h0 = u.pick(n.input(5), stateAxis, di);
    if (kind == CellKind::LSTM) {
      d.c0 = u.pick(n.input(6), stateAxis, di);
      d.p = u.pick(n.input(7), 0, di);
    }
    d.acts = ArrayRef<Activation>(p.activations).slice(di * per, per);
    d.masks = masks;
    bool backward = p.reverse || di == 1;
    switch (kind) {
    case CellKind::RNN:
      dirs.push_back(runRNN(u, p, x2, d, backward));
      break;
    case CellKind::GRU:
      dirs.push_back(runGRU(u, p, x2, d, backward));
      break;
    case CellKind::LSTM:
      dirs.push_back(runLSTM(u, p, x2, d, backward));
      break;
    }
    if (u.failed())
      return failure();
  }
  return bindOutputs(n, u, p, dirs);
}

/// Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]), Y_h
/// and Y_c [dirs, batch, hidden] ([batch, dirs, hidden]); only named ones.
LogicalResult bindOutputs(NodeImporter &n, Unroller &u, const Problem &p,
                          MutableArrayRef<DirectionResult> dirs) {
  int64_t stateAxis = p.batchFirst ? 1 : 0;
  auto wanted = [&](int i) {
    return i < n.proto().output_size() && !n.proto().output(i).empty();
  };
  auto states = [&](auto member) {
    SmallVector<Value> parts;
    for (DirectionResult &r : dirs)
      parts.push_back(u.unsqueeze(r.*member, {stateAxis}));
    return u.concat(parts, stateAxis);
  };
  SmallVector<Value> results(3);
  if (wanted(0)) {
    SmallVector<Value> times;
    SmallVector<int64_t> axes = p.batchFirst ? SmallVector<int64_t>{1, 2}
                                             : SmallVector<int64_t>{0, 1};
    for (int64_t t = 0; t < p.seq; ++t) {
      SmallVector<Value> parts;
      for (DirectionResult &r : dirs)
        parts.push_back(u.unsqueeze(r.ys[t], axes));
      times.push_back(u.concat(parts, axes[1]));
    }
    results[0] = u.concat(times, axes[0]);
  }
  if (wanted(1))
    results[1] = states(&DirectionResult::h);
  if (p.spec.kind == CellKind::LSTM && wanted(2))
    results[2] = states(&DirectionResult::c);
  if (u.failed())
    return failure();
  // Unnamed outputs before a named one hold a placeholder that is never bound.
  Value any;
  for (Value v : results)
    any = any ? any : v;
  while (!results.empty() && !results.back())
    results.pop_back();
  for (Value &v : results)
    v = v ? v : any;
  return n.setResults(results);
}

LogicalResult importRNN(NodeImporter &n) { return importRecurrent(n, CellKind::RNN); }
LogicalResult importGRU(NodeImporter &n) { return importRecurrent(n, CellKind::GRU); }
LogicalResult importLSTM(NodeImporter &n) { return importRecurrent(n, CellKind::LSTM); }

} // namespace

void strait::onnximport::registerRecurrentImporters(OpRegistry &r) {
  // One function covers every version: 7 dropped output_sequence (accepted
  // and ignored: Y exists when it is named), 14 added layout, 22 bfloat16.
  r.add("RNN", 1, importRNN);
  r.add("GRU", 1, importGRU);
  r.add("LSTM", 1, importLSTM);
}
