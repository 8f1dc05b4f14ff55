//===- ShapeFunctions.cpp - Shape functions of graph ops ------------------===//

#include "strait/Dialect/Graph/ShapeFunctions.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace strait::graph;

static constexpr int64_t kDyn = ShapedType::kDynamic;

static std::string shapeStr(ArrayRef<int64_t> s) {
  std::string out = "[";
  for (auto [i, d] : llvm::enumerate(s)) {
    if (i)
      out += ",";
    out += d == kDyn ? "?" : std::to_string(d);
  }
  return out + "]";
}

FailureOr<Shape> strait::graph::broadcastShapes(OptLoc loc,
                                                ArrayRef<ArrayRef<int64_t>> shapes) {
  size_t rank = 0;
  for (ArrayRef<int64_t> s : shapes)
    rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (ArrayRef<int64_t> s : shapes) {
    size_t off = rank - s.size();
    for (auto [i, d] : llvm::enumerate(s)) {
      int64_t &o = out[off + i];
      if (d == 1)
        continue;
      if (o == 1 || o == d) {
        o = d;
      } else if (d == kDyn) {
        // A dynamic extent broadcasts with a static one only if that is 1,
        // which was handled above; keep the static one (it must match).
      } else if (o == kDyn) {
        o = d;
      } else {
        std::string all;
        for (ArrayRef<int64_t> t : shapes)
          all += shapeStr(t) + " ";
        return emitOptionalError(loc, "operand shapes ", all,
                                 "do not broadcast: dimension ", off + i,
                                 " is ", o, " and ", d);
      }
    }
  }
  return out;
}

FailureOr<int64_t> strait::graph::normalizeAxis(OptLoc loc, int64_t axis,
                                                int64_t rank, StringRef what) {
  if (axis < -rank || axis >= rank)
    return emitOptionalError(loc, what, " ", axis, " is out of range for rank ",
                             rank);
  return axis < 0 ? axis + rank : axis;
}

std::optional<int64_t> strait::graph::numElements(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d == kDyn)
      return std::nullopt;
    n *= d;
  }
  return n;
}

int64_t strait::graph::windowOutputSize(int64_t in, int64_t kernel,
                                        int64_t stride, int64_t dilation,
                                        int64_t padBegin, int64_t padEnd,
                                        bool ceilMode) {
  if (in == kDyn)
    return kDyn;
  int64_t span = (kernel - 1) * dilation + 1;
  int64_t avail = in + padBegin + padEnd - span;
  if (avail < 0)
    return 0;
  int64_t out = (ceilMode ? (avail + stride - 1) / stride : avail / stride) + 1;
  // With ceil mode, the last window must start inside the input or left pad.
  if (ceilMode && (out - 1) * stride >= in + padBegin)
    --out;
  return out;
}

FailureOr<Shape> strait::graph::reshapeShape(OptLoc loc, ArrayRef<int64_t> in,
                                             ArrayRef<int64_t> target,
                                             bool allowZero) {
  Shape out;
  int64_t inferIdx = -1;
  int64_t known = 1;
  bool dynamic = false;
  for (auto [i, d] : llvm::enumerate(target)) {
    int64_t v = d;
    if (d == 0 && !allowZero) {
      if (i >= in.size())
        return emitOptionalError(loc, "reshape: shape[", i,
                                 "] = 0 copies a dimension the input (rank ",
                                 in.size(), ") does not have");
      v = in[i];
    } else if (d == -1) {
      if (inferIdx >= 0)
        return emitOptionalError(loc, "reshape: more than one -1 in shape ",
                                 shapeStr(target));
      inferIdx = i;
    } else if (d < -1) {
      return emitOptionalError(loc, "reshape: invalid dimension ", d);
    }
    if (v == kDyn)
      dynamic = true;
    else if (d != -1)
      known *= v;
    out.push_back(v);
  }
  std::optional<int64_t> total = numElements(in);
  if (inferIdx >= 0) {
    if (!total || dynamic) {
      out[inferIdx] = kDyn;
    } else {
      if (known == 0 || *total % known != 0)
        return emitOptionalError(loc, "reshape: cannot reshape ", shapeStr(in),
                                 " to ", shapeStr(target));
      out[inferIdx] = *total / known;
    }
  } else if (total && !dynamic && *total != known) {
    return emitOptionalError(loc, "reshape: ", shapeStr(in), " (", *total,
                             " elements) cannot become ", shapeStr(out), " (",
                             known, " elements)");
  }
  return out;
}

