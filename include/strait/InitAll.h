//===- InitAll.h - Register every Strait dialect and pass -------*- C++ -*-===//

#ifndef STRAIT_INITALL_H
#define STRAIT_INITALL_H

#include "mlir/IR/DialectRegistry.h"

namespace strait {

/// Adds the Strait dialects and the upstream ones they build on.
void registerAllDialects(mlir::DialectRegistry &registry);

/// Registers every Strait pass and pipeline with the global registry.
void registerAllPasses();

} // namespace strait

#endif // STRAIT_INITALL_H
