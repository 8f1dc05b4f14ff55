//===- InitAll.cpp - Register every Strait dialect and pass ---------------===//

#include "strait/InitAll.h"

#include "strait/Dialect/Dist/DistDialect.h"
#include "strait/Dialect/Dist/DistPasses.h"
#include "strait/Dialect/Graph/GraphDialect.h"
#include "strait/Dialect/Graph/GraphPasses.h"
#include "strait/Interfaces/CostOpInterface.h"
#include "strait/Interfaces/GradientInterface.h"
#include "strait/Pipelines/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Transforms/Passes.h"

void strait::registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<mlir::func::FuncDialect, graph::GraphDialect,
                  dist::DistDialect>();
  registerGraphCostModels(registry);
  registerGraphGradientModels(registry);
}

void strait::registerAllPasses() {
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  graph::registerGraphPasses();
  dist::registerDistPasses();
  registerStraitPipeline();
}
