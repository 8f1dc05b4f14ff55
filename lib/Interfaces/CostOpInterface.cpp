//===- CostOpInterface.cpp - Workload estimator interface -----------------===//

#include "strait/Interfaces/CostOpInterface.h"

using namespace mlir;

double strait::detail::elementsOf(TypeRange types) {
  double n = 0;
  for (Type t : types)
    if (auto s = dyn_cast<ShapedType>(t); s && s.hasStaticShape())
      n += static_cast<double>(s.getNumElements());
  return n;
}

double strait::detail::bytesOf(TypeRange types) {
  double n = 0;
  for (Type t : types)
    if (auto s = dyn_cast<ShapedType>(t); s && s.hasStaticShape())
      n += static_cast<double>(s.getNumElements()) *
           ((s.getElementType().getIntOrFloatBitWidth() + 7) / 8);
  return n;
}

#include "strait/Interfaces/CostOpInterface.cpp.inc"
