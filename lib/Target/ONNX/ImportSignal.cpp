//===- ImportSignal.cpp - DFT, STFT, MelWeightMatrix as constant products -===//
//
// With static shapes a discrete Fourier transform is a product with a
// constant matrix: the signal axis moves next to the real/imaginary axis,
// the two are flattened and one MatMul with the (cos, sin) matrix maps them
// to the (real, imaginary) bins. STFT gathers its frames with constant
// indices, multiplies them by the window and does the same product.
// MelWeightMatrix is computed at import from its constant inputs. Autodiff
// and the runtimes see MatMul, Gather, Mul, Reshape and Transpose only.
//
//===----------------------------------------------------------------------===//

#include "NodeImporter.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"

#include <cmath>

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

namespace {

/// A dense attribute of float type `type` holding `values` (rounded).
DenseElementsAttr floatsAttr(RankedTensorType type, ArrayRef<double> values) {
  Type elt = type.getElementType();
  if (elt.isF64())
    return DenseElementsAttr::get(type, values);
  if (elt.isF32()) {
    SmallVector<float> f(values.begin(), values.end());
    return DenseElementsAttr::get(type, ArrayRef<float>(f));
  }
  const llvm::fltSemantics &sem = cast<FloatType>(elt).getFloatSemantics();
  SmallVector<APFloat> f;
  for (double v : values) {
    APFloat a(v);
    bool lost;
    a.convert(sem, APFloat::rmNearestTiesToEven, &lost);
    f.push_back(a);
  }
  return DenseElementsAttr::get(type, f);
}

/// A constant scalar input as a double: an integer or float constant, or a
/// float initializer read at its stored value (float initializers import as
/// variables; these inputs are parameters of the computation, not weights).
FailureOr<double> scalarInput(NodeImporter &n, size_t i, StringRef what) {
  Value v = n.input(i);
  if (!v)
    return n.error() << "missing input '" << what << "'";
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || type.getNumElements() != 1)
    return n.error() << "input '" << what << "' must be a scalar, got " << v.getType();
  ElementsAttr value;
  if (auto read = v.getDefiningOp<graph::ReadVariableOp>()) {
    auto var = SymbolTable::lookupNearestSymbolFrom<graph::VariableOp>(read,
                                                                      read.getVariableAttr());
    if (var && var.getValue())
      value = *var.getValue();
  } else {
    DenseElementsAttr dense;
    if (matchPattern(v, m_Constant(&dense)))
      value = dense;
  }
  if (auto resource = dyn_cast_or_null<DenseResourceElementsAttr>(value)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    Type elt = type.getElementType();
    if (blob && elt.isF32() && blob->getData().size() == 4) {
      float f;
      std::memcpy(&f, blob->getData().data(), 4);
      return static_cast<double>(f);
    }
    if (blob && elt.isF64() && blob->getData().size() == 8) {
      double d;
      std::memcpy(&d, blob->getData().data(), 8);
      return d;
    }
    value = nullptr;
  }
  auto dense = dyn_cast_or_null<DenseElementsAttr>(value);
  if (!dense)
    return n.error() << "input '" << what << "' (" << n.proto().input(i)
                     << ") must be constant once shapes are static; fix dynamic "
                        "dimensions with --input-shape";
  if (isa<IntegerType>(dense.getElementType()))
    return static_cast<double>((*dense.getValues<APInt>().begin()).getSExtValue());
  return (*dense.getValues<APFloat>().begin()).convertToDouble();
}

/// An optional constant integer scalar input.
FailureOr<std::optional<int64_t>> optionalIntInput(NodeImporter &n, size_t i, StringRef what) {
  if (!n.input(i))
    return std::optional<int64_t>();
  FailureOr<SmallVector<int64_t>> v = n.constantInts(i, what);
  if (failed(v))
    return failure();
  if (v->size() != 1)
    return n.error() << "input '" << what << "' must be a scalar";
  return std::optional<int64_t>((*v)[0]);
}

/// The matrix of a DFT of length `length` over `in` input points with
/// `channels` (1 real, 2 complex) per point: rows (point, channel), columns
/// (bin, real/imaginary). Inverse transforms scale by 1/length; the
/// inverse one-sided transform is the real inverse of a one-sided spectrum
/// (numpy's irfft), one output channel.
struct Spectrum {
  int64_t bins, outChannels;
  std::vector<double> matrix; // [in * channels, bins * outChannels]
};

/// Entries of the constant a DFT or mel matrix may have (2^27: 512 MiB in f32).
constexpr int64_t kMaxMatrix = int64_t(1) << 27;

