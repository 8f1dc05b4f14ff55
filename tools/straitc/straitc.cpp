//===- straitc.cpp - The Strait compiler driver ---------------------------===//
//
//   straitc MODEL.onnx [--input-shape NAME=DxD...] [--shape-only]
//           [--emit=summary|mlir] [-o FILE]
//
// Output is written only when compilation succeeds.
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Graph/Summary.h"
#include "strait/InitAll.h"
#include "strait/Target/ONNX/ONNXImporter.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
namespace cl = llvm::cl;

namespace {
enum class Emit { Summary, MLIR };

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx>"), cl::Required);
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"));
cl::opt<std::string> inputShapes("input-shape",
                                 cl::desc("Static input shapes: NAME=DxD...[,NAME=...]"),
                                 cl::init(""));
cl::opt<bool> shapeOnly("shape-only", cl::desc("Read no weight bytes"), cl::init(false));
cl::opt<Emit> emit("emit", cl::desc("What to produce"), cl::init(Emit::Summary),
                   cl::values(clEnumValN(Emit::Summary, "summary", "model summary"),
                              clEnumValN(Emit::MLIR, "mlir", "the graph-dialect IR")));
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
