//===- GradientsTensor.cpp - Rules of data-movement ops -------------------===//
//
// Reshape-like ops reshape back, Transpose inverts its permutation, Gather
// and Slice scatter into zeros, Concat and Split swap roles, Expand sums,
// ScatterElements and GatherElements, GatherND and ScatterND swap roles,
// TopK's values scatter back to the positions they were taken from.
//
//===----------------------------------------------------------------------===//

#include "GradientUtils.h"

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::grad;

namespace {
using DX = MutableArrayRef<Value>;

/// Reshape, Flatten, Squeeze, Unsqueeze: same data, the input's shape back.
template <typename OpT>
LogicalResult reshapeLikeGrad(OpT op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.reshapeTo(dy[0], op->getOperand(0));
  return success();
}

LogicalResult transposeGrad(TransposeOp op, GradBuilder &g, ValueRange dy,
                            DX dx) {
  ArrayRef<int64_t> perm = op.getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = i;
  dx[0] = g.make<TransposeOp>(dy[0], ArrayRef<int64_t>(inverse));
  return success();
}

/// Tile: dY [r0*d0, r1*d1, ...] viewed as [r0, d0, r1, d1, ...] summed over
/// the repeat axes.
LogicalResult tileGrad(TileOp op, GradBuilder &g, ValueRange dy, DX dx) {
  ArrayRef<int64_t> in = shapeOf(op.getInput());
  ArrayRef<int64_t> repeats = op.getRepeats();
  if (repeats.size() != in.size())
    return op.emitOpError("gradient needs one repeat per dimension");
  SmallVector<int64_t> split, axes;
  for (auto [i, r] : llvm::enumerate(repeats)) {
    axes.push_back(static_cast<int64_t>(2 * i));
    split.push_back(r);
    split.push_back(in[i]);
  }
  Value view = g.make<ReshapeOp>(dy[0], ArrayRef<int64_t>(split), 0);
  dx[0] = g.make<ReduceSumOp>(view, ArrayRef<int64_t>(axes), /*keepdims=*/0);
  return success();
}

/// Resize (nearest, linear): ResizeGrad scatters dY back with the forward
/// op's interpolation weights.
LogicalResult resizeGrad(ResizeOp op, GradBuilder &g, ValueRange dy, DX dx) {
  if (op.getMode() == ResizeMode::cubic)
    return op.emitOpError("gradient of cubic Resize is not supported (nearest, linear)");
  CoordMode coord = op.getCoordinateTransformationMode();
  if (coord == CoordMode::tf_crop_and_resize || coord == CoordMode::half_pixel_symmetric)
    return op.emitOpError("gradient of Resize with coordinate_transformation_mode ")
           << stringifyCoordMode(coord) << " is not supported";
  dx[0] = g.make<ResizeGradOp>(dy[0], g.b.getDenseI64ArrayAttr(shapeOf(op.getX())),
                               op.getModeAttr(), op.getCoordinateTransformationModeAttr(),
                               op.getNearestModeAttr());
  return success();
}

/// CumSum: each x_i reaches the sums at and after it (before it when
/// reversed), so dX is the CumSum of dY in the other direction with the same
/// exclusivity.
LogicalResult cumSumGrad(CumSumOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.make<CumSumOp>(dy[0], op.getAxisAttr(), op.getExclusiveAttr(),
                           g.b.getI64IntegerAttr(op.getReverse() ? 0 : 1));
  return success();
}

/// A permutation written as reshape to `split`, transpose by `perm`, reshape:
/// its gradient undoes the steps (reshape dY to the transposed split shape,
/// transpose by the inverse permutation, reshape to the input).
Value unpermute(GradBuilder &g, Value d, Value input, ArrayRef<int64_t> split,
                ArrayRef<int64_t> perm) {
  SmallVector<int64_t> permuted, inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm)) {
    permuted.push_back(split[p]);
    inverse[p] = static_cast<int64_t>(i);
  }
  Value v = g.make<ReshapeOp>(d, ArrayRef<int64_t>(permuted), 0);
  v = g.make<TransposeOp>(v, ArrayRef<int64_t>(inverse));
  return g.reshapeTo(v, input);
}

/// DepthToSpace [b, c, h, w] -> [b, c/bs^2, h*bs, w*bs] (ONNX's DCR and CRD
/// orders as reshape + transpose).
LogicalResult depthToSpaceGrad(DepthToSpaceOp op, GradBuilder &g, ValueRange dy,
                               DX dx) {
  ArrayRef<int64_t> s = shapeOf(op.getInput());
  int64_t bs = op.getBlocksize();
  if (s.size() != 4)
    return op.emitOpError("gradient needs a 4-D input");
  int64_t b = s[0], c = s[1] / (bs * bs), h = s[2], w = s[3];
  if (op.getMode() == DepthToSpaceMode::DCR)
    dx[0] = unpermute(g, dy[0], op.getInput(), {b, bs, bs, c, h, w}, {0, 3, 4, 1, 5, 2});
  else
    dx[0] = unpermute(g, dy[0], op.getInput(), {b, c, bs, bs, h, w}, {0, 1, 4, 2, 5, 3});
  return success();
}

