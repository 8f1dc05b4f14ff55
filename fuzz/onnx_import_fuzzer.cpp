//===- onnx_import_fuzzer.cpp - libFuzzer target for the ONNX importer ----===//
//
// Feeds each input to strait::importONNXBuffer with every diagnostic
// swallowed: a malformed model must end in a null module, never in a crash,
// a hang or unbounded memory. Built by fuzz/build.sh in two flavours:
//
//   onnx_import_fuzzer       the input is a binary ModelProto
//   onnx_text_import_fuzzer  the input is a text-format ModelProto
//                            (compiled with -DSTRAIT_FUZZ_TEXT=1)
//
// The model "lives" in a private temporary folder holding one 4 KiB file,
// weights.bin, so external-data references (and their path and range checks)
// are exercised without reaching any other file. The input's length picks
// the import options (shape-only, dynamic shapes allowed) so that every
// input reproduces deterministically.
//
//===----------------------------------------------------------------------===//

#include "strait/Target/ONNX/ONNXImporter.h"

#include "strait/Dialect/Graph/GraphDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#ifndef STRAIT_FUZZ_TEXT
#define STRAIT_FUZZ_TEXT 0
#endif

static std::string modelPath;
static llvm::SmallString<128> modelDir;

static void removeModelFolder() { llvm::sys::fs::remove_directories(modelDir); }

/// Creates the private model folder with its one external-data file,
/// removed when the process exits (-fork runs one process per job).
static void makeModelFolder() {
  llvm::SmallString<128> dir;
  if (llvm::sys::fs::createUniqueDirectory("strait-fuzz", dir)) {
    modelPath = "/nonexistent-strait-fuzz/model.onnx";
    return;
  }
  modelDir = dir;
  std::atexit(removeModelFolder);
  llvm::SmallString<128> data(dir);
  llvm::sys::path::append(data, "weights.bin");
  std::error_code ec;
  llvm::raw_fd_ostream os(data, ec);
  for (int i = 0; i < 4096 && !ec; ++i)
    os << static_cast<char>(i * 37);
  llvm::SmallString<128> model(dir);
  llvm::sys::path::append(model, STRAIT_FUZZ_TEXT ? "model.onnxtxt" : "model.onnx");
  modelPath = std::string(model);
}

/// LLVM's BumpPtrAllocator poisons fresh slabs when its header is compiled
/// with ASan (our sources) and unpoisons only in instrumented code; the
/// Debian MLIR libraries are not, so manual poisoning must stay off.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}

extern "C" int LLVMFuzzerInitialize(int *argc, char ***argv) {
  makeModelFolder();
  // Protobuf reports text-format parse errors through its log: keep it quiet.
  // (A FATAL log still aborts, which is what the fuzzer should see.)
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char *, int, const std::string &) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::DialectRegistry registry;
  registry.insert<strait::graph::GraphDialect, mlir::func::FuncDialect>();
  mlir::MLIRContext ctx(registry, mlir::MLIRContext::Threading::DISABLED);
  mlir::ScopedDiagnosticHandler swallow(&ctx, [](mlir::Diagnostic &) {
    return mlir::success();
  });

  strait::ONNXImportOptions opts;
  opts.textFormat = STRAIT_FUZZ_TEXT;
  opts.shapeOnly = size & 1;
  opts.allowDynamic = size & 2;
  llvm::StringRef buffer(reinterpret_cast<const char *>(data), size);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      strait::importONNXBuffer(buffer, modelPath, &ctx, opts);
  if (module) {
    // Printing walks every attribute and type the importer built.
    llvm::raw_null_ostream os;
    module->print(os, mlir::OpPrintingFlags().elideLargeElementsAttrs(16));
  }
  return 0;
}
