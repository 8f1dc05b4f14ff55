//===- OnnxToProgram.h - ONNX test models as device programs ---*- C++ -*-===//
//
// Test-only conversion used by the conformance tool: an ONNX node test
// (model.onnx, plus input/output TensorProtos) becomes a
// strait.program.Program whose input/output shapes come from the test data.
// Links onnx; never part of the runtime libraries.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TOOLS_ONNXTOPROGRAM_H
#define STRAIT_RUNTIME_TOOLS_ONNXTOPROGRAM_H

#include "strait/runtime/Status.h"
#include "strait/runtime/Tensor.h"
#include "strait_program.pb.h"

#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

namespace strait {
namespace rt {
namespace onnxtest {

/// Converts an ONNX TensorProto into the program's TensorData (raw bytes).
StatusOr<program::TensorData> convertTensor(const onnx::TensorProto &t);

/// Converts one ONNX attribute; Unimplemented for graphs and sparse tensors.
StatusOr<program::Attribute> convertAttribute(const onnx::AttributeProto &a);

/// Builds a program running the model's nodes in order (one run step).
/// Input value ids are 0..inputs-1 in graph-input order, outputs follow in
/// graph-output order; intermediates of multi-node graphs get their static
/// shapes from ONNX shape inference and are activations.
/// Graph initializers become ROLE_PARAMETER values whose data goes into
/// `shards` (required when the graph has initializers).
StatusOr<program::Program>
buildNodeProgram(const onnx::ModelProto &model,
                 const std::vector<onnx::TensorProto> &inputs,
                 const std::vector<onnx::TensorProto> &outputs,
                 program::ParameterShardFile *shards);

/// Parses a serialized protobuf file into `message`.
Status readProto(const std::string &path, google::protobuf::Message &message);

} // namespace onnxtest
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_ONNXTOPROGRAM_H
