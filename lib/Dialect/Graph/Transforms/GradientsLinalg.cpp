//===- GradientsLinalg.cpp - Rules of MatMul, Gemm, Einsum, GroupedMatMul -===//

#include "GradientUtils.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>

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
/// summed over broadcast batch dims. A 2-D weight B (linear layers) takes
/// two Gemms over A and dY flattened to 2-D, their transposition flags in
/// place of Transpose ops: dA = Gemm(dY, B, transB) reshaped to A's shape,
/// dB = Gemm(A, dY, transA). (The Transposes moved an activation-sized A^T
/// and a B^T per layer per step.)
LogicalResult matmulGrad(MatMulOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value a = op.getA(), b = op.getB(), d = dy[0];
  if (shapeOf(a).size() < 2 || shapeOf(b).size() < 2)
    return op.emitOpError("gradient of a 1-D MatMul operand is not supported; "
                          "reshape the operand to 2-D");
  if (shapeOf(b).size() == 2) {
    APFloat one(1.0f), zero(0.0f);
    bool batched = shapeOf(a).size() > 2;
    Value a2 = batched ? flattenLeading(g, a) : a, d2 = batched ? flattenLeading(g, d) : d;
    Value da = g.make<GemmOp>(d2, b, Value(), one, zero, false, true);
    dx[0] = batched ? g.reshapeTo(da, a) : da;
    dx[1] = g.make<GemmOp>(a2, d2, Value(), one, zero, true, false);
    return success();
  }
  dx[0] = g.reduceTo(g.make<MatMulOp>(d, g.transposeLast2(b)), a);
  dx[1] = g.reduceTo(g.make<MatMulOp>(g.transposeLast2(a), d), b);
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

/// Y[s] = X[s] @ op(W[idx[s]]). dX[s] = dY[s] @ op(W[idx[s]])^T: the same
/// routed product with the other layout flag (W [E, O, I] read as [E, I', O']
/// with I' = O); dW[e] = the sum of op(X[s]^T dY[s]) over the rows routed to
/// e (GroupedMatMulGradWeight, in W's layout). idx gets no gradient.
LogicalResult groupedMatMulGrad(GroupedMatMulOp op, GradBuilder &g, ValueRange dy, DX dx) {
  ArrayRef<int64_t> w = shapeOf(op.getW());
  int64_t transB = static_cast<int64_t>(op.getTransB());
  dx[0] = g.make<GroupedMatMulOp>(dy[0], op.getW(), op.getIndices(), 1 - transB);
  dx[1] = g.make<GroupedMatMulGradWeightOp>(op.getX(), dy[0], op.getIndices(), w[0], transB);
  return success();
}

/// An Einsum equation split into its input terms and its explicit output
/// term; an ellipsis stays "..." (its dims broadcast as in the forward op).
struct EinsumTerms {
  SmallVector<std::string> inputs;
  std::string output;
};

/// Parses `equation` for `numInputs` operands; implicit mode (no "->") gets
/// ONNX's output: the ellipsis, then the letters used once, sorted.
FailureOr<EinsumTerms> parseEinsum(EinsumOp op, size_t numInputs) {
  std::string eq;
  for (char c : op.getEquation())
    if (!std::isspace(static_cast<unsigned char>(c)))
      eq.push_back(c);
  EinsumTerms t;
  size_t arrow = eq.find("->");
  StringRef lhs = StringRef(eq).substr(0, arrow);
  SmallVector<StringRef> parts;
  lhs.split(parts, ',');
  for (StringRef p : parts)
    t.inputs.push_back(p.str());
  if (t.inputs.size() != numInputs)
    return op.emitOpError("equation '") << op.getEquation() << "' has "
                                        << t.inputs.size() << " input terms for "
                                        << numInputs << " operands";
  auto letters = [](StringRef term) {
    std::string out;
    for (char c : term)
      if (std::isalpha(static_cast<unsigned char>(c)))
        out.push_back(c);
    return out;
  };
  for (const std::string &term : t.inputs) {
    std::string l = letters(term);
    llvm::sort(l);
    if (std::adjacent_find(l.begin(), l.end()) != l.end())
      return op.emitOpError("gradient of an Einsum term with a repeated index "
                            "(a diagonal) is not supported: '")
             << op.getEquation() << "'";
  }
  if (arrow != std::string::npos) {
    t.output = eq.substr(arrow + 2);
    return t;
  }
  std::map<char, int> uses;
  bool ellipsis = false;
  for (const std::string &term : t.inputs) {
    ellipsis |= StringRef(term).contains("...");
    for (char c : letters(term))
      ++uses[c];
  }
  if (ellipsis)
    t.output = "...";
  for (auto [c, n] : uses)
    if (n == 1)
      t.output.push_back(c);
  return t;
}

/// Y = einsum(A[, B]). The gradient of each operand is one Einsum of dY
/// with the other operand onto the operand's term ("out,B->A"), summed over
/// broadcast ellipsis dims. Each index of the operand must appear in the
/// output or in the other operand (contractions, batched products and outer
/// products, as exporters emit; not an index summed within one operand).
LogicalResult einsumGrad(EinsumOp op, GradBuilder &g, ValueRange dy, DX dx) {
  ValueRange in = op.getInputs();
  if (in.empty() || in.size() > 2)
    return op.emitOpError("gradient of an Einsum over ")
           << in.size() << " operands is not supported (1 or 2)";
  FailureOr<EinsumTerms> t = parseEinsum(op, in.size());
  if (failed(t))
    return failure();
  for (size_t k = 0; k < in.size(); ++k) {
    if (!strait::detail::isFloatTensor(in[k].getType()))
      continue;
    std::string other = in.size() == 2 ? t->inputs[1 - k] : "";
    const std::string &mine = t->inputs[k];
    std::string available = t->output + other;
    for (char c : mine)
      if (std::isalpha(static_cast<unsigned char>(c)) &&
          available.find(c) == std::string::npos)
        return op.emitOpError("gradient of Einsum '")
               << op.getEquation() << "': index '" << c << "' of operand " << k
               << " is summed within that operand, which is not supported";
    if (StringRef(mine).contains("...") && !StringRef(available).contains("..."))
      return op.emitOpError("gradient of Einsum '")
             << op.getEquation() << "': the ellipsis of operand " << k
             << " is summed away, which is not supported";
    std::string eq = t->output + (other.empty() ? "" : "," + other) + "->" + mine;
    SmallVector<Value> operands{dy[0]};
    if (!other.empty())
      operands.push_back(in[1 - k]);
    Value grad = g.make<EinsumOp>(ValueRange(operands), g.b.getStringAttr(eq));
    dx[k] = g.reduceTo(grad, in[k]);
  }
  return success();
}

} // namespace

void grad::registerLinalgGradients(MLIRContext *ctx) {
  attachRule<MatMulOp, matmulGrad>(ctx);
  attachRule<GemmOp, gemmGrad>(ctx);
  attachRule<EinsumOp, einsumGrad>(ctx);
  attachRule<GroupedMatMulOp, groupedMatMulGrad>(ctx);
}