/// Fails when the DFT matrix of `in` points and `length` would be too large.
LogicalResult checkMatrixSize(NodeImporter &n, int64_t in, int64_t channels, int64_t length) {
  if (length > kMaxMatrix || in * channels > kMaxMatrix / (2 * length))
    return n.error() << "the DFT matrix of " << in << " points and length " << length
                     << " would exceed " << kMaxMatrix << " entries";
  return success();
}

Spectrum dftMatrix(int64_t in, int64_t channels, int64_t length, bool inverse, bool onesided) {
  Spectrum s;
  bool real = inverse && onesided;
  s.bins = real ? length : (onesided ? length / 2 + 1 : length);
  s.outChannels = real ? 1 : 2;
  int64_t cols = s.bins * s.outChannels;
  s.matrix.assign(in * channels * cols, 0.0);
  double sign = inverse ? 1.0 : -1.0, scale = inverse ? 1.0 / length : 1.0;
  auto angle = [&](int64_t k, int64_t t) {
    return 2.0 * M_PI * static_cast<double>((k * t) % length) / static_cast<double>(length);
  };
  if (real) {
    // x[t] = (1/L) sum_k w_k (Re X_k cos - Im X_k sin), w = 1 at 0 and L/2.
    for (int64_t k = 0; k < std::min(in, length / 2 + 1); ++k) {
      double w = (k == 0 || 2 * k == length) ? 1.0 : 2.0;
      for (int64_t t = 0; t < length; ++t) {
        double a = angle(k, t);
        s.matrix[(k * channels) * cols + t] = w * std::cos(a) * scale;
        if (channels == 2)
          s.matrix[(k * channels + 1) * cols + t] = -w * std::sin(a) * scale;
      }
    }
    return s;
  }
  // (a + ib)(cos + i sign sin) = a cos - sign b sin + i (b cos + sign a sin).
  for (int64_t t = 0; t < std::min(in, length); ++t)
    for (int64_t k = 0; k < s.bins; ++k) {
      double a = angle(k, t), c = std::cos(a) * scale, sn = std::sin(a) * scale;
      s.matrix[(t * channels) * cols + 2 * k] = c;
      s.matrix[(t * channels) * cols + 2 * k + 1] = sign * sn;
      if (channels == 2) {
        s.matrix[(t * channels + 1) * cols + 2 * k] = -sign * sn;
        s.matrix[(t * channels + 1) * cols + 2 * k + 1] = c;
      }
    }
  return s;
}

/// x [..., in, channels] -> [..., bins, outChannels] by the DFT `s`.
FailureOr<Value> applySpectrum(NodeImporter &n, Value x, const Spectrum &s) {
  auto type = cast<RankedTensorType>(x.getType());
  ArrayRef<int64_t> shape = type.getShape();
  int64_t rows = shape[shape.size() - 2] * shape.back();
  SmallVector<int64_t> flat(shape.drop_back(2));
  flat.push_back(rows);
  FailureOr<Values> x2 = n.create<graph::ReshapeOp>(x, {n.named("shape", n.i64s(flat))});
  if (failed(x2))
    return failure();
  auto mType = RankedTensorType::get({rows, s.bins * s.outChannels}, type.getElementType());
  Value m = n.constant(floatsAttr(mType, s.matrix));
  FailureOr<Values> y = n.create<graph::MatMulOp>({(*x2)[0], m});
  if (failed(y))
    return failure();
  SmallVector<int64_t> out(shape.drop_back(2));
  out.append({s.bins, s.outChannels});
  FailureOr<Values> r = n.create<graph::ReshapeOp>((*y)[0], {n.named("shape", n.i64s(out))});
  return failed(r) ? FailureOr<Value>(failure()) : FailureOr<Value>((*r)[0]);
}

/// Fails unless input `i` is a static float tensor of rank >= `rank` whose
/// last dimension (real, or real and imaginary) is 1 or 2.
FailureOr<RankedTensorType> signalType(NodeImporter &n, size_t i, StringRef what,
                                       int64_t rank) {
  auto t = dyn_cast_or_null<RankedTensorType>(n.inputType(i));
  if (!t || !t.hasStaticShape() || t.getRank() < rank || !isa<FloatType>(t.getElementType()))
    return n.error() << "input '" << what << "' must be a static float tensor of rank >= "
                     << rank << ", got " << n.inputType(i);
  if (llvm::is_contained(t.getShape(), 0))
    return n.error() << "input '" << what << "' has an empty dimension: " << t;
  if (t.getShape().back() != 1 && t.getShape().back() != 2)
    return n.error() << "input '" << what << "' must end in a dimension of 1 (real) or 2 "
                        "(complex), got "
                     << t;
  return t;
}

