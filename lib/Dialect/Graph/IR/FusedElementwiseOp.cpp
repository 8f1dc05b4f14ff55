//===- FusedElementwiseOp.cpp - graph.FusedElementwise verifier -----------===//
//
// Checks the constraints F1-F6 of docs/graph-dialect.md ("Fused elementwise
// programs").
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Graph/FusedElementwise.h"

using namespace mlir;
using namespace strait::graph;

FusedOpcodeInfo strait::graph::getFusedOpcodeInfo(FusedOpcode op) {
  constexpr FusedKind F = FusedKind::Float, B = FusedKind::Bool;
  switch (op) {
  case FusedOpcode::Const:
    return {0, F, F};
  case FusedOpcode::Identity: // Cast to f32: a boolean becomes 0 or 1
  case FusedOpcode::Neg:
  case FusedOpcode::Abs:
  case FusedOpcode::Exp:
  case FusedOpcode::Log:
  case FusedOpcode::Sqrt:
  case FusedOpcode::Reciprocal:
  case FusedOpcode::Tanh:
  case FusedOpcode::Sigmoid:
  case FusedOpcode::Relu:
  case FusedOpcode::Erf:
  case FusedOpcode::Sin:
  case FusedOpcode::Cos:
  case FusedOpcode::Floor:
  case FusedOpcode::Ceil:
  case FusedOpcode::RoundBF16:
  case FusedOpcode::RoundF16:
    return {1, F, F};
  case FusedOpcode::Not:
    return {1, B, B};
  case FusedOpcode::Add:
  case FusedOpcode::Sub:
  case FusedOpcode::Mul:
  case FusedOpcode::Div:
  case FusedOpcode::Pow:
  case FusedOpcode::Max:
  case FusedOpcode::Min:
    return {2, F, F};
  case FusedOpcode::Equal:
  case FusedOpcode::Less:
  case FusedOpcode::LessOrEqual:
  case FusedOpcode::Greater:
  case FusedOpcode::GreaterOrEqual:
    return {2, F, B};
  case FusedOpcode::And:
  case FusedOpcode::Or:
    return {2, B, B};
  case FusedOpcode::Where:
    return {3, F, F};
  }
  return {0, F, F};
}

namespace {

/// Float registers are stored as f32, bf16 or f16; boolean ones as i1.
FailureOr<FusedKind> kindOfElement(Type t) {
  if (t.isF32() || t.isBF16() || t.isF16())
    return FusedKind::Float;
  if (t.isInteger(1))
    return FusedKind::Bool;
  return failure();
}

/// Numpy broadcast of `in` to `out` without changing `out`.
bool broadcastsTo(ArrayRef<int64_t> in, ArrayRef<int64_t> out) {
  if (in.size() > out.size())
    return false;
  size_t shift = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != 1 && in[i] != out[i + shift])
      return false;
  return true;
}

} // namespace

