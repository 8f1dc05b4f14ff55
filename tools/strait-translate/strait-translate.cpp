//===- strait-translate.cpp - Translations into and out of Strait's IR ----===//
//
//   strait-translate --import-onnx model.onnx [--input-shape x=1x3] [--shape-only]
//   strait-translate --import-onnx-text model.onnxtxt
//
//===----------------------------------------------------------------------===//

#include "strait/InitAll.h"
#include "strait/Target/ONNX/ONNXImporter.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;

static llvm::cl::opt<std::string> inputShapes(
    "input-shape", llvm::cl::desc("Static input shapes: NAME=DxD...[,NAME=...]"),
    llvm::cl::init(""));
static llvm::cl::opt<bool> shapeOnly("shape-only",
                                     llvm::cl::desc("Read no weight bytes"),
                                     llvm::cl::init(false));
static llvm::cl::opt<bool> allowDynamic("allow-dynamic",
                                        llvm::cl::desc("Keep dynamic input dimensions"),
                                        llvm::cl::init(false));

static OwningOpRef<Operation *> importONNX(llvm::SourceMgr &sourceMgr,
                                           MLIRContext *ctx, bool text) {
  const llvm::MemoryBuffer *buf = sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
  strait::ONNXImportOptions opts;
  opts.shapeOnly = shapeOnly;
  opts.allowDynamic = allowDynamic;
  opts.textFormat = text;
  std::string err = strait::parseInputShapes(inputShapes, opts.inputShapes);
  if (!err.empty()) {
    emitError(UnknownLoc::get(ctx)) << err;
    return nullptr;
  }
  OwningOpRef<ModuleOp> module =
      strait::importONNXBuffer(buf->getBuffer(), buf->getBufferIdentifier(), ctx, opts);
  if (!module)
    return nullptr;
  return OwningOpRef<Operation *>(module.release());
}

int main(int argc, char **argv) {
  TranslateToMLIRRegistration importBinary(
      "import-onnx", "import an ONNX model (binary protobuf)",
      [](llvm::SourceMgr &sm, MLIRContext *ctx) { return importONNX(sm, ctx, false); },
      [](DialectRegistry &registry) { strait::registerAllDialects(registry); });
  TranslateToMLIRRegistration importText(
      "import-onnx-text", "import an ONNX model (text protobuf)",
      [](llvm::SourceMgr &sm, MLIRContext *ctx) { return importONNX(sm, ctx, true); },
      [](DialectRegistry &registry) { strait::registerAllDialects(registry); });
  return failed(mlirTranslateMain(argc, argv, "Strait translation driver\n"));
}