LogicalResult importDFT(NodeImporter &n) {
  bool axisInput = n.opsetVersion() >= 20;
  SmallVector<StringRef> known = {"inverse", "onesided"};
  if (!axisInput)
    known.push_back("axis");
  if (failed(n.checkAttributes(known)))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(x))
    return failure();
  FailureOr<RankedTensorType> xt = signalType(n, 0, "input", 2);
  FailureOr<int64_t> inverse = n.getInt("inverse", 0), onesided = n.getInt("onesided", 0);
  FailureOr<int64_t> axisAttr = n.getInt("axis", 1);
  FailureOr<std::optional<int64_t>> length = optionalIntInput(n, 1, "dft_length");
  FailureOr<std::optional<int64_t>> axisIn =
      axisInput ? optionalIntInput(n, 2, "axis") : std::optional<int64_t>();
  if (failed(xt) || failed(inverse) || failed(onesided) || failed(axisAttr) ||
      failed(length) || failed(axisIn))
    return failure();
  int64_t rank = xt->getRank();
  int64_t axis = axisInput ? axisIn->value_or(-2) : *axisAttr;
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank - 1)
    return n.error() << "axis " << (axisInput ? axisIn->value_or(-2) : *axisAttr)
                     << " must name a signal dimension of the rank-" << rank
                     << " input, not the last (real/imaginary) one";
  int64_t in = xt->getDimSize(axis), channels = xt->getShape().back();
  bool real = *inverse && *onesided;
  int64_t len = length->value_or(real ? 2 * (in - 1) : in);
  if (len < 1)
    return n.error() << "dft_length must be positive, got " << len;
  if (failed(checkMatrixSize(n, in, channels, len)))
    return failure();
  // Move the signal axis next to the last one, transform, move it back.
  SmallVector<int64_t> perm;
  for (int64_t d = 0; d < rank - 1; ++d)
    if (d != axis)
      perm.push_back(d);
  perm.append({axis, rank - 1});
  bool moved = axis != rank - 2;
  Value v = *x;
  if (moved) {
    FailureOr<Values> t = n.create<graph::TransposeOp>(v, {n.named("perm", n.i64s(perm))});
    if (failed(t))
      return failure();
    v = (*t)[0];
  }
  FailureOr<Value> y = applySpectrum(n, v, dftMatrix(in, channels, len, *inverse, *onesided));
  if (failed(y))
    return failure();
  if (!moved)
    return n.setResults(*y);
  SmallVector<int64_t> back(rank);
  for (int64_t d = 0; d < rank; ++d)
    back[perm[d]] = d;
  return emit<graph::TransposeOp>(n, *y, {n.named("perm", n.i64s(back))});
}

LogicalResult importSTFT(NodeImporter &n) {
  if (failed(n.checkAttributes({"onesided"})))
    return failure();
  FailureOr<Value> signal = n.requiredInput(0);
  FailureOr<RankedTensorType> st = signalType(n, 0, "signal", 3);
  FailureOr<int64_t> onesided = n.getInt("onesided", 1);
  FailureOr<std::optional<int64_t>> step = optionalIntInput(n, 1, "frame_step");
  FailureOr<std::optional<int64_t>> frameLength = optionalIntInput(n, 3, "frame_length");
  if (failed(signal) || failed(st) || failed(onesided) || failed(step) || failed(frameLength))
    return failure();
  if (st->getRank() != 3)
    return n.error() << "input 'signal' must be [batch, signal_length, 1 or 2], got " << *st;
  if (!*step || **step < 1)
    return n.error() << "input 'frame_step' must be a positive constant";
  int64_t length = st->getDimSize(1), channels = st->getDimSize(2);
  Value window = n.input(2);
  int64_t frame = frameLength->value_or(length);
  if (window) {
    auto wt = dyn_cast<RankedTensorType>(window.getType());
    if (!wt || wt.getRank() != 1 || !wt.hasStaticShape() ||
        wt.getElementType() != st->getElementType())
      return n.error() << "input 'window' must be a static 1-D tensor of the signal's type, got "
                       << window.getType();
    if (*frameLength && **frameLength != wt.getDimSize(0))
      return n.error() << "input 'frame_length' (" << **frameLength
                       << ") differs from the window's length " << wt.getDimSize(0);
    frame = wt.getDimSize(0);
  }
  if (frame < 1 || frame > length)
    return n.error() << "frame length " << frame << " must be in [1, signal_length "
                     << length << "]";
  int64_t frames = 1 + (length - frame) / **step;
  if (failed(checkMatrixSize(n, frame, channels, frame)))
    return failure();
  if (frames > kMaxMatrix / frame)
    return n.error() << frames << " frames of " << frame << " samples are too many";
  SmallVector<int64_t> idx;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t t = 0; t < frame; ++t)
      idx.push_back(f * **step + t);
  auto idxType = RankedTensorType::get({frames, frame}, n.b().getI64Type());
  Value indices = n.constant(DenseElementsAttr::get(idxType, ArrayRef<int64_t>(idx)));
  FailureOr<Values> gathered =
      n.create<graph::GatherOp>({*signal, indices}, {n.named("axis", n.i64(1))});
  if (failed(gathered))
    return failure();
  Value framesV = (*gathered)[0]; // [batch, frames, frame, channels]
  if (window) {
    FailureOr<Values> w =
        n.create<graph::ReshapeOp>(window, {n.named("shape", n.i64s({frame, 1}))});
    if (failed(w))
      return failure();
    FailureOr<Values> m = n.create<graph::MulOp>({framesV, (*w)[0]});
    if (failed(m))
      return failure();
    framesV = (*m)[0];
  }
  FailureOr<Value> y =
      applySpectrum(n, framesV, dftMatrix(frame, channels, frame, false, *onesided));
  return failed(y) ? failure() : n.setResults(*y);
}

