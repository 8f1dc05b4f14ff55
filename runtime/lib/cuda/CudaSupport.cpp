//===- CudaSupport.cpp - Which kernels run natively on CUDA ---------------===//
//
// The rules behind nativeSupport (CudaSupport.h): an op must be in the
// backend's kernel table (the same table the backend resolves from, built
// here without a device) and its operand dtypes must be ones its CUDA kernel
// accepts. Each rule names the dtypes of the kernel's own check, in the
// kernel's file; shapes and attributes are not checked here except for the
// integer inputs read on the host (hostWait: Slice's and a reduction's,
// TopK's K unless a constant, GroupedMatMul's experts), and for the convolutions, whose
// host checks read no data: they run on operands without data, so pads that
// cuDNN cannot express (different on the two sides of a dim and changing
// the output size) count as not native. Known run-time declines not checked
// here: ranks past 8 after merging dims.
//
//===----------------------------------------------------------------------===//
#include "CudaSupport.h"

#include "CudaKernels.h"
#include "strait/runtime/Program.h"

#include <algorithm>
#include <map>
#include <set>

namespace strait {
namespace rt {
namespace cuda {
namespace {

using DT = program::DType;
using Rule = std::string (*)(const KernelSpec &);

std::string name(DType t) { return dtypeName(t); }

bool isFloat(DType t) {
  return t == program::DTYPE_F32 || t == program::DTYPE_F64 || t == program::DTYPE_F16 ||
         t == program::DTYPE_BF16;
}

bool oneOf(DType t, std::initializer_list<DType> set) {
  return std::find(set.begin(), set.end(), t) != set.end();
}

const OperandType *in(const KernelSpec &s, size_t i) {
  return i < s.inputs.size() && s.inputs[i].present ? &s.inputs[i] : nullptr;
}

/// Operand 0's dtype in `set`, else the reason.
std::string firstIn(const KernelSpec &s, std::initializer_list<DType> set, const char *what) {
  const OperandType *x = in(s, 0);
  if (!x)
    return "";
  if (oneOf(x->dtype, set))
    return "";
  return name(x->dtype) + " (the CUDA kernel takes " + what + ")";
}

// --- the rules, one per kernel family --------------------------------------

/// Kernels written for f32 (the optimizers, norms, losses, pools): input 0
/// (the data, dY, or the learning rate) and every other floating operand
/// f32; integer operands (labels, steps, indices) as the kernel checks them.
std::string floatsF32(const KernelSpec &s) {
  const OperandType *x = in(s, 0);
  if (x && x->dtype != program::DTYPE_F32)
    return "input 0 is " + name(x->dtype) + " (the CUDA kernel takes f32)";
  for (const auto *list : {&s.inputs, &s.outputs})
    for (size_t i = 0; i < list->size(); ++i)
      if ((*list)[i].present && isFloat((*list)[i].dtype) &&
          (*list)[i].dtype != program::DTYPE_F32)
        return std::string(list == &s.inputs ? "input " : "output ") + std::to_string(i) +
               " is " + name((*list)[i].dtype) + " (the CUDA kernel takes f32)";
  return "";
}

/// SoftmaxCrossEntropyLoss(Grad): scores (input 0, or 1 for the gradient)
/// f32, bf16 or f16; the loss, dLoss and the weights f32; dScores and a
/// log_prob in the scores' type (log_prob also f32).
std::string sce(const KernelSpec &s) {
  bool grad = s.kernel && s.kernel->op() == "SoftmaxCrossEntropyLossGrad";
  const OperandType *x = in(s, grad ? 1 : 0);
  if (!x)
    return "";
  if (!oneOf(x->dtype, {program::DTYPE_F32, program::DTYPE_BF16, program::DTYPE_F16}))
    return "scores are " + name(x->dtype) + " (the CUDA kernel takes f32, bf16, f16)";
  auto f32 = [](const OperandType *t) { return !t || t->dtype == program::DTYPE_F32; };
  const OperandType *out0 = s.outputs.empty() || !s.outputs[0].present ? nullptr : &s.outputs[0];
  const OperandType *out1 = s.outputs.size() < 2 || !s.outputs[1].present ? nullptr : &s.outputs[1];
  if (!f32(in(s, grad ? 3 : 2)))
    return "the weights are not f32 (the CUDA kernel takes f32)";
  if (grad && !f32(in(s, 0)))
    return "dLoss is " + name(in(s, 0)->dtype) + " (the CUDA kernel takes f32)";
  if (grad ? out0 && out0->dtype != x->dtype : !f32(out0))
    return grad ? "dScores differ from the scores' type" : "the loss is not f32";
  if (!grad && out1 && out1->dtype != program::DTYPE_F32 && out1->dtype != x->dtype)
    return "log_prob is " + name(out1->dtype) + " (the CUDA kernel writes f32 or the scores' type)";
  return "";
}

/// SoftmaxCrossEntropyLossWithGrad (dLoss, scores, labels[, weights] -> loss,
/// dScores): scores f32, bf16 or f16; dLoss, the weights and the loss f32;
/// dScores in the scores' type.
std::string sceWithGrad(const KernelSpec &s) {
  const OperandType *x = in(s, 1);
  if (!x)
    return "";
  if (!oneOf(x->dtype, {program::DTYPE_F32, program::DTYPE_BF16, program::DTYPE_F16}))
    return "scores are " + name(x->dtype) + " (the CUDA kernel takes f32, bf16, f16)";
  auto f32 = [](const OperandType *t) { return !t || t->dtype == program::DTYPE_F32; };
  if (!f32(in(s, 0)))
    return "dLoss is " + name(in(s, 0)->dtype) + " (the CUDA kernel takes f32)";
  if (!f32(in(s, 3)))
    return "the weights are not f32 (the CUDA kernel takes f32)";
  if (!s.outputs.empty() && s.outputs[0].present && s.outputs[0].dtype != program::DTYPE_F32)
    return "the loss is not f32";
  if (s.outputs.size() > 1 && s.outputs[1].present && s.outputs[1].dtype != x->dtype)
    return "dScores differ from the scores' type";
  return "";
}

/// LayerNormalization(Grad), RMSNormalization(Grad), AccumulateGrad:
/// floatsF32, except for one 16-bit operand the kernel converts itself: the
/// normalization's Y (output 0, rounded once), its gradient's dY (input 0,
/// widened on load), the accumulation's grad (input 0, widened on load).
std::string lowIo(const KernelSpec &s) {
  bool output = s.kernel && (s.kernel->op() == "LayerNormalization" ||
                             s.kernel->op() == "RMSNormalization");
  KernelSpec f32 = s;
  std::vector<OperandType> &list = output ? f32.outputs : f32.inputs;
  if (!list.empty() && list[0].present &&
      oneOf(list[0].dtype, {program::DTYPE_BF16, program::DTYPE_F16}))
    list[0].dtype = program::DTYPE_F32;
  return floatsF32(f32);
}

/// AdamW and SGD: floatsF32, except that the gradients may be bf16 / f16
/// (widened on load): inputs [first, first + count).
std::string lowGradients(const KernelSpec &s, size_t first, size_t count) {
  KernelSpec f32 = s;
  for (size_t i = first; i < first + count && i < f32.inputs.size(); ++i)
    if (f32.inputs[i].present &&
        oneOf(f32.inputs[i].dtype, {program::DTYPE_BF16, program::DTYPE_F16}))
      f32.inputs[i].dtype = program::DTYPE_F32;
  return floatsF32(f32);
}
/// AdamW: lr, step, then n parameters, n gradients, n + n moments; the
/// outputs' optional fourth group (16-bit copies of the parameters) is bf16
/// or f16.
std::string adamW(const KernelSpec &s) {
  size_t n = s.inputs.size() > 2 ? (s.inputs.size() - 2) / 4 : 0;
  KernelSpec f32 = s;
  for (size_t i = 3 * n; i < 4 * n && i < f32.outputs.size(); ++i)
    if (f32.outputs[i].present &&
        oneOf(f32.outputs[i].dtype, {program::DTYPE_BF16, program::DTYPE_F16}))
      f32.outputs[i].dtype = program::DTYPE_F32;
  return lowGradients(f32, 2 + n, n);
}
/// SGD: lr, param, grad, velocity.
std::string sgd(const KernelSpec &s) { return lowGradients(s, 2, 1); }

std::string anyType(const KernelSpec &) { return ""; }

std::string twoOperands(const KernelSpec &s) {
  return s.inputs.size() == 2 ? "" : std::to_string(s.inputs.size()) +
                                         " operands (the CUDA kernel takes two)";
}
std::string binaryArith(const KernelSpec &s) {
  if (std::string why = twoOperands(s); !why.empty())
    return why;
  return firstIn(s, {program::DTYPE_F32, program::DTYPE_F64, program::DTYPE_I32,
                     program::DTYPE_I64},
                 "f32, f64, i32, i64");
}
std::string binaryPow(const KernelSpec &s) {
  if (std::string why = twoOperands(s); !why.empty())
    return why;
  if (s.inputs[0].present && s.inputs[1].present && s.inputs[0].dtype != s.inputs[1].dtype)
    return "exponent " + name(s.inputs[1].dtype) + " for a " + name(s.inputs[0].dtype) +
           " base (the CUDA kernel takes one type)";
  return firstIn(s, {program::DTYPE_F32, program::DTYPE_F64}, "f32, f64");
}
std::string logical(const KernelSpec &s) {
  return firstIn(s, {program::DTYPE_BOOL}, "bool");
}
std::string unaryFloat(const KernelSpec &s) {
  return firstIn(s, {program::DTYPE_F32, program::DTYPE_F64}, "f32, f64");
}

std::string cast(const KernelSpec &s) {
  const OperandType *x = in(s, 0);
  if (!x || s.outputs.empty())
    return "";
  DType to = s.outputs[0].dtype;
  if (x->dtype == to)
    return "";
  auto ok = [](DType t) { return elemType(t) != ET::Other; };
  if (ok(x->dtype) && ok(to))
    return "";
  return "from " + name(x->dtype) + " to " + name(to) +
         " (the CUDA kernel casts between f32, f64, f16, bf16, i32, i64, bool)";
}

std::string gemm(const KernelSpec &s) {
  return firstIn(s, {program::DTYPE_F32, program::DTYPE_F64, program::DTYPE_F16,
                     program::DTYPE_BF16},
                 "f32, f64, f16, bf16");
}

std::string attention(const KernelSpec &s) {
  const OperandType *q = in(s, s.kernel && s.kernel->op() == "FusedAttentionGrad" ? 1 : 0);
  if (!q || oneOf(q->dtype, {program::DTYPE_F32, program::DTYPE_F16, program::DTYPE_BF16}))
    return "";
  return "Q is " + name(q->dtype) + " (the CUDA kernel takes f32, f16, bf16)";
}

std::string fused(const KernelSpec &s) {
  for (const auto *list : {&s.inputs, &s.outputs})
    for (const OperandType &t : *list)
      if (t.present && !oneOf(t.dtype, {program::DTYPE_F32, program::DTYPE_BF16,
                                        program::DTYPE_F16, program::DTYPE_BOOL}))
        return "an operand is " + name(t.dtype) +
               " (the CUDA kernel takes f32, bf16, f16 and bool)";
  return "";
}

/// FusedRotaryEmbedding: X f32, bf16 or f16; Cos and Sin each f32 or X's
/// dtype (Rotary.cu's instantiations; the shared checks say the same).
std::string rotary(const KernelSpec &s) {
  const OperandType *x = in(s, 0);
  if (!x)
    return "";
  if (!oneOf(x->dtype, {program::DTYPE_F32, program::DTYPE_BF16, program::DTYPE_F16}))
    return "X is " + name(x->dtype) + " (the CUDA kernel takes f32, bf16, f16)";
  for (size_t i : {1, 2}) {
    const OperandType *t = in(s, i);
    if (t && t->dtype != program::DTYPE_F32 && t->dtype != x->dtype)
      return std::string(i == 1 ? "Cos" : "Sin") + " is " + name(t->dtype) +
             " (the CUDA kernel takes f32 or X's " + name(x->dtype) + ")";
  }
  return "";
}

/// TopK: f32, f64, f16, bf16, i32, i64 (Reduce.cu's instantiations).
std::string topK(const KernelSpec &s) {
  return firstIn(s, {program::DTYPE_F32, program::DTYPE_F64, program::DTYPE_F16,
                     program::DTYPE_BF16, program::DTYPE_I32, program::DTYPE_I64},
                 "f32, f64, f16, bf16, i32, i64");
}

/// ScatterElements: reduction none on any 1, 2, 4 or 8-byte type, add on f32.
std::string scatterElements(const KernelSpec &s) {
  std::string red = "none";
  if (s.kernel) {
    auto it = s.kernel->attrs().find("reduction");
    if (it != s.kernel->attrs().end())
      red = it->second.s();
  }
  const OperandType *x = in(s, 0);
  if (red == "none" || (red == "add" && (!x || x->dtype == program::DTYPE_F32)))
    return "";
  return "reduction '" + red + "'" + (x ? " on " + name(x->dtype) : std::string()) +
         " (the CUDA kernel writes any type, adds f32)";
}

std::string lowOrF32(const KernelSpec &s) {
  return firstIn(s, {program::DTYPE_F32, program::DTYPE_BF16, program::DTYPE_F16},
                 "f32, bf16, f16");
}

/// The Reduce* family: f32, f64, i32, i64 directly, bf16/f16 widened to
/// f32. An axes input is read on the host.
std::string reduce(const KernelSpec &s) {
  return firstIn(s, {program::DTYPE_F32, program::DTYPE_F64, program::DTYPE_I32,
                     program::DTYPE_I64, program::DTYPE_BF16, program::DTYPE_F16},
                 "f32, f64, i32, i64, bf16, f16");
}

/// cuDNN: X, W (and dY) of one dtype among f32, bf16, f16 (bf16/f16 with
/// f32 compute); the bias in that dtype or f32. With the static shapes the
/// kernel's own host checks run on operands without data (checkConv and
/// cudnnConvShape read none): pads cuDNN cannot express decline there.
std::string convShapes(const KernelSpec &s) {
  std::vector<Tensor> tensors;
  tensors.reserve(s.inputs.size() + s.outputs.size());
  std::vector<const Tensor *> ins;
  std::vector<Tensor *> outs;
  for (const OperandType &t : s.inputs) {
    tensors.push_back(Tensor{t.dtype, t.shape, nullptr});
    ins.push_back(t.present ? &tensors.back() : nullptr);
  }
  for (const OperandType &t : s.outputs) {
    tensors.push_back(Tensor{t.dtype, t.shape, nullptr});
    outs.push_back(t.present ? &tensors.back() : nullptr);
  }
  KernelContext ctx(*s.kernel, ins, outs);
  StatusOr<ConvCheck> k = checkConv(ctx);
  if (!k.isOk())
    return k.getStatus().toString();
  bool forward = s.kernel->op() == "Conv";
  const ConvWindow &w = forward ? k->conv.window : k->grad.window;
  Shape xs = forward ? k->conv.x->shape : k->grad.xShape;
  Shape ws = forward ? k->conv.w->shape : k->grad.wShape;
  int64_t group = forward ? k->conv.group : k->grad.group;
  StatusOr<CudnnConvShape> shape = cudnnConvShape(ctx, w, xs[0], xs[1], ws[0], group);
  return shape.isOk() ? "" : shape.getStatus().toString();
}

std::string conv(const KernelSpec &s) {
  const OperandType *x = in(s, 0);
  if (!x)
    return "";
  if (!oneOf(x->dtype, {program::DTYPE_F32, program::DTYPE_BF16, program::DTYPE_F16}))
    return name(x->dtype) + " (the CUDA kernel takes f32, bf16, f16)";
  const OperandType *w = in(s, 1);
  if (w && w->dtype != x->dtype)
    return "operands " + name(x->dtype) + " and " + name(w->dtype) + " differ";
  const OperandType *b = in(s, 2);
  if (b && b->dtype != x->dtype && b->dtype != program::DTYPE_F32)
    return "bias " + name(b->dtype) + " for " + name(x->dtype) + " operands";
  return s.kernel ? convShapes(s) : "";
}

const std::map<std::string, Rule> &rules() {
  static const std::map<std::string, Rule> table = [] {
    std::map<std::string, Rule> r;
    for (const char *op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less",
                           "LessOrEqual", "Greater", "GreaterOrEqual"})
      r[op] = binaryArith;
    r["Pow"] = binaryPow;
    for (const char *op : {"And", "Or", "Not"})
      r[op] = logical;
    for (const char *op : {"Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Sigmoid",
                           "Relu", "Erf", "Sin", "Cos", "Floor", "Ceil", "Gelu"})
      r[op] = unaryFloat;
    r["Cast"] = cast;
    for (const char *op : {"Where", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity",
                           "Transpose", "Expand", "Concat", "Split", "Gather", "Slice",
                           "SliceGrad", "GatherElements"})
      r[op] = anyType;
    for (const char *op : {"GeluGrad", "GatherGrad", "MaxPool", "AveragePool", "GlobalMaxPool",
                           "GlobalAveragePool", "MaxPoolGrad", "AveragePoolGrad",
                           "BatchNormalization", "BatchNormalizationTraining",
                           "BatchNormalizationGrad", "HardSigmoid", "HardSwish", "Softmax",
                           "LogSoftmax", "SoftmaxGrad", "LogSoftmaxGrad", "ClipByGlobalNorm",
                           "UnscaleGradients",
                           "DropoutTraining"})
      r[op] = floatsF32;
    r["AdamW"] = adamW;
    r["SGD"] = sgd;
    for (const char *op : {"LayerNormalization", "LayerNormalizationGrad", "RMSNormalization",
                           "RMSNormalizationGrad", "AccumulateGrad"})
      r[op] = lowIo;
    r["SoftmaxCrossEntropyLoss"] = sce;
    r["SoftmaxCrossEntropyLossGrad"] = sce;
    r["SoftmaxCrossEntropyLossWithGrad"] = sceWithGrad;
    r["MatMul"] = gemm;
    r["Gemm"] = gemm;
    r["TopK"] = topK;
    r["ScatterElements"] = scatterElements;
    r["GroupedMatMul"] = lowOrF32;
    r["GroupedMatMulGradWeight"] = lowOrF32;
    r["FusedElementwise"] = fused;
    r["FusedAttention"] = attention;
    r["FusedAttentionGrad"] = attention;
    r["FusedRotaryEmbedding"] = rotary;
    r["ReduceToShape"] = lowOrF32;
    for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                           "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                           "ReduceSumSquare"})
      r[op] = reduce;
    for (const char *op : {"Conv", "ConvGradInput", "ConvGradWeight"})
      r[op] = conv;
    return r;
  }();
  return table;
}

const CudaKernelTable &kernelTable() {
  static const CudaKernelTable table = [] {
    CudaKernelTable t;
    addAllKernels(t);
    return t;
  }();
  return table;
}

const std::set<std::string> &tableOps() {
  static const std::set<std::string> ops = [] {
    std::set<std::string> s;
    for (const auto &e : kernelTable().entries)
      s.insert(e.first);
    return s;
  }();
  return ops;
}

} // namespace

NativeSupport nativeSupport(const KernelSpec &spec) {
  NativeSupport r;
  const program::Kernel &k = *spec.kernel;
  if (!k.domain().empty() && k.domain() != "ai.onnx" && k.domain() != "strait" &&
      k.domain() != "ai.onnx.preview.training") {
    r.reason = "unknown op domain '" + k.domain() + "'";
    return r;
  }
  if (!tableOps().count(k.op())) {
    r.reason = "no CUDA kernel for op '" + k.op() + "'";
    return r;
  }
  auto rule = rules().find(k.op());
  if (rule == rules().end()) {
    r.reason = "no dtype rule for op '" + k.op() + "' in CudaSupport.cpp";
    return r;
  }
  r.reason = rule->second(spec);
  r.native = r.reason.empty();
  if (!r.native)
    return r;
  if (kernelTable().readsOnHost.count(k.op())) {
    r.hostWait = true;
    r.reason = "reads its integer input on the host first (runs outside the CUDA graphs)";
    return r;
  }
  // Integer operands read on the host (CudaSpatial.cpp's intsInputOrAttr).
  // A reduction reads its axes input on the host only on its first run when
  // the declared output shape determines the reduced dims.
  bool reduceOp = k.op().rfind("Reduce", 0) == 0 && k.op() != "ReduceToShape";
  if (reduceOp && in(spec, 1) && !in(spec, 1)->hostConstant) {
    bool keep = true;
    auto it = k.attrs().find("keepdims");
    if (it != k.attrs().end())
      keep = it->second.i() != 0;
    std::vector<bool> reduced;
    if (spec.outputs.empty() || !spec.outputs[0].present ||
        !reducedDimsFromShapes(in(spec, 0)->shape, spec.outputs[0].shape, keep, reduced)) {
      r.hostWait = true;
      r.reason = "reads its axes input on the host (the output shape leaves a choice)";
    }
  }
  if (k.op() == "TopK" && in(spec, 1) && !in(spec, 1)->hostConstant) {
    r.hostWait = true;
    r.reason = "reads its K input on the host";
  }
  if (k.op() == "Slice" && (in(spec, 1) || in(spec, 2) || in(spec, 3) || in(spec, 4))) {
    const auto &a = k.attrs();
    bool attrs = a.count("starts") || a.count("ends") || a.count("axes") || a.count("steps");
    const OperandType *x = in(spec, 0), *starts = in(spec, 1);
    bool constant = true; // every bound input has a host copy
    for (int i = 1; i <= 4; ++i)
      constant = constant && (!in(spec, i) || in(spec, i)->hostConstant);
    if (!x || (!constant && !sliceBoundsOnDevice(starts && in(spec, 2), attrs,
                                                 static_cast<int64_t>(x->shape.size()),
                                                 starts ? numElements(starts->shape) : 0))) {
      r.hostWait = true;
      r.reason = "reads starts/ends/axes/steps inputs on the host";
    }
  }
  return r;
}

std::vector<KernelSpec> kernelSpecs(const program::Program &program) {
  std::map<uint32_t, const program::Value *> values;
  for (const program::Value &v : program.values())
    values[v.id()] = &v;
  auto operand = [&](uint32_t id) {
    OperandType t;
    auto it = values.find(id);
    if (id == kAbsentValue || it == values.end())
      return t;
    t.present = true;
    t.dtype = it->second->dtype();
    t.shape.assign(it->second->shape().begin(), it->second->shape().end());
    // As Executor::allocate keeps them (Tensor::host).
    t.hostConstant = it->second->role() == program::ROLE_CONSTANT &&
                     (t.dtype == program::DTYPE_I64 || t.dtype == program::DTYPE_I32) &&
                     numElements(t.shape) <= 1024;
    return t;
  };
  std::vector<KernelSpec> specs;
  for (const program::Kernel &k : program.kernels()) {
    KernelSpec s;
    s.kernel = &k;
    for (uint32_t id : k.inputs())
      s.inputs.push_back(operand(id));
    for (uint32_t id : k.outputs())
      s.outputs.push_back(operand(id));
    specs.push_back(std::move(s));
  }
  return specs;
}

std::string kernelSignature(const KernelSpec &spec) {
  auto list = [](const std::vector<OperandType> &ts) {
    std::string out;
    for (const OperandType &t : ts)
      out += (out.empty() ? "" : ", ") + (t.present ? name(t.dtype) : std::string("-"));
    return "(" + out + ")";
  };
  return spec.kernel->op() + list(spec.inputs) + " -> " + list(spec.outputs);
}

std::vector<std::string> cudaKernelOps() {
  return std::vector<std::string>(tableOps().begin(), tableOps().end());
}

std::vector<std::string> cudaSupportRuleOps() {
  std::vector<std::string> ops;
  for (const auto &e : rules())
    ops.push_back(e.first);
  return ops;
}

} // namespace cuda

std::string cudaSupportNote(const program::Program &program) {
  // Signature -> (count, reason), separately for the host fallback and for
  // native kernels that wait on the host.
  std::map<std::string, std::pair<int64_t, std::string>> host, wait;
  int64_t total = 0, nHost = 0, nWait = 0;
  for (const cuda::KernelSpec &spec : cuda::kernelSpecs(program)) {
    ++total;
    cuda::NativeSupport s = cuda::nativeSupport(spec);
    if (s.native && !s.hostWait)
      continue;
    auto &bucket = s.native ? wait : host;
    (s.native ? nWait : nHost) += 1;
    auto &e = bucket[cuda::kernelSignature(spec)];
    ++e.first;
    e.second = s.reason;
  }
  auto list = [](const std::map<std::string, std::pair<int64_t, std::string>> &m) {
    std::string out;
    size_t shown = 0;
    for (const auto &[sig, e] : m) {
      if (shown++ == 6) {
        out += "; ... (" + std::to_string(m.size() - 6) + " more signatures)";
        break;
      }
      out += (out.empty() ? "" : "; ") + sig + (e.first > 1 ? " x" + std::to_string(e.first) : "") +
             (e.second.empty() ? "" : ": " + e.second);
    }
    return out;
  };
  std::string note;
  if (nHost)
    note = "cuda: " + std::to_string(nHost) + " of " + std::to_string(total) +
           " kernels will run on the host (CPU kernel on managed memory): " + list(host);
  if (nWait)
    note += std::string(note.empty() ? "" : "\n") + "cuda: " + std::to_string(nWait) + " of " +
            std::to_string(total) +
            " kernels wait on the host for an integer input (no CUDA graph for their segment, "
            "or for them alone): " +
            list(wait);
  return note;
}
} // namespace rt
} // namespace strait
