//===- KernelTimesTest.cpp - Measured kernel times in the cost model ------===//
//
// The kernel signature (IRCostGraph.h), the kernel list (KernelList.h), the
// profile's `kernel_times` (ClusterParser) and their use by the planner: an
// op whose signature has a measured time costs that time, any other op its
// roofline; kernel times of another model are an error.
//
//===----------------------------------------------------------------------===//

#include "strait/Analysis/ClusterModel.h"
#include "strait/Analysis/KernelList.h"
#include "strait/Analysis/PlanReport.h"
#include "strait/Analysis/Workload.h"
#include "strait/InitAll.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include "gtest/gtest.h"

using namespace strait;

namespace {

// Two MatMuls of one shape and one of another, two Tanhs of one shape (one
// with an op id, which does not change its kernel), a Reshape (a view: no
// work, no kernel).
const char *kModule = R"mlir(
module {
  graph.Variable @w : tensor<64x64xf32> = dense<0.5> : tensor<64x64xf32>
  graph.Variable @u : tensor<64x32xf32> = dense<0.5> : tensor<64x32xf32>
  func.func @main(%x: tensor<16x64xf32>) -> tensor<16x32xf32> {
    %w = graph.ReadVariable @w : tensor<64x64xf32>
    %u = graph.ReadVariable @u : tensor<64x32xf32>
    %a = graph.MatMul %x, %w : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
    %b = graph.Tanh %a : tensor<16x64xf32>
    %c = graph.MatMul %b, %w : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
    %d = graph.Tanh %c {graph.op_id = 7 : i64} : tensor<16x64xf32>
    %e = graph.MatMul %d, %u : (tensor<16x64xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
    return %e : tensor<16x32xf32>
  }
}
)mlir";

struct KernelTimes : ::testing::Test {
  void SetUp() override {
    mlir::DialectRegistry registry;
    registerAllDialects(registry);
    context.appendDialectRegistry(registry);
    module = mlir::parseSourceString<mlir::ModuleOp>(kModule, &context);
    ASSERT_TRUE(module);
    main = module->lookupSymbol<mlir::func::FuncOp>("main");
    for (mlir::Operation &op : main.getBody().front())
      if (op.getNumResults() && !llvm::isa<mlir::func::ReturnOp>(op) &&
          op.getName().stripDialect() != "ReadVariable")
        ops.push_back(&op);
    ASSERT_EQ(ops.size(), 5u);
  }
  /// One CPU device with the given kernel times (seconds by signature).
  ClusterModel cluster(llvm::StringMap<double> times) {
    ClusterModel c = makeUniformCluster(makeCpuType(), 1, 1, 1, LinkSpec{1e9, 1e-5, false},
                                        LinkSpec{1e9, 1e-5, false}, LinkSpec{1e9, 1e-5, false});
    c.devices[0].profile.kernelTimes =
        std::make_shared<const llvm::StringMap<double>>(std::move(times));
    return c;
  }
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp main;
  std::vector<mlir::Operation *> ops; // a, b, c, d, e
};

TEST_F(KernelTimes, SignatureKeysShapesAndTypesNotIds) {
  std::string a = kernelSignature(ops[0]), c = kernelSignature(ops[2]);
  EXPECT_EQ(a, c);                           // same op, same shapes
  EXPECT_NE(a, kernelSignature(ops[4]));     // another shape
  EXPECT_EQ(kernelSignature(ops[1]), kernelSignature(ops[3])); // graph.op_id ignored
  EXPECT_NE(a, kernelSignature(ops[1]));
  EXPECT_EQ(a.rfind("MatMul.", 0), 0u) << a;
  EXPECT_EQ(a.size(), std::string("MatMul.").size() + 16);
  // Stable: a fixed function of the text, not of pointers.
  EXPECT_EQ(a, kernelSignature(ops[0]));
}

TEST_F(KernelTimes, CostGraphListsEachKernelOnce) {
  llvm::Expected<IRCostGraph> g = buildCostGraph(main);
  ASSERT_TRUE(!!g) << llvm::toString(g.takeError());
  ASSERT_EQ(g->graph.nodes.size(), 5u);
  for (auto [n, op] : llvm::zip(g->graph.nodes, g->ops))
    EXPECT_EQ(n.kernel, kernelSignature(op));
  // MatMul 16x64x64, Tanh, MatMul 16x64x32.
  ASSERT_EQ(g->kernelOps.size(), 3u);
  EXPECT_EQ(g->kernelOps[0], ops[0]);
  EXPECT_EQ(g->kernelOps[1], ops[1]);
  EXPECT_EQ(g->kernelOps[2], ops[4]);

  unsigned count = 0;
  auto list = buildKernelModule(main, &count);
  ASSERT_TRUE(!!list) << llvm::toString(list.takeError());
  EXPECT_EQ(count, 3u);
  auto kernels = (*list)->lookupSymbol<mlir::func::FuncOp>("main");
  ASSERT_TRUE(kernels);
  // Each kernel's operands are arguments; its location names its signature.
  EXPECT_EQ(kernels.getNumArguments(), 5u);
  std::vector<std::string> names;
  for (mlir::Operation &op : kernels.getBody().front())
    if (auto loc = llvm::dyn_cast<mlir::NameLoc>(op.getLoc()))
      names.push_back(loc.getName().str());
  EXPECT_EQ(names, (std::vector<std::string>{kernelSignature(ops[0]), kernelSignature(ops[1]),
                                             kernelSignature(ops[4])}));
}

TEST_F(KernelTimes, MeasuredTimeReplacesTheRooflineOnlyWhereItMatches) {
  llvm::Expected<IRCostGraph> g = buildCostGraph(main);
  ASSERT_TRUE(!!g);
  const CostNode &matmul = g->graph.nodes[0], &tanh = g->graph.nodes[1],
                 &narrow = g->graph.nodes[4];
  ClusterModel c = cluster({{matmul.kernel, 3e-3}, {tanh.kernel, 5e-4}});
  ClusterModel plain = cluster({});
  EXPECT_DOUBLE_EQ(nodeTime(matmul, c, 0, false), 3e-3);
  EXPECT_DOUBLE_EQ(nodeTime(tanh, c, 0, false), 5e-4);
  // Not measured: the roofline, as without kernel times.
  EXPECT_DOUBLE_EQ(nodeTime(narrow, c, 0, false), nodeTime(narrow, plain, 0, false));
  EXPECT_NE(nodeTime(matmul, plain, 0, false), 3e-3);
}

TEST_F(KernelTimes, PlannerUsesMeasuredTimes) {
  llvm::Expected<IRCostGraph> g = buildCostGraph(main);
  ASSERT_TRUE(!!g);
  std::string mm = g->graph.nodes[0].kernel, th = g->graph.nodes[1].kernel,
              narrow = g->graph.nodes[4].kernel;
  ClusterModel c = cluster({{mm, 2e-3}, {th, 1e-3}, {narrow, 4e-3}});
  llvm::Expected<ModelPlan> mp = planFunction(main, c, PlannerOptions());
  ASSERT_TRUE(!!mp) << llvm::toString(mp.takeError());
  EXPECT_EQ(mp->kernels, 3u);
  EXPECT_EQ(mp->kernelsMeasured, 3u);
  // One device, one micro-batch: the forward is the five ops' measured
  // times; the forward-only graph's backward is estimated (no kernel).
  ASSERT_EQ(mp->plan.stages.size(), 1u);
  EXPECT_NEAR(mp->plan.stages[0].fwdTime, 2 * 2e-3 + 2 * 1e-3 + 4e-3, 1e-12);

  // One kernel missing: its ops fall back to the roofline.
  ClusterModel partial = cluster({{mm, 2e-3}, {th, 1e-3}});
  llvm::Expected<ModelPlan> mp2 = planFunction(main, partial, PlannerOptions());
  ASSERT_TRUE(!!mp2);
  EXPECT_EQ(mp2->kernelsMeasured, 2u);
  EXPECT_NEAR(mp2->plan.stages[0].fwdTime,
              2 * 2e-3 + 2 * 1e-3 + nodeTime(g->graph.nodes[4], partial, 0, false), 1e-12);
}

TEST_F(KernelTimes, KernelTimesOfAnotherModelAreAnError) {
  ClusterModel c = cluster({{"MatMul.0123456789ABCDEF", 1e-3}});
  llvm::Expected<ModelPlan> mp = planFunction(main, c, PlannerOptions());
  ASSERT_FALSE(!!mp);
  std::string msg = llvm::toString(mp.takeError());
  EXPECT_NE(msg.find("hold none of the 3 kernels"), std::string::npos) << msg;
  EXPECT_NE(msg.find("another model"), std::string::npos) << msg;
}

TEST(KernelTimesParser, ReadsAndChecksKernelTimes) {
  std::string base = "name: t\ndevice_types:\n  - {name: cpu, kind: cpu, peak_tflops: {fp32: 1},"
                     " mem_bandwidth_gbs: 10, memory_gib: 8}\ndevices:\n"
                     "  - {name: d0, type: cpu, host: h, site: s}\n"
                     "  - {name: d1, type: cpu, host: h, site: s}\n"
                     "links:\n  intra_host: {bandwidth_gbps: 10, latency_us: 5}\n";
  llvm::Expected<ClusterModel> c = parseCluster(
      base + "profiles:\n  - {type: cpu, kernel_times: {MatMul.00000000000000AB: 0.002, "
             "Tanh.00000000000000CD: 3.5e-05}}\n",
      "k.yaml");
  ASSERT_TRUE(!!c) << llvm::toString(c.takeError());
  ASSERT_TRUE(c->devices[1].profile.kernelTimes);
  EXPECT_DOUBLE_EQ(c->devices[1].profile.kernelTimes->lookup("Tanh.00000000000000CD"), 3.5e-5);
  EXPECT_EQ(c->numSpeedClasses(), 1u); // equal kernel times: one speed class

  llvm::Expected<ClusterModel> bad = parseCluster(
      base + "profiles:\n  - {type: cpu, kernel_times: {MatMul.00000000000000AB: fast}}\n",
      "k.yaml");
  ASSERT_FALSE(!!bad);
  std::string msg = llvm::toString(bad.takeError());
  EXPECT_NE(msg.find("k.yaml:10:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kernel_times.MatMul.00000000000000AB"), std::string::npos) << msg;
  llvm::Expected<ClusterModel> notMap =
      parseCluster(base + "profiles:\n  - {type: cpu, kernel_times: [1, 2]}\n", "k.yaml");
  ASSERT_FALSE(!!notMap);
  EXPECT_NE(llvm::toString(notMap.takeError()).find("'kernel_times' must be a mapping"),
            std::string::npos);
}

} // namespace