/// The ONNX reference's triangular mel filters (onnx/reference/ops/
/// op_mel_weight_matrix.py): [dft_length / 2 + 1, num_mel_bins].
std::vector<double> melWeights(int64_t mels, int64_t dftLength, double rate, double low,
                               double high) {
  int64_t bins = dftLength / 2 + 1;
  auto toMel = [](double hz) { return 2595.0 * std::log1p(hz / 700.0) / std::log(10.0); };
  double lowMel = toMel(low), step = (toMel(high) - lowMel) / static_cast<double>(mels + 2);
  std::vector<int64_t> points;
  for (int64_t i = 0; i < mels + 2; ++i) {
    double hz = 700.0 * std::expm1((i * step + lowMel) / 2595.0 * std::log(10.0));
    points.push_back(static_cast<int64_t>(std::floor((dftLength + 1) * hz / rate)));
  }
  std::vector<double> out(bins * mels, 0.0);
  auto set = [&](int64_t j, int64_t i, double v) {
    if (j >= 0 && j < bins)
      out[j * mels + i] = v;
  };
  for (int64_t i = 0; i < mels; ++i) {
    int64_t lo = points[i], center = points[i + 1], hi = points[i + 2];
    if (center == lo)
      set(center, i, 1.0);
    else
      for (int64_t j = lo; j <= center; ++j)
        set(j, i, static_cast<double>(j - lo) / static_cast<double>(center - lo));
    if (hi > center)
      for (int64_t j = center; j < hi; ++j)
        set(j, i, static_cast<double>(hi - j) / static_cast<double>(hi - center));
  }
  return out;
}

LogicalResult importMelWeightMatrix(NodeImporter &n) {
  if (failed(n.checkAttributes({"output_datatype"})))
    return failure();
  FailureOr<int64_t> dtype = n.getInt("output_datatype", onnx::TensorProto::FLOAT);
  if (failed(dtype))
    return failure();
  // num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz.
  static constexpr StringLiteral names[] = {"num_mel_bins", "dft_length", "sample_rate",
                                            "lower_edge_hertz", "upper_edge_hertz"};
  double in[5];
  for (size_t i = 0; i < 5; ++i) {
    FailureOr<double> v = scalarInput(n, i, names[i]);
    if (failed(v))
      return failure();
    in[i] = *v;
  }
  double *mels = &in[0], *dft = &in[1], *rate = &in[2], *low = &in[3], *high = &in[4];
  Type elt = elementType(n.ctx(), static_cast<int32_t>(*dtype));
  if (!elt || !isa<FloatType>(elt))
    return n.error() << "attribute 'output_datatype' must name a float type, got "
                     << dataTypeName(static_cast<int32_t>(*dtype));
  if (*mels < 1 || *dft < 1 || *rate <= 0 || *low < 0 || *high <= *low)
    return n.error() << "needs num_mel_bins, dft_length, sample_rate > 0 and 0 <= "
                        "lower_edge_hertz < upper_edge_hertz";
  if (*mels * (*dft / 2 + 1) > kMaxMatrix)
    return n.error() << "a " << *dft / 2 + 1 << " x " << *mels << " mel matrix is too large";
  auto m = static_cast<int64_t>(*mels), d = static_cast<int64_t>(*dft);
  auto type = RankedTensorType::get({d / 2 + 1, m}, elt);
  return n.setResults(n.constant(floatsAttr(type, melWeights(m, d, *rate, *low, *high))));
}

} // namespace

void strait::onnximport::registerSignalImporters(OpRegistry &r) {
  r.add("DFT", 17, importDFT); // 20 moves axis from an attribute to input 2
  r.add("DFT", 20, importDFT);
  r.add("STFT", 17, importSTFT);
  r.add("MelWeightMatrix", 17, importMelWeightMatrix);
}