LogicalResult FusedElementwiseOp::verify() {
  ArrayAttr ops = getOps();
  ArrayRef<int32_t> args = getArgs();
  size_t numInputs = getInputs().size(), numInst = ops.size();
  // F1: sizes within the limits every backend supports.
  if (numInst == 0 || numInst > kMaxInstructions)
    return emitOpError("needs 1 to ") << kMaxInstructions << " instructions, has " << numInst;
  if (numInputs > kMaxInputs)
    return emitOpError("has ") << numInputs << " inputs; at most " << kMaxInputs;
  if (getConstants().size() > kMaxConstants)
    return emitOpError("has ") << getConstants().size() << " constants; at most "
                               << kMaxConstants;
  if (getY().empty() || getY().size() > kMaxOutputs)
    return emitOpError("needs 1 to ") << kMaxOutputs << " results, has " << getY().size();
  if (args.size() != 3 * numInst)
    return emitOpError("args has ") << args.size() << " entries; expected 3 per instruction ("
                                    << 3 * numInst << ")";
  if (getOutputs().size() != getY().size())
    return emitOpError("outputs names ") << getOutputs().size() << " registers for "
                                         << getY().size() << " results";
  // F2: every result has one static shape (the iteration shape), rank <= 8.
  auto shape = cast<RankedTensorType>(getY().front().getType());
  if (!shape.hasStaticShape() || shape.getRank() > kMaxRank)
    return emitOpError("results need a static shape of rank <= ") << kMaxRank;
  for (Value y : getY())
    if (cast<RankedTensorType>(y.getType()).getShape() != shape.getShape())
      return emitOpError("results have different shapes");
  // F3: inputs are f32, bf16, f16 or i1, static, and broadcast to the
  // iteration shape.
  SmallVector<FusedKind> kinds;
  for (auto [i, v] : llvm::enumerate(getInputs())) {
    auto t = cast<RankedTensorType>(v.getType());
    FailureOr<FusedKind> k = kindOfElement(t.getElementType());
    if (failed(k) || !t.hasStaticShape())
      return emitOpError("input ")
             << i << " must be a static f32, bf16, f16 or i1 tensor, got " << t;
    if (!broadcastsTo(t.getShape(), shape.getShape()))
      return emitOpError("input ") << i << " of type " << t << " does not broadcast to "
                                   << shape.getShape();
    kinds.push_back(*k);
  }
  // F4: instructions read earlier registers of the kinds their opcode takes.
  for (size_t i = 0; i < numInst; ++i) {
    FusedOpcode op = cast<FusedOpcodeAttr>(ops[i]).getValue();
    FusedOpcodeInfo info = getFusedOpcodeInfo(op);
    ArrayRef<int32_t> a = args.slice(3 * i, 3);
    if (op == FusedOpcode::Const) {
      if (a[0] < 0 || static_cast<size_t>(a[0]) >= getConstants().size())
        return emitOpError("instruction ") << i << " (Const) reads constant " << a[0]
                                           << " of " << getConstants().size();
    }
    for (unsigned j = 0; j < 3; ++j) {
      bool used = op == FusedOpcode::Const ? j == 0 : j < info.arity;
      if (!used) {
        if (a[j] != -1)
          return emitOpError("instruction ") << i << " (" << stringifyFusedOpcode(op)
                                             << ") has operand " << j << " = " << a[j]
                                             << "; unused operands are -1";
        continue;
      }
      if (op == FusedOpcode::Const)
        continue;
      if (a[j] < 0 || static_cast<size_t>(a[j]) >= numInputs + i)
        return emitOpError("instruction ") << i << " (" << stringifyFusedOpcode(op)
                                           << ") reads register " << a[j]
                                           << " before it is written";
      FusedKind want = op == FusedOpcode::Where && j == 0 ? FusedKind::Bool : info.operand;
      // Identity (a Cast) converts either kind to f32.
      if (op != FusedOpcode::Identity && kinds[a[j]] != want)
        return emitOpError("instruction ") << i << " (" << stringifyFusedOpcode(op)
                                           << ") operand " << j << " reads a "
                                           << (kinds[a[j]] == FusedKind::Bool ? "boolean"
                                                                              : "float")
                                           << " register";
    }
    kinds.push_back(info.result);
  }
  // F5: outputs name registers; F6: result element types match their kinds.
  for (auto [j, r] : llvm::enumerate(getOutputs())) {
    if (r < 0 || static_cast<size_t>(r) >= kinds.size())
      return emitOpError("output ") << j << " names register " << r << " of " << kinds.size();
    Type elt = cast<RankedTensorType>(getY()[j].getType()).getElementType();
    FailureOr<FusedKind> k = kindOfElement(elt);
    if (failed(k) || *k != kinds[r])
      return emitOpError("result ") << j << " has element type " << elt << " but register "
                                    << r << " holds a "
                                    << (kinds[r] == FusedKind::Bool ? "boolean (i1)"
                                                                    : "float (f32, bf16, f16)");
  }
  return success();
}
