//===- ImportNN.cpp - Linear algebra, convolution, pooling, norms ---------===//

#include "NodeImporter.h"

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

namespace {

LogicalResult importMatMul(NodeImporter &n) {
  FailureOr<Value> a = n.requiredInput(0), b = n.requiredInput(1);
  if (failed(a) || failed(b))
    return failure();
  return emit<graph::MatMulOp>(n, {*a, *b});
}

LogicalResult importGemm(NodeImporter &n) {
  // `broadcast` (opset < 7) only allowed what numpy broadcasting does anyway.
  if (failed(n.checkAttributes({"alpha", "beta", "transA", "transB", "broadcast"})))
    return failure();
  FailureOr<float> alpha = n.getFloat("alpha", 1.0f), beta = n.getFloat("beta", 1.0f);
  FailureOr<int64_t> ta = n.getInt("transA", 0), tb = n.getInt("transB", 0);
  FailureOr<Value> a = n.requiredInput(0), b = n.requiredInput(1);
  if (failed(alpha) || failed(beta) || failed(ta) || failed(tb) || failed(a) || failed(b))
    return failure();
  return emit<graph::GemmOp>(n, {*a, *b, n.input(2)},
                             {n.named("alpha", n.f32(*alpha)), n.named("beta", n.f32(*beta)),
                              n.named("transA", n.i64(*ta)), n.named("transB", n.i64(*tb))});
}

LogicalResult importEinsum(NodeImporter &n) {
  FailureOr<std::string> eq = n.getString("equation", "");
  if (failed(eq))
    return failure();
  if (eq->empty())
    return n.error() << "missing attribute 'equation'";
  SmallVector<Value> in;
  for (size_t i = 0; i < n.numInputs(); ++i)
    in.push_back(n.input(i));
  return emit<graph::EinsumOp>(n, in, {n.named("equation", n.b().getStringAttr(*eq))});
}

/// Explicit window attributes of a conv or pool node with `spatial` dims
/// over input spatial extents `in` (auto_pad resolved).
struct Window {
  SmallVector<int64_t> kernel, strides, dilations, pads;
};

FailureOr<Window> readWindow(NodeImporter &n, int64_t spatial, ArrayRef<int64_t> in,
                             ArrayRef<int64_t> kernelFromWeights, bool ceilMode = false) {
  Window w;
  FailureOr<SmallVector<int64_t>> k = n.getInts("kernel_shape", kernelFromWeights);
  FailureOr<SmallVector<int64_t>> s = n.getInts("strides", SmallVector<int64_t>(spatial, 1));
  FailureOr<SmallVector<int64_t>> d = n.getInts("dilations", SmallVector<int64_t>(spatial, 1));
  FailureOr<SmallVector<int64_t>> p = n.getInts("pads", SmallVector<int64_t>(2 * spatial, 0));
  FailureOr<std::string> autoPad = n.getString("auto_pad", "NOTSET");
  if (failed(k) || failed(s) || failed(d) || failed(p) || failed(autoPad))
    return failure();
  if ((int64_t)k->size() != spatial || (int64_t)s->size() != spatial ||
      (int64_t)d->size() != spatial || (int64_t)p->size() != 2 * spatial)
    return n.error() << "kernel_shape/strides/dilations/pads do not match " << spatial
                     << " spatial dimensions";
  for (int64_t v : *k)
    if (v <= 0)
      return n.error() << "kernel_shape entries must be positive";
  w.kernel = *k;
  w.strides = *s;
  w.dilations = *d;
  w.pads = *p;
  if (*autoPad == "SAME_UPPER" || *autoPad == "SAME_LOWER") {
    for (int64_t i = 0; i < spatial; ++i) {
      if (in[i] == ShapedType::kDynamic)
        return n.error() << "auto_pad " << *autoPad << " needs static spatial sizes";
      int64_t out = (in[i] + w.strides[i] - 1) / std::max<int64_t>(w.strides[i], 1);
      int64_t span = (w.kernel[i] - 1) * w.dilations[i] + 1;
      int64_t total = std::max<int64_t>((out - 1) * w.strides[i] + span - in[i], 0);
      int64_t small = total / 2, big = total - small;
      w.pads[i] = *autoPad == "SAME_UPPER" ? small : big;
      w.pads[i + spatial] = *autoPad == "SAME_UPPER" ? big : small;
    }
  } else if (*autoPad == "VALID") {
    std::fill(w.pads.begin(), w.pads.end(), 0);
  } else if (*autoPad != "NOTSET") {
    return n.error() << "unknown auto_pad '" << *autoPad << "'";
  }
  (void)ceilMode;
  return w;
}

LogicalResult importConv(NodeImporter &n) {
  if (failed(n.checkAttributes({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0), wv = n.requiredInput(1);
  if (failed(x) || failed(wv))
    return failure();
  auto xt = dyn_cast<RankedTensorType>(n.inputType(0));
  auto wt = dyn_cast<RankedTensorType>(n.inputType(1));
  if (!xt || !wt || xt.getRank() < 3 || wt.getRank() != xt.getRank())
    return n.error() << "needs ranked X (N, C, spatial...) and W (M, C/group, kernel...) of "
                        "the same rank";
  int64_t spatial = xt.getRank() - 2;
  FailureOr<Window> w = readWindow(n, spatial, xt.getShape().drop_front(2),
                                   wt.getShape().drop_front(2));
  FailureOr<int64_t> group = n.getInt("group", 1);
  if (failed(w) || failed(group))
    return failure();
  if (ArrayRef<int64_t>(w->kernel) != wt.getShape().drop_front(2))
    return n.error() << "kernel_shape does not match W's shape " << wt;
  return emit<graph::ConvOp>(n, {*x, *wv, n.input(2)},
                             {n.named("dilations", n.i64s(w->dilations)),
                              n.named("group", n.i64(*group)),
                              n.named("pads", n.i64s(w->pads)),
                              n.named("strides", n.i64s(w->strides))});
}

LogicalResult importConvTranspose(NodeImporter &n) {
  if (failed(n.checkAttributes({"auto_pad", "dilations", "group", "kernel_shape",
                                "output_padding", "output_shape", "pads", "strides"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0), wv = n.requiredInput(1);
  if (failed(x) || failed(wv))
    return failure();
  auto xt = dyn_cast<RankedTensorType>(n.inputType(0));
  auto wt = dyn_cast<RankedTensorType>(n.inputType(1));
  if (!xt || !wt || xt.getRank() < 3 || !xt.hasStaticShape() || !wt.hasStaticShape())
    return n.error() << "needs statically shaped X and W";
  if (wt.getRank() != xt.getRank())
    return n.error() << "W " << wt << " must have the rank of X " << xt
                     << " (C, M/group, kernel...)";
  int64_t spatial = xt.getRank() - 2;
  FailureOr<SmallVector<int64_t>> k = n.getInts("kernel_shape", wt.getShape().drop_front(2));
  FailureOr<SmallVector<int64_t>> s = n.getInts("strides", SmallVector<int64_t>(spatial, 1));
  FailureOr<SmallVector<int64_t>> d = n.getInts("dilations", SmallVector<int64_t>(spatial, 1));
  FailureOr<SmallVector<int64_t>> p = n.getInts("pads", SmallVector<int64_t>(2 * spatial, 0));
  FailureOr<SmallVector<int64_t>> op = n.getInts("output_padding", SmallVector<int64_t>(spatial, 0));
  FailureOr<SmallVector<int64_t>> os = n.getInts("output_shape");
  FailureOr<std::string> autoPad = n.getString("auto_pad", "NOTSET");
  FailureOr<int64_t> group = n.getInt("group", 1);
  if (failed(k) || failed(s) || failed(d) || failed(p) || failed(op) || failed(os) ||
      failed(autoPad) || failed(group))
    return failure();
  if ((int64_t)s->size() != spatial || (int64_t)d->size() != spatial ||
      (int64_t)op->size() != spatial || (int64_t)p->size() != 2 * spatial)
    return n.error() << "window attributes do not match " << spatial << " spatial dimensions";
  SmallVector<int64_t> pads = *p;
  bool same = *autoPad == "SAME_UPPER" || *autoPad == "SAME_LOWER";
  if (!os->empty() || same) {
    for (int64_t i = 0; i < spatial; ++i) {
      int64_t in = xt.getDimSize(i + 2);
      int64_t target = !os->empty() ? (*os)[os->size() - spatial + i] : in * (*s)[i];
      int64_t total = (*s)[i] * (in - 1) + (*op)[i] + ((*k)[i] - 1) * (*d)[i] + 1 - target;
      if (total < 0) {
        // A requested output longer than the full transposed convolution:
        // the extra positions are output padding at the end.
        (*op)[i] -= total;
        total = 0;
      }
      bool lower = *autoPad == "SAME_LOWER";
      pads[i] = lower ? total - total / 2 : total / 2;
      pads[i + spatial] = total - pads[i];
    }
  }
  return emit<graph::ConvTransposeOp>(
      n, {*x, *wv, n.input(2)},
      {n.named("dilations", n.i64s(*d)), n.named("group", n.i64(*group)),
       n.named("output_padding", n.i64s(*op)), n.named("pads", n.i64s(pads)),
       n.named("strides", n.i64s(*s))});
}

template <typename OpTy>
LogicalResult importPool(NodeImporter &n, bool isMax) {
  SmallVector<StringRef> known = {"auto_pad", "ceil_mode", "dilations", "kernel_shape",
                                  "pads", "strides"};
  known.push_back(isMax ? "storage_order" : "count_include_pad");
  if (failed(n.checkAttributes(known)))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(x))
    return failure();
  auto xt = dyn_cast<RankedTensorType>(n.inputType(0));
  if (!xt || xt.getRank() < 3)
    return n.error() << "needs a ranked input (N, C, spatial...)";
  if (!n.attr("kernel_shape"))
    return n.error() << "missing attribute 'kernel_shape'";
  int64_t spatial = xt.getRank() - 2;
  FailureOr<Window> w = readWindow(n, spatial, xt.getShape().drop_front(2), {});
  FailureOr<int64_t> ceil = n.getInt("ceil_mode", 0);
  FailureOr<int64_t> cip = n.getInt("count_include_pad", 0);
  if (failed(w) || failed(ceil) || failed(cip))
    return failure();
  SmallVector<NamedAttribute> attrs = {
      n.named("kernel_shape", n.i64s(w->kernel)), n.named("pads", n.i64s(w->pads)),
      n.named("strides", n.i64s(w->strides)), n.named("dilations", n.i64s(w->dilations)),
      n.named("ceil_mode", n.i64(*ceil))};
  if (!isMax)
    attrs.push_back(n.named("count_include_pad", n.i64(*cip)));
  return emit<OpTy>(n, *x, attrs);
}

template <typename OpTy>
LogicalResult importGlobalPool(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  return failed(x) ? failure() : emit<OpTy>(n, *x);
}

LogicalResult importBatchNorm(NodeImporter &n) {
  if (failed(n.checkAttributes({"epsilon", "momentum", "training_mode", "spatial",
                                "is_test", "consumed_inputs"})))
    return failure();
  FailureOr<float> eps = n.getFloat("epsilon", 1e-5f), mom = n.getFloat("momentum", 0.9f);
  FailureOr<int64_t> training = n.getInt("training_mode", 0), spatial = n.getInt("spatial", 1),
                     isTest = n.getInt("is_test", 0);
  if (failed(eps) || failed(mom) || failed(training) || failed(spatial) || failed(isTest))
    return failure();
  // Before opset 7, is_test = 0 (the default) asks for batch statistics when
  // the node has the running-statistics outputs.
  if (n.opsetVersion() < 7 && !*isTest && n.numUsedOutputs() > 1)
    *training = 1;
  if (*spatial != 1)
    return n.error() << "spatial = 0 is not supported";
  SmallVector<Value> in;
  for (size_t i = 0; i < 5; ++i) {
    FailureOr<Value> v = n.requiredInput(i);
    if (failed(v))
      return failure();
    in.push_back(*v);
  }
  SmallVector<NamedAttribute> attrs = {n.named("epsilon", n.f32(*eps)),
                                       n.named("momentum", n.f32(*mom))};
  if (*training == 0)
    return emit<graph::BatchNormalizationOp>(n, in, attrs);
  // Training mode (PyTorch's TrainingMode.TRAINING export): batch statistics,
  // and the running averages as outputs 1 and 2. The training-step builder
  // stores those back into the variables the node read. Before opset 14,
  // outputs 3 and 4 were the saved mean and variance: only the mean is ours.
  if (n.proto().output_size() > 4 && !n.proto().output(4).empty())
    return n.error() << "training_mode: the saved-variance output (5th) is not supported";
  FailureOr<Values> r = n.create<graph::BatchNormalizationTrainingOp>(in, attrs);
  if (failed(r))
    return failure();
  return n.setResults({(*r)[0], (*r)[3], (*r)[4], (*r)[1]});
}

/// LayerNormalization's optional Mean and InvStdDev outputs, spelled with
/// reductions over the dims from `axis` (kept as 1).
FailureOr<Values> layerNormStats(NodeImporter &n, Value x, int64_t axis, float eps) {
  auto xt = dyn_cast<RankedTensorType>(x.getType());
  if (!xt)
    return n.error() << "Mean/InvStdDev outputs need a ranked input";
  FailureOr<int64_t> a = graph::normalizeAxis(n.location(), axis, xt.getRank());
  if (failed(a))
    return failure();
  SmallVector<int64_t> axes;
  for (int64_t i = *a; i < xt.getRank(); ++i)
    axes.push_back(i);
  auto reduceMean = [&](Value v) {
    return n.create<graph::ReduceMeanOp>(
        v, {n.named("axes", n.i64s(axes)), n.named("keepdims", n.i64(1)),
            n.named("noop_with_empty_axes", n.i64(0))});
  };
  FailureOr<Values> mean = reduceMean(x);
  if (failed(mean))
    return failure();
  FailureOr<Values> d = n.create<graph::SubOp>({x, (*mean)[0]});
  if (failed(d))
    return failure();
  FailureOr<Values> sq = n.create<graph::MulOp>({(*d)[0], (*d)[0]});
  if (failed(sq))
    return failure();
  FailureOr<Values> var = reduceMean((*sq)[0]);
  if (failed(var))
    return failure();
  auto scalar = RankedTensorType::get({}, xt.getElementType());
  Value epsV = n.constant(DenseElementsAttr::get(
      scalar, FloatAttr::get(xt.getElementType(), (double)eps)));
  FailureOr<Values> sum = n.create<graph::AddOp>({(*var)[0], epsV});
  if (failed(sum))
    return failure();
  FailureOr<Values> sd = n.create<graph::SqrtOp>((*sum)[0]);
  if (failed(sd))
    return failure();
  FailureOr<Values> inv = n.create<graph::ReciprocalOp>((*sd)[0]);
  if (failed(inv))
    return failure();
  return Values{(*mean)[0], (*inv)[0]};
}

LogicalResult importLayerNorm(NodeImporter &n) {
  if (failed(n.checkAttributes({"axis", "epsilon", "stash_type"})))
    return failure();
  FailureOr<int64_t> axis = n.getInt("axis", -1);
  FailureOr<float> eps = n.getFloat("epsilon", 1e-5f);
  FailureOr<Value> x = n.requiredInput(0), scale = n.requiredInput(1);
  if (failed(axis) || failed(eps) || failed(x) || failed(scale))
    return failure();
  FailureOr<Values> y = n.create<graph::LayerNormalizationOp>(
      {*x, *scale, n.input(2)},
      {n.named("axis", n.i64(*axis)), n.named("epsilon", n.f32(*eps))});
  if (failed(y))
    return failure();
  if (n.numUsedOutputs() < 2)
    return n.setResults(*y);
  FailureOr<Values> stats = layerNormStats(n, *x, *axis, *eps);
  if (failed(stats))
    return failure();
  return n.setResults({(*y)[0], (*stats)[0], (*stats)[1]});
}

/// RMSNormalization (opset 23): one output; stash_type is kept for export.
LogicalResult importRMSNorm(NodeImporter &n) {
  if (failed(n.checkAttributes({"axis", "epsilon", "stash_type"})))
    return failure();
  FailureOr<int64_t> axis = n.getInt("axis", -1);
  FailureOr<int64_t> stash = n.getInt("stash_type", 1);
  FailureOr<float> eps = n.getFloat("epsilon", 1e-5f);
  FailureOr<Value> x = n.requiredInput(0), scale = n.requiredInput(1);
  if (failed(axis) || failed(stash) || failed(eps) || failed(x) || failed(scale))
    return failure();
  return emit<graph::RMSNormalizationOp>(
      n, {*x, *scale},
      {n.named("axis", n.i64(*axis)), n.named("epsilon", n.f32(*eps)),
       n.named("stash_type", n.i64(*stash))});
}

LogicalResult importInstanceNorm(NodeImporter &n) {
  if (failed(n.checkAttributes({"epsilon", "consumed_inputs"})))
    return failure();
  FailureOr<float> eps = n.getFloat("epsilon", 1e-5f);
  FailureOr<Value> x = n.requiredInput(0), s = n.requiredInput(1), b = n.requiredInput(2);
  if (failed(eps) || failed(x) || failed(s) || failed(b))
    return failure();
  return emit<graph::InstanceNormalizationOp>(n, {*x, *s, *b},
                                              {n.named("epsilon", n.f32(*eps))});
}

/// Repeats a per-group parameter [G] to per-channel [C] (opset 18 form).
FailureOr<Value> perGroupToPerChannel(NodeImporter &n, Value p, int64_t groups,
                                      int64_t channels) {
  auto t = dyn_cast<RankedTensorType>(p.getType());
  if (!t || t.getRank() != 1 || t.getDimSize(0) == channels)
    return p;
  if (t.getDimSize(0) != groups || channels % groups != 0)
    return n.error() << "scale/bias must have num_groups or channel entries";
  FailureOr<Values> r = n.create<graph::ReshapeOp>(
      p, {n.named("shape", n.i64s({groups, 1})), n.named("allowzero", n.i64(0))});
  if (failed(r))
    return failure();
  r = n.create<graph::ExpandOp>((*r)[0],
                                {n.named("shape", n.i64s({groups, channels / groups}))});
  if (failed(r))
    return failure();
  r = n.create<graph::ReshapeOp>(
      (*r)[0], {n.named("shape", n.i64s({channels})), n.named("allowzero", n.i64(0))});
  return failed(r) ? FailureOr<Value>(failure()) : FailureOr<Value>((*r)[0]);
}

LogicalResult importGroupNorm(NodeImporter &n) {
  if (failed(n.checkAttributes({"epsilon", "num_groups", "stash_type"})))
    return failure();
  FailureOr<float> eps = n.getFloat("epsilon", 1e-5f);
  FailureOr<std::optional<int64_t>> g = n.getOptionalInt("num_groups");
  FailureOr<Value> x = n.requiredInput(0), s = n.requiredInput(1), b = n.requiredInput(2);
  if (failed(eps) || failed(g) || failed(x) || failed(s) || failed(b))
    return failure();
  if (!*g)
    return n.error() << "missing attribute 'num_groups'";
  auto xt = dyn_cast<RankedTensorType>(n.inputType(0));
  if (!xt || xt.getRank() < 2 || xt.isDynamicDim(1))
    return n.error() << "needs a known channel count";
  FailureOr<Value> sc = perGroupToPerChannel(n, *s, **g, xt.getDimSize(1));
  FailureOr<Value> bc = perGroupToPerChannel(n, *b, **g, xt.getDimSize(1));
  if (failed(sc) || failed(bc))
    return failure();
  return emit<graph::GroupNormalizationOp>(
      n, {*x, *sc, *bc}, {n.named("epsilon", n.f32(*eps)), n.named("num_groups", n.i64(**g))});
}

LogicalResult importLRN(NodeImporter &n) {
  if (failed(n.checkAttributes({"alpha", "beta", "bias", "size"})))
    return failure();
  FailureOr<float> a = n.getFloat("alpha", 1e-4f), be = n.getFloat("beta", 0.75f),
                   bias = n.getFloat("bias", 1.0f);
  FailureOr<std::optional<int64_t>> size = n.getOptionalInt("size");
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(a) || failed(be) || failed(bias) || failed(size) || failed(x))
    return failure();
  if (!*size || **size <= 0)
    return n.error() << "attribute 'size' must be a positive int";
  return emit<graph::LRNOp>(n, *x,
                            {n.named("alpha", n.f32(*a)), n.named("beta", n.f32(*be)),
                             n.named("bias", n.f32(*bias)), n.named("size", n.i64(**size))});
}

LogicalResult importLpNorm(NodeImporter &n) {
  FailureOr<int64_t> axis = n.getInt("axis", -1), p = n.getInt("p", 2);
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(axis) || failed(p) || failed(x))
    return failure();
  if (*p != 1 && *p != 2)
    return n.error() << "p must be 1 or 2";
  return emit<graph::LpNormalizationOp>(n, *x, {n.named("axis", n.i64(*axis)),
                                                n.named("p", n.i64(*p))});
}

LogicalResult importMVN(NodeImporter &n) {
  FailureOr<SmallVector<int64_t>> axes = n.getInts("axes", {0, 2, 3});
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(axes) || failed(x))
    return failure();
  return emit<graph::MeanVarianceNormalizationOp>(n, *x, {n.named("axes", n.i64s(*axes))});
}

/// Softmax, LogSoftmax, Hardmax: opset >= 13 acts on one axis; before, on the
/// input flattened to 2-D at `axis` (default 1).
template <typename OpTy>
LogicalResult importSoftmaxLike(NodeImporter &n) {
  if (failed(n.checkAttributes({"axis"})))
    return failure();
  bool legacy = n.opsetVersion() < 13;
  FailureOr<int64_t> axis = n.getInt("axis", legacy ? 1 : -1);
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(axis) || failed(x))
    return failure();
  auto xt = dyn_cast<RankedTensorType>(n.inputType(0));
  if (!legacy || (xt && (*axis == xt.getRank() - 1 || *axis == -1)))
    return emit<OpTy>(n, *x, {n.named("axis", n.i64(*axis))});
  if (!xt || !xt.hasStaticShape())
    return n.error() << "opset < 13 with axis != last needs a static input shape";
  FailureOr<Values> flat = n.create<graph::FlattenOp>(*x, {n.named("axis", n.i64(*axis))});
  if (failed(flat))
    return failure();
  FailureOr<Values> y = n.create<OpTy>((*flat)[0], {n.named("axis", n.i64(1))});
  if (failed(y))
    return failure();
  FailureOr<Values> back =
      n.create<graph::ReshapeOp>((*y)[0], {n.named("shape", n.i64s(xt.getShape())),
                                           n.named("allowzero", n.i64(0))});
  return failed(back) ? failure() : n.setResults(*back);
}

template <typename OpTy>
LogicalResult importLoss(NodeImporter &n) {
  if (failed(n.checkAttributes({"reduction", "ignore_index"})))
    return failure();
  FailureOr<std::string> red = n.getString("reduction", "mean");
  FailureOr<std::optional<int64_t>> ignore = n.getOptionalInt("ignore_index");
  FailureOr<Value> s = n.requiredInput(0), l = n.requiredInput(1);
  if (failed(red) || failed(ignore) || failed(s) || failed(l))
    return failure();
  std::optional<graph::LossReduction> kind = graph::symbolizeLossReduction(*red);
  if (!kind)
    return n.error() << "reduction must be none, sum or mean, got '" << *red << "'";
  SmallVector<NamedAttribute> attrs = {
      n.named("reduction", graph::LossReductionAttr::get(n.ctx(), *kind))};
  if (*ignore)
    attrs.push_back(n.named("ignore_index", n.i64(**ignore)));
  FailureOr<Values> loss = n.create<OpTy>({*s, *l, n.input(2)}, attrs);
  if (failed(loss))
    return failure();
  // The graph op gives 16-bit scores an f32 loss (what training wants); ONNX
  // declares the loss in the scores' type, so narrow it to that.
  Type scoresElt = cast<ShapedType>(s->getType()).getElementType();
  if (cast<ShapedType>((*loss)[0].getType()).getElementType() != scoresElt) {
    loss = n.create<graph::CastOp>((*loss)[0], {n.named("to", TypeAttr::get(scoresElt))});
    if (failed(loss))
      return failure();
  }
  if (n.numUsedOutputs() < 2)
    return n.setResults(*loss);
  // SoftmaxCrossEntropyLoss's log_prob output: log-softmax over the classes.
  FailureOr<Values> logProb =
      n.create<graph::LogSoftmaxOp>(*s, {n.named("axis", n.i64(1))});
  if (failed(logProb))
    return failure();
  return n.setResults({(*loss)[0], (*logProb)[0]});
}

} // namespace

void strait::onnximport::registerNNImporters(OpRegistry &r) {
  using namespace graph;
  r.add("MatMul", 1, importMatMul);
  r.add("Gemm", 1, importGemm);
  r.add("Einsum", 12, importEinsum);
  r.add("Conv", 1, importConv);
  r.add("ConvTranspose", 1, importConvTranspose);
  r.add("MaxPool", 1, [](NodeImporter &n) { return importPool<MaxPoolOp>(n, true); });
  r.add("AveragePool", 1, [](NodeImporter &n) { return importPool<AveragePoolOp>(n, false); });
  r.add("GlobalAveragePool", 1, importGlobalPool<GlobalAveragePoolOp>);
  r.add("GlobalMaxPool", 1, importGlobalPool<GlobalMaxPoolOp>);
  r.add("BatchNormalization", 1, importBatchNorm);
  r.add("LayerNormalization", 17, importLayerNorm);
  r.add("RMSNormalization", 23, importRMSNorm);
  r.add("InstanceNormalization", 1, importInstanceNorm);
  r.add("GroupNormalization", 18, importGroupNorm);
  r.add("LRN", 1, importLRN);
  r.add("LpNormalization", 1, importLpNorm);
  r.add("MeanVarianceNormalization", 9, importMVN);
  r.add("Softmax", 1, importSoftmaxLike<SoftmaxOp>);
  r.add("LogSoftmax", 1, importSoftmaxLike<LogSoftmaxOp>);
  r.add("Hardmax", 1, importSoftmaxLike<HardmaxOp>);
  r.add("SoftmaxCrossEntropyLoss", 12, importLoss<SoftmaxCrossEntropyLossOp>);
  r.add("NegativeLogLikelihoodLoss", 12, importLoss<NegativeLogLikelihoodLossOp>);
}
