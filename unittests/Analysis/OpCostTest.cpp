//===- OpCostTest.cpp - FLOP counts of the graph ops' cost models ---------===//
//
// The convolution gradients cost the forward's multiply-adds each (dX: every
// dY element meets C/group * k weights; dW: every dY element meets as many
// inputs), checked against a count by hand, and price as convolutions, not
// as elementwise ops.
//
//===----------------------------------------------------------------------===//

#include "strait/Interfaces/CostOpInterface.h"
#include "strait/InitAll.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include "gtest/gtest.h"

using namespace strait;

namespace {

const char *kModule = R"mlir(
module {
  func.func @main(%x: tensor<2x6x10x10xf32>, %w: tensor<8x3x3x3xf32>, %dy: tensor<2x8x5x5xf32>)
      -> (tensor<2x8x5x5xf32>, tensor<2x6x10x10xf32>, tensor<8x3x3x3xf32>) {
    %y = graph.Conv %x, %w {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x6x10x10xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x5x5xf32>
    %dx = graph.ConvGradInput %dy, %w {dilations = array<i64: 1, 1>, group = 2 : i64, input_shape = array<i64: 2, 6, 10, 10>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x8x5x5xf32>, tensor<8x3x3x3xf32>) -> tensor<2x6x10x10xf32>
    %dw = graph.ConvGradWeight %dy, %x {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>, weight_shape = array<i64: 8, 3, 3, 3>} : (tensor<2x8x5x5xf32>, tensor<2x6x10x10xf32>) -> tensor<8x3x3x3xf32>
    return %y, %dx, %dw : tensor<2x8x5x5xf32>, tensor<2x6x10x10xf32>, tensor<8x3x3x3xf32>
  }
}
)mlir";

TEST(OpCost, ConvolutionGradientsCostTheForwardsMultiplyAdds) {
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kModule, &context);
  ASSERT_TRUE(module);
  auto main = module->lookupSymbol<mlir::func::FuncOp>("main");
  std::vector<CostOpInterface> ops;
  for (mlir::Operation &op : main.getBody().front())
    if (auto cost = llvm::dyn_cast<CostOpInterface>(op))
      ops.push_back(cost);
  ASSERT_EQ(ops.size(), 3u);
  // 2 x 8 x 5 x 5 outputs, each 3 channels (6 / group 2) x 3 x 3 taps.
  const double macs = 2.0 * 8 * 5 * 5 * 3 * 3 * 3;
  for (CostOpInterface cost : ops) {
    SCOPED_TRACE(cost->getName().getStringRef().str());
    EXPECT_DOUBLE_EQ(cost.getForwardFlops(), 2 * macs);
    EXPECT_EQ(cost.getKernelClass(), KernelClass::Conv);
  }
}

} // namespace
