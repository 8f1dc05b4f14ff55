//===- ONNXImporter.h - ONNX to graph dialect -------------------*- C++ -*-===//
//
// Imports an ONNX model (binary or text protobuf) into a module holding
// graph.Variable weights and one func.func of graph ops. Errors are MLIR
// diagnostics naming the file, node and op; the result is null on failure.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_TARGET_ONNX_ONNXIMPORTER_H
#define STRAIT_TARGET_ONNX_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace strait {

struct ONNXImportOptions {
  /// Static shapes for graph inputs, replacing their dynamic dimensions.
  llvm::StringMap<llvm::SmallVector<int64_t>> inputShapes;
  /// Read no weight bytes: variables carry shapes and dtypes only.
  bool shapeOnly = false;
  /// Accept inputs whose dimensions stay dynamic (folding may then fail).
  bool allowDynamic = false;
  /// Parse the file as text protobuf (also chosen by a .pbtxt/.textproto/.onnxtxt suffix).
  bool textFormat = false;
  /// Name of the function that holds the graph.
  std::string functionName = "main";
};

/// Parses "name=8x128,mask=8x128" into `shapes`; returns an error message.
std::string parseInputShapes(llvm::StringRef spec,
                             llvm::StringMap<llvm::SmallVector<int64_t>> &shapes);

/// Imports the model at `path`. Diagnostics go to the context's handler.
mlir::OwningOpRef<mlir::ModuleOp>
importONNXFile(llvm::StringRef path, mlir::MLIRContext *context,
               const ONNXImportOptions &options = {});

/// Imports a model held in memory; `path` names it in diagnostics and
/// locates external data files.
mlir::OwningOpRef<mlir::ModuleOp>
importONNXBuffer(llvm::StringRef buffer, llvm::StringRef path,
                 mlir::MLIRContext *context, const ONNXImportOptions &options = {});

/// The ONNX op types the importer accepts, sorted.
llvm::SmallVector<llvm::StringRef> supportedONNXOps();

} // namespace strait

#endif // STRAIT_TARGET_ONNX_ONNXIMPORTER_H
