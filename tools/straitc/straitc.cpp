//===- straitc.cpp - The Strait compiler driver ---------------------------===//
//
//   straitc MODEL.onnx [--input-shape NAME=DxD...] [--shape-only]
//           [--emit=summary|mlir|program] [-o FILE|DIR]
//
// Output is written only when compilation succeeds.
//
//===----------------------------------------------------------------------===//

#include "strait/Analysis/PlanReport.h"
#include "strait/Dialect/Graph/Summary.h"
#include "strait/InitAll.h"
#include "strait/Target/DeviceProgram/Export.h"
#include "strait/Target/ONNX/ONNXImporter.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
namespace cl = llvm::cl;

namespace {
enum class Emit { Summary, MLIR, Program, Plan };

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx>"), cl::Required);
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"));
cl::opt<std::string> inputShapes("input-shape",
                                 cl::desc("Static input shapes: NAME=DxD...[,NAME=...]"),
                                 cl::init(""));
cl::opt<bool> shapeOnly("shape-only", cl::desc("Read no weight bytes"), cl::init(false));
cl::opt<Emit> emit("emit", cl::desc("What to produce"), cl::init(Emit::Summary),
                   cl::values(clEnumValN(Emit::Summary, "summary", "model summary"),
                              clEnumValN(Emit::MLIR, "mlir", "the graph-dialect IR"),
                              clEnumValN(Emit::Program, "program",
                                         "a job folder for strait-run (-o DIR)"),
                              clEnumValN(Emit::Plan, "plan",
                                         "the partition plan on --cluster (text; JSON "
                                         "with --plan-json)")));
cl::opt<std::string> clusterFile("cluster", cl::desc("Cluster description (YAML)"),
                                 cl::value_desc("file"), cl::init(""));
cl::opt<std::string> planJson("plan-json", cl::desc("Also write the plan as JSON"),
                              cl::value_desc("file"), cl::init(""));
cl::opt<strait::PlannerStrategy> strategy(
    "strategy", cl::desc("Planner"), cl::init(strait::PlannerStrategy::Strait),
    cl::values(clEnumValN(strait::PlannerStrategy::Strait, "strait", "bandwidth-aware DP"),
               clEnumValN(strait::PlannerStrategy::Uniform, "uniform",
                          "equal layers per stage (baseline)"),
               clEnumValN(strait::PlannerStrategy::PipeDream, "pipedream",
                          "homogeneous DP (baseline)"),
               clEnumValN(strait::PlannerStrategy::DTFM, "dtfm",
                          "DT-FM-like search (baseline)")));
cl::opt<double> globalBatch("global-batch",
                            cl::desc("Samples per iteration (default: the input's batch)"),
                            cl::init(0));
cl::opt<uint64_t> seed("seed", cl::desc("Seed of weights a shape-only model lacks"),
                       cl::init(0));
cl::opt<bool> printWeights("print-weights",
                           cl::desc("Print weight blobs in full with --emit=mlir"),
                           cl::init(false));
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerDefaultTimingManagerCLOptions();
  cl::ParseCommandLineOptions(argc, argv, "Strait compiler\n");

  DialectRegistry registry;
  strait::registerAllDialects(registry);
  MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagHandler(sourceMgr, &context);

  DefaultTimingManager tm;
  applyDefaultTimingManagerCLOptions(tm);
  TimingScope timing = tm.getRootScope();

  strait::ONNXImportOptions opts;
  opts.shapeOnly = shapeOnly;
  std::string err = strait::parseInputShapes(inputShapes, opts.inputShapes);
  if (!err.empty()) {
    llvm::errs() << "straitc: " << err << "\n";
    return 1;
  }
  TimingScope importTiming = timing.nest("import");
  OwningOpRef<ModuleOp> module = strait::importONNXFile(inputFile, &context, opts);
  importTiming.stop();
  if (!module)
    return 1;

  if (emit == Emit::Plan) {
    if (clusterFile.empty()) {
      llvm::errs() << "straitc: --emit=plan needs --cluster FILE\n";
      return 1;
    }
    llvm::Expected<strait::ClusterModel> cluster = strait::loadClusterFile(clusterFile);
    if (!cluster) {
      llvm::errs() << "straitc: " << llvm::toString(cluster.takeError()) << "\n";
      return 1;
    }
    strait::PlannerOptions popts;
    popts.strategy = strategy;
    popts.globalBatch = globalBatch;
    TimingScope planTiming = timing.nest("plan");
    auto func = module->lookupSymbol<func::FuncOp>("main");
    llvm::Expected<strait::ModelPlan> plan = strait::planFunction(func, *cluster, popts);
    planTiming.stop();
    if (!plan) {
      llvm::errs() << "straitc: " << llvm::toString(plan.takeError()) << "\n";
      return 1;
    }
    if (!plan->plan.feasible) {
      llvm::errs() << "straitc: no plan fits: " << plan->plan.message << "\n";
      return 1;
    }
    if (!planJson.empty()) {
      std::string err;
      auto jsonOut = openOutputFile(planJson, &err);
      if (!jsonOut) {
        llvm::errs() << "straitc: " << err << "\n";
        return 1;
      }
      jsonOut->os() << llvm::formatv("{0:2}", strait::planToJSON(*plan, *cluster)) << "\n";
      jsonOut->keep();
    }
    std::string err;
    auto out = openOutputFile(outputFile, &err);
    if (!out) {
      llvm::errs() << "straitc: " << err << "\n";
      return 1;
    }
    out->os() << strait::formatPlan(plan->plan, *cluster);
    out->keep();
    return 0;
  }

  if (emit == Emit::Program) {
    if (outputFile == "-") {
      llvm::errs() << "straitc: --emit=program needs -o DIR\n";
      return 1;
    }
    auto func = module->lookupSymbol<func::FuncOp>("main");
    strait::RankExport rank;
    rank.function = func;
    strait::JobExportOptions jobOpts;
    jobOpts.modelName = inputFile;
    jobOpts.seed = seed;
    TimingScope exportTiming = timing.nest("export");
    if (failed(strait::writeJob(*module, {rank}, outputFile, jobOpts)))
      return 1;
    llvm::outs() << "straitc: wrote " << outputFile << "/plan.pb (1 rank)\n";
    return 0;
  }

  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> out = openOutputFile(outputFile, &error);
  if (!out) {
    llvm::errs() << "straitc: " << error << "\n";
    return 1;
  }
  if (emit == Emit::MLIR) {
    OpPrintingFlags flags;
    if (!printWeights)
      flags.elideLargeResourceString(64).elideLargeElementsAttrs(64);
    module->print(out->os(), flags);
  } else {
    strait::graph::printSummary(*module, strait::graph::summarize(*module), out->os());
  }
  out->keep();
  return 0;
}
