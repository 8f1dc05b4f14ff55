//===- GradientInterface.cpp - Reverse-mode gradient rules ----------------===//

#include "strait/Interfaces/GradientInterface.h"

using namespace mlir;

bool strait::detail::isFloatTensor(Type type) {
  auto tensor = dyn_cast<TensorType>(type);
  return tensor && isa<FloatType>(tensor.getElementType());
}

#include "strait/Interfaces/GradientInterface.cpp.inc"