FailureOr<Shape> strait::graph::matmulShape(OptLoc loc, ArrayRef<int64_t> a,
                                            ArrayRef<int64_t> b) {
  if (a.empty() || b.empty())
    return emitOptionalError(loc, "matmul operands must have rank >= 1");
  Shape sa(a), sb(b);
  bool aVec = sa.size() == 1, bVec = sb.size() == 1;
  if (aVec)
    sa.insert(sa.begin(), 1);
  if (bVec)
    sb.push_back(1);
  int64_t k1 = sa.back(), k2 = sb[sb.size() - 2];
  if (k1 != kDyn && k2 != kDyn && k1 != k2)
    return emitOptionalError(loc, "matmul contraction mismatch: ", shapeStr(a),
                             " x ", shapeStr(b));
  ArrayRef<int64_t> ba(sa.data(), sa.size() - 2), bb(sb.data(), sb.size() - 2);
  FailureOr<Shape> batch = broadcastShapes(loc, {ba, bb});
  if (failed(batch))
    return failure();
  Shape out = *batch;
  if (!aVec)
    out.push_back(sa[sa.size() - 2]);
  if (!bVec)
    out.push_back(sb.back());
  return out;
}

SliceDim strait::graph::clampSlice(int64_t dim, int64_t start, int64_t end,
                                   int64_t step) {
  auto clamp = [](int64_t v, int64_t lo, int64_t hi) {
    return std::min(std::max(v, lo), hi);
  };
  if (start < 0)
    start += dim;
  if (end < 0)
    end += dim;
  if (step > 0) {
    start = clamp(start, 0, dim);
    end = clamp(end, 0, dim);
  } else {
    start = clamp(start, 0, dim - 1);
    end = clamp(end, -1, dim - 1);
  }
  int64_t size = 0;
  if (step > 0 && end > start)
    size = (end - start + step - 1) / step;
  else if (step < 0 && start > end)
    size = (start - end + (-step) - 1) / (-step);
  return {start, end, step, size};
}

FailureOr<Shape> strait::graph::einsumShape(OptLoc loc, StringRef equation,
                                            ArrayRef<ArrayRef<int64_t>> shapes) {
  std::string eq;
  for (char c : equation)
    if (c != ' ')
      eq += c;
  StringRef lhs = eq, rhs;
  bool explicitOut = false;
  if (size_t arrow = eq.find("->"); arrow != std::string::npos) {
    lhs = StringRef(eq).take_front(arrow);
    rhs = StringRef(eq).drop_front(arrow + 2);
    explicitOut = true;
  }
  SmallVector<StringRef> terms;
  lhs.split(terms, ',');
  if (terms.size() != shapes.size())
    return emitOptionalError(loc, "einsum equation '", equation, "' has ",
                             terms.size(), " operands, got ", shapes.size());
  llvm::DenseMap<char, int64_t> extent;
  llvm::DenseMap<char, int> count;
  Shape ellipsis;
  bool sawEllipsis = false;
  for (auto [term, shape] : llvm::zip(terms, shapes)) {
    size_t ell = term.find("...");
    size_t letters = term.size() - (ell == StringRef::npos ? 0 : 3);
    if (letters > shape.size() || (ell == StringRef::npos && letters != shape.size()))
      return emitOptionalError(loc, "einsum term '", term, "' does not match rank ",
                               shape.size());
    size_t ellRank = shape.size() - letters;
    size_t dim = 0;
    for (size_t i = 0; i < term.size(); ++i) {
      if (term.substr(i).starts_with("...")) {
        Shape e(shape.begin() + dim, shape.begin() + dim + ellRank);
        FailureOr<Shape> b = broadcastShapes(loc, {ellipsis, e});
        if (failed(b))
          return failure();
        ellipsis = *b;
        sawEllipsis = true;
        dim += ellRank;
        i += 2;
        continue;
      }
      char c = term[i];
      if (!llvm::isAlpha(c))
        return emitOptionalError(loc, "einsum: bad label '", c, "'");
      int64_t d = shape[dim++];
      auto [it, inserted] = extent.try_emplace(c, d);
      if (!inserted && it->second != d) {
        if (it->second == 1 || it->second == kDyn)
          it->second = d;
        else if (d != 1 && d != kDyn)
          return emitOptionalError(loc, "einsum: label '", c, "' has extents ",
                                   it->second, " and ", d);
      }
      ++count[c];
    }
  }
  Shape out;
  std::string outLabels;
  if (explicitOut) {
    outLabels = rhs.str();
  } else {
    if (sawEllipsis)
      outLabels = "...";
    for (char c = 'A'; c <= 'z'; ++c)
      if (count.lookup(c) == 1)
        outLabels += c;
  }
  for (size_t i = 0; i < outLabels.size(); ++i) {
    if (StringRef(outLabels).substr(i).starts_with("...")) {
      out.append(ellipsis.begin(), ellipsis.end());
      i += 2;
      continue;
    }
    auto it = extent.find(outLabels[i]);
    if (it == extent.end())
      return emitOptionalError(loc, "einsum: output label '", outLabels[i],
                               "' is not in any input");
    out.push_back(it->second);
  }
  return out;
}

