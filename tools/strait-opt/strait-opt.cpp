//===- strait-opt.cpp - Strait's optimizer driver -------------------------===//
//
// mlir-opt with every Strait dialect and pass registered.
//
//===----------------------------------------------------------------------===//

#include "strait/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  strait::registerAllDialects(registry);
  strait::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Strait optimizer driver\n", registry));
}