/// SpaceToDepth [b, c, h, w] -> [b, c*bs^2, h/bs, w/bs].
LogicalResult spaceToDepthGrad(SpaceToDepthOp op, GradBuilder &g, ValueRange dy,
                               DX dx) {
  ArrayRef<int64_t> s = shapeOf(op.getInput());
  int64_t bs = op.getBlocksize();
  if (s.size() != 4)
    return op.emitOpError("gradient needs a 4-D input");
  dx[0] = unpermute(g, dy[0], op.getInput(), {s[0], s[1], s[2] / bs, bs, s[3] / bs, bs},
                    {0, 3, 5, 1, 2, 4});
  return success();
}

LogicalResult expandGrad(ExpandOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.reduceTo(dy[0], op.getInput());
  return success();
}

LogicalResult gatherGrad(GatherOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.make<GatherGradOp>(dy[0], op.getIndices(), op.getAxisAttr(),
                               g.b.getDenseI64ArrayAttr(shapeOf(op.getData())));
  return success();
}

LogicalResult sliceGrad(SliceOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.make<SliceGradOp>(dy[0], op.getStartsAttr(), op.getEndsAttr(),
                              op.getAxesAttr(), op.getStepsAttr(),
                              g.b.getDenseI64ArrayAttr(shapeOf(op.getData())));
  return success();
}

LogicalResult concatGrad(ConcatOp op, GradBuilder &g, ValueRange dy, DX dx) {
  int64_t rank = shapeOf(dy[0]).size();
  int64_t axis = static_cast<int64_t>(op.getAxis());
  if (axis < 0)
    axis += rank;
  SmallVector<int64_t> sizes;
  for (Value v : op.getInputs())
    sizes.push_back(shapeOf(v)[axis]);
  if (sizes.size() == 1) {
    dx[0] = dy[0];
    return success();
  }
  auto split = g.create<SplitOp>(dy[0], static_cast<uint64_t>(axis),
                                 ArrayRef<int64_t>(sizes));
  for (auto [i, r] : llvm::enumerate(split.getOutputs()))
    dx[i] = r;
  return success();
}

LogicalResult splitGrad(SplitOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = dy.size() == 1 ? dy[0] : g.make<ConcatOp>(dy, op.getAxisAttr());
  return success();
}

/// ScatterElements without reduction: dData is dY with the written positions
/// zeroed (a scatter of zeros), dUpdates gathers dY at the indices. Duplicate
/// indices are undefined in ONNX; each such update then receives dY.
LogicalResult scatterElementsGrad(ScatterElementsOp op, GradBuilder &g, ValueRange dy, DX dx) {
  if (op.getReduction() != ScatterReduction::none)
    return op.emitOpError("gradient supports reduction 'none' only, got '")
           << stringifyScatterReduction(op.getReduction()) << "'";
  dx[0] = g.make<ScatterElementsOp>(dy[0], op.getIndices(), g.zeros(op.getUpdates().getType()),
                                    op.getAxisAttr(), op.getReductionAttr());
  dx[2] = g.make<GatherElementsOp>(dy[0], op.getIndices(), op.getAxisAttr());
  return success();
}

/// GatherElements: dData adds each dY element back at its index along the axis
/// (ScatterElements with reduction add into zeros; DeBERTa's relative-position
/// attention gathers one score per query/key pair and repeats indices).
LogicalResult gatherElementsGrad(GatherElementsOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.make<ScatterElementsOp>(
      g.zeros(op.getData().getType()), op.getIndices(), dy[0], op.getAxisAttr(),
      ScatterReductionAttr::get(g.b.getContext(), ScatterReduction::add));
  return success();
}

/// TopK: each selected value is the input at its index along the axis, so
/// dX adds dValues back at the Indices result (ScatterElements with reduction
/// add into zeros; the indices along the axis are distinct). The Indices
/// result is an integer and has no gradient. MoE routers (Mixtral's top-2 of
/// the expert probabilities) train through this rule.
LogicalResult topKGrad(TopKOp op, GradBuilder &g, ValueRange dy, DX dx) {
  int64_t rank = static_cast<int64_t>(shapeOf(op.getX()).size());
  int64_t axis = op.getAxis();
  if (axis < -rank || axis >= rank)
    return op.emitOpError("gradient: axis ") << axis << " is out of range for rank " << rank;
  if (axis < 0)
    axis += rank;
  dx[0] = g.make<ScatterElementsOp>(
      g.zeros(op.getX().getType()), op.getIndices(), dy[0], g.b.getI64IntegerAttr(axis),
      ScatterReductionAttr::get(g.b.getContext(), ScatterReduction::add));
  return success();
}