LogicalResult strait::graph::inferBroadcast(OptLoc loc, ValueRange operands,
                                            Type elementType,
                                            SmallVectorImpl<Type> &types,
                                            bool checkSameElement) {
  if (operands.empty())
    return emitOptionalError(loc, "expected at least one operand");
  auto first = cast<TensorType>(operands.front().getType());
  Type elt = elementType ? elementType : first.getElementType();
  SmallVector<ArrayRef<int64_t>> shapes;
  for (Value v : operands) {
    auto t = cast<TensorType>(v.getType());
    if (checkSameElement && t.getElementType() != first.getElementType())
      return emitOptionalError(loc, "operand element types differ (",
                               first.getElementType(), " vs ", t.getElementType(), ")");
    if (!t.hasRank()) {
      types.push_back(UnrankedTensorType::get(elt));
      return success();
    }
    shapes.push_back(t.getShape());
  }
  FailureOr<Shape> shape = broadcastShapes(loc, shapes);
  if (failed(shape))
    return failure();
  types.push_back(RankedTensorType::get(*shape, elt));
  return success();
}

LogicalResult strait::graph::inferReduceImpl(OptLoc loc, Type input,
                                             ArrayRef<int64_t> axes,
                                             bool keepDims, bool noopWithEmptyAxes,
                                             SmallVectorImpl<Type> &types) {
  auto t = cast<TensorType>(input);
  if (!t.hasRank()) {
    types.push_back(t);
    return success();
  }
  int64_t rank = t.getRank();
  llvm::SmallVector<bool> reduce(rank, axes.empty() && !noopWithEmptyAxes);
  for (int64_t a : axes) {
    FailureOr<int64_t> n = normalizeAxis(loc, a, rank, "reduction axis");
    if (failed(n))
      return failure();
    reduce[*n] = true;
  }
  Shape out;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduce[i])
      out.push_back(t.getDimSize(i));
    else if (keepDims)
      out.push_back(1);
  }
  types.push_back(RankedTensorType::get(out, t.getElementType()));
  return success();
}

LogicalResult strait::graph::inferArgReduceImpl(OptLoc loc, Type input,
                                                int64_t axis, bool keepDims,
                                                SmallVectorImpl<Type> &types) {
  auto t = cast<TensorType>(input);
  auto i64 = IntegerType::get(t.getContext(), 64);
  if (!t.hasRank()) {
    types.push_back(UnrankedTensorType::get(i64));
    return success();
  }
  FailureOr<int64_t> n = normalizeAxis(loc, axis, t.getRank());
  if (failed(n))
    return failure();
  Shape out;
  for (int64_t i = 0; i < t.getRank(); ++i) {
    if (i != *n)
      out.push_back(t.getDimSize(i));
    else if (keepDims)
      out.push_back(1);
  }
  types.push_back(RankedTensorType::get(out, i64));
  return success();
}

LogicalResult strait::graph::inferGlobalPoolImpl(OptLoc loc, Type input,
                                                 SmallVectorImpl<Type> &types) {
  auto t = cast<TensorType>(input);
  if (!t.hasRank()) {
    types.push_back(t);
    return success();
  }
  if (t.getRank() < 3)
    return emitOptionalError(loc, "global pooling needs rank >= 3 (N, C, spatial), got ",
                             t.getRank());
  Shape out(t.getShape().take_front(2));
  out.append(t.getRank() - 2, 1);
  types.push_back(RankedTensorType::get(out, t.getElementType()));
  return success();
}
