//===- TorchExport.cpp - Checks of PyTorch's ONNX exports -----------------===//
//
// ONNX 1.12's generated code (Debian's libonnx) predates
// GraphProto.metadata_props (field 16) and ValueInfoProto.metadata_props
// (field 4), which the exporter writes; protobuf keeps them as unknown
// fields, read here as StringStringEntryProto.
//
//===----------------------------------------------------------------------===//
#include "TorchExport.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

#include "onnx/onnx_pb.h"
#include <google/protobuf/unknown_field_set.h>

#include <map>
#include <string>
#include <vector>

using namespace mlir;

namespace strait {
namespace onnximport {

namespace {

constexpr int kGraphMetadataField = 16, kValueInfoMetadataField = 4;
constexpr const char *kSignatureKey = "pkg.torch.export.ExportedProgram.graph_signature";
constexpr const char *kKindKey = "pkg.torch.export.graph_signature.InputSpec.kind";
constexpr const char *kOriginalNameKey = "pkg.torch.onnx.original_node_name";

std::map<std::string, std::string> metadataOf(const google::protobuf::Message &m, int field) {
  std::map<std::string, std::string> out;
  const google::protobuf::UnknownFieldSet &unknown = m.GetReflection()->GetUnknownFields(m);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField &f = unknown.field(i);
    if (f.number() != field || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnx::StringStringEntryProto e;
    if (e.ParseFromString(f.length_delimited()))
      out[e.key()] = e.value();
  }
  return out;
}

/// ("p_embed_weight", "embed.weight") for each "NAME: PARAMETER target='T'"
/// line of the signature's inputs.
std::vector<std::pair<std::string, std::string>> signatureParameters(llvm::StringRef sig) {
  std::vector<std::pair<std::string, std::string>> out;
  llvm::StringRef inputs = sig.split("# outputs").first;
  llvm::SmallVector<llvm::StringRef> lines;
  inputs.split(lines, '\n');
  for (llvm::StringRef line : lines) {
    auto [name, rest] = line.trim().split(": PARAMETER target='");
    if (rest.empty() || name.empty() || name.contains(' '))
      continue;
    llvm::StringRef target = rest.split('\'').first;
    out.push_back({name.str(), target.str()});
  }
  return out;
}

bool isFloat(int32_t t) {
  return t == onnx::TensorProto::FLOAT || t == onnx::TensorProto::FLOAT16 ||
         t == onnx::TensorProto::BFLOAT16 || t == onnx::TensorProto::DOUBLE;
}

/// value name -> the exporter's InputSpec kind, for the marked values.
llvm::StringMap<std::string> inputKinds(const onnx::GraphProto &graph) {
  llvm::StringMap<std::string> kinds;
  for (const onnx::ValueInfoProto &v : graph.value_info()) {
    std::map<std::string, std::string> meta = metadataOf(v, kValueInfoMetadataField);
    auto kind = meta.find(kKindKey);
    if (kind != meta.end())
      kinds[v.name()] = kind->second;
  }
  return kinds;
}

} // namespace

llvm::StringMap<std::string> torchNonParameters(const onnx::ModelProto &model) {
  const onnx::GraphProto &graph = model.graph();
  llvm::StringMap<std::string> kinds = inputKinds(graph);
  bool marked = llvm::any_of(graph.initializer(), [&](const onnx::TensorProto &t) {
    auto it = kinds.find(t.name());
    return it != kinds.end() && it->second == "PARAMETER";
  });
  llvm::StringMap<std::string> out;
  if (!marked)
    return out; // another producer, or the marks were stripped: no claim
  for (const onnx::TensorProto &t : graph.initializer()) {
    if (!isFloat(t.data_type()))
      continue;
    auto it = kinds.find(t.name());
    if (it == kinds.end())
      out[t.name()] = "unmarked";
    else if (it->second != "PARAMETER")
      out[t.name()] = it->second;
  }
  return out;
}

void checkTorchExportParameters(const onnx::ModelProto &model, Location loc) {
  const onnx::GraphProto &graph = model.graph();
  std::map<std::string, std::string> graphMeta = metadataOf(graph, kGraphMetadataField);
  auto sig = graphMeta.find(kSignatureKey);
  if (sig == graphMeta.end())
    return;
  // The exporter marks the value of every lifted parameter or buffer.
  // value name -> kind; the signature names of the marked values
  llvm::StringMap<std::string> marked = inputKinds(graph);
  llvm::StringSet<> originals;
  for (const onnx::ValueInfoProto &v : graph.value_info()) {
    if (!marked.count(v.name()))
      continue;
    std::map<std::string, std::string> meta = metadataOf(v, kValueInfoMetadataField);
    auto original = meta.find(kOriginalNameKey);
    if (original != meta.end())
      originals.insert(original->second);
  }
  if (originals.empty())
    return; // saved without the exporter's per-value names (renamed, post-processed)
  llvm::StringSet<> initializers;
  for (const onnx::TensorProto &t : graph.initializer())
    initializers.insert(t.name());
  std::vector<std::string> missing;
  size_t parameters = 0;
  for (const auto &[name, target] : signatureParameters(sig->second)) {
    ++parameters;
    if (!originals.contains(name) && !initializers.contains(target))
      missing.push_back(target);
  }
  if (missing.empty())
    return;
  // Float initializers of two or more elements that carry no mark: the
  // folded copies (a weight's transpose, a fused bias), and real constants.
  std::vector<std::string> unmarked;
  for (const onnx::TensorProto &t : graph.initializer()) {
    int64_t n = 1;
    for (int64_t d : t.dims())
      n *= d;
    if (isFloat(t.data_type()) && n >= 2 && !marked.count(t.name())) {
      std::string shape;
      for (auto [i, d] : llvm::enumerate(t.dims()))
        shape += (i ? "x" : "") + std::to_string(d);
      unmarked.push_back(t.name() + " [" + shape + "]");
    }
  }
  auto list = [](const std::vector<std::string> &names) {
    std::string s;
    for (size_t i = 0; i < names.size() && i < 8; ++i)
      s += (i ? ", " : "") + names[i];
    if (names.size() > 8)
      s += ", ... (" + std::to_string(names.size() - 8) + " more)";
    return s;
  };
  InFlightDiagnostic w = emitWarning(loc);
  w << missing.size() << " of the " << parameters
    << " parameters of this PyTorch export are not initializers of the graph: "
    << list(missing) << ". torch.onnx.export's default optimizer (optimize=True) folds a "
    << "parameter's Transpose into a constant under a generated name and merges initializers "
    << "of equal value (e.g. zero biases, unit norm weights), so such parameters would not "
    << "train (a training step trains only the initializers marked as parameters), or train "
    << "tied together. Export with optimize=False for training "
    << "(docs/models.md, \"Exporting your own model\"). Tied weights and parameters the forward "
    << "never reads are missing as well, and harmless.";
  if (!unmarked.empty())
    w << " Float initializers without a parameter mark (constants unless --trainable selects "
      << "them): " << list(unmarked) << ".";
}

} // namespace onnximport
} // namespace strait