/// GatherND (batch_dims 0): dData adds each dY slice back at its index tuple
/// (ScatterND with reduction add into zeros: a tuple that repeats, like the
/// relative-position index of Swin's bias table, accumulates).
LogicalResult gatherNDGrad(GatherNDOp op, GradBuilder &g, ValueRange dy, DX dx) {
  if (op.getBatchDims() != 0)
    return op.emitOpError("gradient supports batch_dims 0 only, got ") << op.getBatchDims();
  dx[0] = g.make<ScatterNDOp>(
      g.zeros(op.getData().getType()), op.getIndices(), dy[0],
      ScatterReductionAttr::get(g.b.getContext(), ScatterReduction::add));
  return success();
}

/// ScatterND without reduction: dData is dY with the written slices zeroed,
/// dUpdates gathers dY at the index tuples (duplicate tuples are undefined in
/// ONNX; each such update then receives dY).
LogicalResult scatterNDGrad(ScatterNDOp op, GradBuilder &g, ValueRange dy, DX dx) {
  if (op.getReduction() != ScatterReduction::none)
    return op.emitOpError("gradient supports reduction 'none' only, got '")
           << stringifyScatterReduction(op.getReduction()) << "'";
  dx[0] = g.make<ScatterNDOp>(dy[0], op.getIndices(), g.zeros(op.getUpdates().getType()),
                              op.getReductionAttr());
  dx[2] = g.make<GatherNDOp>(dy[0], op.getIndices(), g.b.getI64IntegerAttr(0));
  return success();
}

/// Constant-mode Pad with non-negative pads: the gradient is the interior.
LogicalResult padGrad(PadOp op, GradBuilder &g, ValueRange dy, DX dx) {
  ArrayRef<int64_t> pads = op.getPads(), in = shapeOf(op.getData());
  if (op.getMode() != PadMode::constant || llvm::any_of(pads, [](int64_t p) {
        return p < 0;
      }))
    return op.emitOpError("gradient supports constant mode with non-negative "
                          "pads only");
  int64_t rank = in.size();
  SmallVector<int64_t> starts, ends, axes, steps;
  for (int64_t i = 0; i < rank; ++i) {
    starts.push_back(pads[i]);
    ends.push_back(pads[i] + in[i]);
    axes.push_back(i);
    steps.push_back(1);
  }
  dx[0] = g.make<SliceOp>(dy[0], ArrayRef<int64_t>(starts), ArrayRef<int64_t>(ends),
                          ArrayRef<int64_t>(axes), ArrayRef<int64_t>(steps));
  return success();
}

} // namespace

void grad::registerTensorGradients(MLIRContext *ctx) {
  attachRule<ReshapeOp, reshapeLikeGrad<ReshapeOp>>(ctx);
  attachRule<FlattenOp, reshapeLikeGrad<FlattenOp>>(ctx);
  attachRule<SqueezeOp, reshapeLikeGrad<SqueezeOp>>(ctx);
  attachRule<UnsqueezeOp, reshapeLikeGrad<UnsqueezeOp>>(ctx);
  attachRule<TransposeOp, transposeGrad>(ctx);
  attachRule<ExpandOp, expandGrad>(ctx);
  attachRule<TileOp, tileGrad>(ctx);
  attachRule<ResizeOp, resizeGrad>(ctx);
  attachRule<CumSumOp, cumSumGrad>(ctx);
  attachRule<DepthToSpaceOp, depthToSpaceGrad>(ctx);
  attachRule<SpaceToDepthOp, spaceToDepthGrad>(ctx);
  attachRule<GatherOp, gatherGrad>(ctx);
  attachRule<SliceOp, sliceGrad>(ctx);
  attachRule<ConcatOp, concatGrad>(ctx);
  attachRule<SplitOp, splitGrad>(ctx);
  attachRule<PadOp, padGrad>(ctx);
  attachRule<ScatterElementsOp, scatterElementsGrad>(ctx);
  attachRule<GatherElementsOp, gatherElementsGrad>(ctx);
  attachRule<GatherNDOp, gatherNDGrad>(ctx);
  attachRule<TopKOp, topKGrad>(ctx);
  attachRule<ScatterNDOp, scatterNDGrad>(ctx);
}
