//===- GradientsLinalg.cpp - Rules of MatMul and Gemm ---------------------===//

#include "GradientUtils.h"

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::grad;

namespace {
using DX = MutableArrayRef<Value>;

/// Flattens all but the last dimension: [..., K] -> [prod, K].
Value flattenLeading(GradBuilder &g, Value v) {
  ArrayRef<int64_t> s = shapeOf(v);
  int64_t rows = 1;
  for (int64_t d : s.drop_back())
    rows *= d;
  return g.make<ReshapeOp>(v, ArrayRef<int64_t>{rows, s.back()}, 0);
}

/// Y = A @ B with batch broadcasting. dA = dY @ B^T and dB = A^T @ dY, each
/// summed over broadcast batch dims. A 2-D weight B against a batched A
/// (linear layers) takes one flattened matmul instead of a batched one.
LogicalResult matmulGrad(MatMulOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value a = op.getA(), b = op.getB(), d = dy[0];
  if (shapeOf(a).size() < 2 || shapeOf(b).size() < 2)
    return op.emitOpError("gradient of a 1-D MatMul operand is not supported; "
                          "reshape the operand to 2-D");
  dx[0] = g.reduceTo(g.make<MatMulOp>(d, g.transposeLast2(b)), a);
  if (shapeOf(b).size() == 2 && shapeOf(a).size() > 2) {
    Value a2 = flattenLeading(g, a), d2 = flattenLeading(g, d);
    dx[1] = g.make<MatMulOp>(g.transposeLast2(a2), d2);
  } else {
    dx[1] = g.reduceTo(g.make<MatMulOp>(g.transposeLast2(a), d), b);
  }
  return success();
}

/// Y = alpha op(A) op(B) + beta C. Each operand's gradient is one Gemm with
/// the transposition flags chosen so that no Transpose op is needed.
LogicalResult gemmGrad(GemmOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value a = op.getA(), b = op.getB(), d = dy[0];
  bool ta = op.getTransA() != 0, tb = op.getTransB() != 0;
  APFloat alpha = op.getAlpha(), zero(0.0f);
  dx[0] = ta ? g.make<GemmOp>(b, d, Value(), alpha, zero, tb, true)
             : g.make<GemmOp>(d, b, Value(), alpha, zero, false, !tb);
  dx[1] = tb ? g.make<GemmOp>(d, a, Value(), alpha, zero, true, ta)
             : g.make<GemmOp>(a, d, Value(), alpha, zero, !ta, false);
  if (Value c = op.getC()) {
    Value dc = op.getBeta().convertToDouble() == 1.0
                   ? d
                   : g.mulScalar(d, op.getBeta().convertToDouble());
    dx[2] = g.reduceTo(dc, c);
  }
  return success();
}

} // namespace

void grad::registerLinalgGradients(MLIRContext *ctx) {
  attachRule<MatMulOp, matmulGrad>(ctx);
  attachRule<GemmOp, gemmGrad>(ctx);
}
