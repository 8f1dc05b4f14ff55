//===- TorchExport.h - Checks of PyTorch's ONNX exports ---------*- C++ -*-===//
//
// PyTorch's dynamo exporter (torch.onnx.export(..., dynamo=True)) records the
// exported program's graph signature in the graph's metadata and marks each
// lifted parameter's value; checkTorchExportParameters compares the two and
// warns when parameters are missing from the graph, which is what the
// exporter's default optimizer (optimize=True) does to a model meant for
// inference: it folds a parameter's Transpose into a constant under a
// generated name and merges initializers of equal value. torchNonParameters
// reads the same marks for the training step's default trainable set.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_LIB_TARGET_ONNX_TORCHEXPORT_H
#define STRAIT_LIB_TARGET_ONNX_TORCHEXPORT_H

#include "mlir/IR/Location.h"
#include "llvm/ADT/StringMap.h"

#include <string>

namespace onnx {
class ModelProto;
} // namespace onnx

namespace strait {
namespace onnximport {

/// Emits one warning at `loc` when `model` is a PyTorch dynamo export some of
/// whose signature's parameters are no initializer of the graph: it names
/// them, the float initializers without a parameter mark that likely took
/// their place, and the fix. Models without the exporter's metadata (every
/// other producer, or PyTorch models saved without it) pass silently.
void checkTorchExportParameters(const onnx::ModelProto &model, mlir::Location loc);

/// The float initializers of `model` that are not torch parameters, when it
/// is a PyTorch dynamo export that marks its parameters (at least one
/// initializer's value carries InputSpec.kind PARAMETER): name -> the kind
/// the exporter gave it (BUFFER, CONSTANT_TENSOR) or "unmarked" (a constant
/// the exporter or its optimizer made: an absent Conv bias's zeros, a folded
/// value). Empty for every other model: without marks there is no claim.
llvm::StringMap<std::string> torchNonParameters(const onnx::ModelProto &model);

} // namespace onnximport
} // namespace strait

#endif // STRAIT_LIB_TARGET_ONNX_TORCHEXPORT_H
