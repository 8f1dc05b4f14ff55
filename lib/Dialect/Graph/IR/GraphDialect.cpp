//===- GraphDialect.cpp - Strait graph dialect registration ---------------===//

#include "strait/Dialect/Graph/GraphDialect.h"
#include "strait/Dialect/Graph/GraphOps.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace strait::graph;

#include "strait/Dialect/Graph/GraphDialect.cpp.inc"
#include "strait/Dialect/Graph/GraphEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "strait/Dialect/Graph/GraphAttrs.cpp.inc"

void GraphDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "strait/Dialect/Graph/GraphAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "strait/Dialect/Graph/GraphOps.cpp.inc"
      >();
}

Operation *GraphDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                             Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, elements);
}

#define GET_OP_CLASSES
#include "strait/Dialect/Graph/GraphOps.cpp.inc"
