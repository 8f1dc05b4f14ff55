//===- Export.cpp - Graph IR to per-device runtime programs ---------------===//

#include "strait/Target/DeviceProgram/Export.h"

#include "KernelLowering.h"

#include "strait/Dialect/Dist/DistOps.h"
#include "strait/Dialect/Graph/GraphOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>

using namespace mlir;
using namespace strait;
using namespace strait::exporter;
namespace pb = strait::program;

namespace {

/// Builds the step list: kernels gather into `run` steps, each communication
/// op closes the current one and becomes a step of its own.
class StepBuilder {
public:
  StepBuilder(pb::Program &program, const RankExport &self, const StageRanks &stageRanks)
      : program(program), self(self), stageRanks(stageRanks) {}

  pb::RunKernels &run() {
    if (!current) {
      pb::Step *step = newStep(phase);
      current = step->mutable_run();
    }
    return *current;
  }
  /// Whether the step being filled ends with kernel `id` (a kernel that
  /// nothing has run after yet).
  bool endsWith(uint32_t id) const {
    return current && current->kernel_ids_size() &&
           current->kernel_ids(current->kernel_ids_size() - 1) == id;
  }
  pb::Step *newStep(const std::string &label) {
    pb::Step *step = program.add_steps();
    step->set_id(program.steps_size() - 1);
    step->set_label(microBatch < 0 ? label : label + " mb" + std::to_string(microBatch));
    step->set_micro_batch(microBatch);
    current = nullptr;
    return step;
  }
  /// Steps created from now on belong to micro-batch `m` (-1: per step).
  void setMicroBatch(int m) {
    microBatch = m;
    current = nullptr;
  }
  /// Whether transfers created from now on are deferred (1F1B).
  void setDeferTransfers(bool on) { defer = on; }
  bool deferTransfers() const { return defer; }
  /// This rank's pipeline stage and the job's stage count (0 and 1 for a
  /// single-stage program).
  int stage() const { return std::max(0, self.stage); }
  int numStages() const { return std::max<int>(1, stageRanks.size()); }
  /// Kernel steps created from now on are labelled `name` ("forward",
  /// "backward", "update").
  void setPhase(const char *name) {
    if (phase != name)
      current = nullptr;
    phase = name;
  }
  /// The rank of the replica of stage `peer` that talks to this rank.
  FailureOr<int> peerRank(Operation *op, int64_t peer) const {
    if (self.stage < 0 || static_cast<size_t>(self.stage) >= stageRanks.size() ||
        peer < 0 || static_cast<size_t>(peer) >= stageRanks.size())
      return op->emitError() << "cannot resolve peer stage " << peer << " of stage "
                             << self.stage << ": the job has " << stageRanks.size()
                             << " stages";
    const std::vector<int> &mine = stageRanks[self.stage], &theirs = stageRanks[peer];
    if (mine.size() != theirs.size())
      return op->emitError() << "stage " << self.stage << " has " << mine.size()
                             << " replicas but peer stage " << peer << " has "
                             << theirs.size()
                             << "; only equal replica counts are exported";
    return theirs[self.replica];
  }

private:
  pb::Program &program;
  const RankExport &self;
  const StageRanks &stageRanks;
  pb::RunKernels *current = nullptr;
  int microBatch = -1;
  bool defer = false;
  const char *phase = "forward";
};

/// The runtime's codec enum of a dist codec.
void fillCodec(dist::Codec codec, pb::CodecParams &params) {
  switch (codec) {
  case dist::Codec::topk: params.set_codec(pb::CODEC_TOPK); break;
  case dist::Codec::int8: params.set_codec(pb::CODEC_INT8); break;
  case dist::Codec::int4: params.set_codec(pb::CODEC_INT4); break;
  case dist::Codec::fp16: params.set_codec(pb::CODEC_FP16); break;
  case dist::Codec::bf16: params.set_codec(pb::CODEC_BF16); break;
  case dist::Codec::topk_int8: params.set_codec(pb::CODEC_TOPK_INT8); break;
  case dist::Codec::topk_int4: params.set_codec(pb::CODEC_TOPK_INT4); break;
  case dist::Codec::int2: params.set_codec(pb::CODEC_INT2); break;
  case dist::Codec::int3: params.set_codec(pb::CODEC_INT3); break;
  case dist::Codec::aqsgd_int2: params.set_codec(pb::CODEC_AQSGD_INT2); break;
  case dist::Codec::aqsgd_int3: params.set_codec(pb::CODEC_AQSGD_INT3); break;
  case dist::Codec::aqsgd_int4: params.set_codec(pb::CODEC_AQSGD_INT4); break;
  }
}

/// The runtime's codec parameters of a dist.compress / dist.decompress.
template <typename CodecOp>
void fillCodec(CodecOp op, pb::CodecParams &params) {
  fillCodec(op.getCodec(), params);
  if (FloatAttr ratio = op.getRatioAttr())
    params.set_topk_ratio(static_cast<float>(ratio.getValueAsDouble()));
  if (IntegerAttr block = op.getBlockAttr())
    params.set_block_size(static_cast<uint32_t>(block.getInt()));
}

/// The local dist.decompress of a dist.compress whose bytes are sent (a
/// tied variable's partial gradient: the sender goes on with the decoded
/// value), if any.
dist::DecompressOp localDecompressOf(dist::CompressOp c) {
  for (Operation *u : c.getEncoded().getUsers())
    if (auto d = dyn_cast<dist::DecompressOp>(u))
      return d;
  return dist::DecompressOp();
}

/// The dist.compress feeding a transfer, if any; it must feed only it, or
/// sends and one local dist.decompress (keep_decoded / repeat_payload).
FailureOr<dist::CompressOp> compressOf(Value v) {
  auto c = v.getDefiningOp<dist::CompressOp>();
  if (!c || c.getEncoded().hasOneUse())
    return c;
  unsigned sends = 0, decodes = 0;
  for (Operation *u : c.getEncoded().getUsers()) {
    sends += isa<dist::SendOp>(u);
    decodes += isa<dist::DecompressOp>(u);
  }
  if (decodes == 1 && sends >= 1 && sends + decodes == std::distance(c.getEncoded().use_begin(),
                                                                     c.getEncoded().use_end()))
    return c;
  return c.emitError("dist.compress must feed exactly one dist.send or dist.all_reduce, or "
                     "dist.sends and one local dist.decompress, to be folded into the "
                     "program's transfers");
}

/// The dist.decompress reading a transfer's result, if any; it must be the
/// result's only user.
FailureOr<dist::DecompressOp> decompressOf(Value v) {
  auto it = llvm::find_if(v.getUsers(), [](Operation *u) { return isa<dist::DecompressOp>(u); });
  if (it == v.getUsers().end())
    return dist::DecompressOp();
  auto d = cast<dist::DecompressOp>(*it);
  if (!v.hasOneUse())
    return d.emitError("dist.decompress must be the only user of the received bytes to "
                       "be folded into the program's transfer");
  return d;
}

LogicalResult exportComm(Operation *op, ValueTable &values, StepBuilder &steps) {
  // Codecs fold into the transfers: the program moves the plain value, the
  // runtime encodes on the wire (CodecParams).
  if (auto c = dyn_cast<dist::CompressOp>(op)) {
    if (c.getEncoded().hasOneUse() &&
        isa<dist::SendOp, dist::AllReduceOp>(*c.getEncoded().getUsers().begin()))
      return success();
    if (localDecompressOf(c))
      return failed(compressOf(c.getEncoded())) ? failure() : success();
    return op->emitError("dist.compress must feed exactly one dist.send or dist.all_reduce "
                         "to be exported");
  }
  if (auto d = dyn_cast<dist::DecompressOp>(op)) {
    if (isa_and_nonnull<dist::RecvOp, dist::AllReduceOp>(d.getEncoded().getDefiningOp()))
      return success();
    // A sender's decoded value: its first send writes it (keep_decoded).
    if (auto c = d.getEncoded().getDefiningOp<dist::CompressOp>())
      if (succeeded(compressOf(c.getEncoded())) && values.lookup(d.getResult()))
        return success();
    return op->emitError("dist.decompress must read a dist.recv, a dist.all_reduce, or a "
                         "dist.compress after its first dist.send, to be exported");
  }
  if (auto send = dyn_cast<dist::SendOp>(op)) {
    FailureOr<dist::CompressOp> codec = compressOf(send.getValue());
    if (failed(codec))
      return failure();
    Value plain = *codec ? codec->getValue() : send.getValue();
    std::optional<uint32_t> id = values.lookup(plain);
    FailureOr<int> peer = steps.peerRank(op, send.getPeer());
    if (!id || failed(peer))
      return failure();
    // Sends of a value that the sender goes on with decoded: the first in
    // block order encodes and replaces the value by the decoded payload
    // (the local dist.decompress becomes the same value); the others send
    // its payload again.
    dist::DecompressOp local = *codec ? localDecompressOf(*codec) : dist::DecompressOp();
    bool firstSend = true;
    if (local) {
      if (!plain.hasOneUse())
        return codec->emitError("the value a sender replaces by its decoded payload has "
                                "other users than its dist.compress");
      for (Operation *u : codec->getEncoded().getUsers())
        if (isa<dist::SendOp>(u) && u->isBeforeInBlock(op))
          firstSend = false;
      if (firstSend) {
        if (local->isBeforeInBlock(op))
          return local.emitError("the sender's dist.decompress must follow the first dist.send "
                                 "of its bytes (which writes the decoded value)");
        values.alias(local.getResult(), *id);
      }
    }
    pb::Send *s = steps.newStep("send ch" + std::to_string(send.getChannel()))
                      ->mutable_send();
    s->set_value_id(*id);
    s->set_peer(*peer);
    s->set_channel(send.getChannel());
    s->set_deferred(steps.deferTransfers());
    if (local) {
      s->set_keep_decoded(firstSend);
      s->set_repeat_payload(!firstSend);
    }
    if (*codec) {
      fillCodec(*codec, *s->mutable_codec());
      s->mutable_codec()->set_error_feedback(codec->getErrorFeedback() && firstSend);
      // Adaptive top-k (dist-insert-compression adaptive-topk): the bounds.
      if (auto adapt = (*codec)->getAttrOfType<DenseF64ArrayAttr>("dist.topk_adapt")) {
        if (adapt.size() != 2 || codec->getCodec() != dist::Codec::topk)
          return codec->emitError("dist.topk_adapt must be [min, max] on a top-k dist.compress");
        s->mutable_codec()->set_adapt(true);
        s->mutable_codec()->set_ratio_min(static_cast<float>(adapt[0]));
        s->mutable_codec()->set_ratio_max(static_cast<float>(adapt[1]));
      }
    }
    return success();
  }
  if (auto recv = dyn_cast<dist::RecvOp>(op)) {
    FailureOr<int> peer = steps.peerRank(op, recv.getPeer());
    FailureOr<dist::DecompressOp> codec = decompressOf(recv.getResult());
    if (failed(peer) || failed(codec))
      return failure();
    Value plain = *codec ? codec->getResult() : recv.getResult();
    uint32_t id = values.get(plain, pb::ROLE_ACTIVATION,
                             "recv.ch" + std::to_string(recv.getChannel()));
    pb::Recv *r = steps.newStep("recv ch" + std::to_string(recv.getChannel()))
                      ->mutable_recv();
    r->set_value_id(id);
    r->set_peer(*peer);
    r->set_channel(recv.getChannel());
    r->set_deferred(steps.deferTransfers());
    if (*codec)
      fillCodec(*codec, *r->mutable_codec());
    return success();
  }
  if (auto reduce = dyn_cast<dist::AllReduceOp>(op)) {
    FailureOr<dist::CompressOp> encode = compressOf(reduce.getValue());
    if (failed(encode))
      return failure();
    FailureOr<dist::DecompressOp> decode = decompressOf(reduce.getResult());
    if (failed(decode))
      return failure();
    if (bool(*encode) != bool(*decode))
      return op->emitError("a compressed all-reduce needs dist.compress before and "
                           "dist.decompress after it");
    Value plain = *encode ? encode->getValue() : reduce.getValue();
    std::optional<uint32_t> id = values.lookup(plain);
    if (!id)
      return op->emitError("all-reduced value is not produced in the function");
    values.alias(*decode ? decode->getResult() : reduce.getResult(), *id);
    pb::AllReduce *a =
        steps.newStep("all_reduce ch" + std::to_string(reduce.getChannel()))
            ->mutable_all_reduce();
    a->add_value_ids(*id);
    for (int64_t r : reduce.getGroup())
      a->add_ranks(r);
    a->set_reduce(reduce.getReduction() == dist::Reduction::mean ? pb::REDUCE_MEAN
                                                                 : pb::REDUCE_SUM);
    a->set_channel(reduce.getChannel());
    if (ArrayAttr islands = reduce.getIslandsAttr())
      for (auto group : islands.getAsRange<DenseI64ArrayAttr>()) {
        pb::RankGroup *g = a->add_islands();
        for (int64_t r : group.asArrayRef())
          g->add_ranks(r);
      }
    if (*encode && (*encode)->hasAttr("dist.topk_adapt"))
      return encode->emitError("dist.topk_adapt on an all-reduce's codec: every replica must "
                               "apply the same codec, so an all-reduce never adapts");
    if (*encode) {
      fillCodec(*encode, *a->mutable_codec());
      a->mutable_codec()->set_error_feedback(encode->getErrorFeedback());
      // Compressed AdamW: exact sums while the second moment warms up.
      if (auto exact = (*encode)->getAttrOfType<IntegerAttr>("dist.exact_steps")) {
        if (exact.getInt() < 0 || exact.getInt() > UINT32_MAX)
          return encode->emitError("dist.exact_steps must be in [0, 2^32), got ")
                 << exact.getInt();
        a->mutable_codec()->set_exact_steps(static_cast<uint32_t>(exact.getInt()));
      }
      // ... or the warm-up codec's sums (dense, with error feedback).
      if (auto warm = (*encode)->getAttrOfType<dist::CodecAttr>("dist.warmup_codec")) {
        pb::CodecParams w;
        fillCodec(warm.getValue(), w);
        a->mutable_codec()->set_warmup_codec(w.codec());
      }
    }
    return success();
  }
  return op->emitError("op '") << op->getName() << "' has no program step";
}

/// graph.FusedElementwise as the runtime's FusedElementwise kernel (domain
/// "strait"): the program as attributes ops (opcode names), args (3
/// registers per instruction), constants and outputs; see
/// docs/program-format.md.
LogicalResult lowerFused(graph::FusedElementwiseOp op, ValueTable &values, pb::Kernel &k) {
  k.set_op("FusedElementwise");
  k.set_domain("strait");
  k.set_opset(1);
  if (auto nameLoc = dyn_cast<NameLoc>(op->getLoc()))
    k.set_name(nameLoc.getName().str());
  for (Value v : op.getInputs()) {
    std::optional<uint32_t> id = values.lookup(v);
    if (!id)
      return op.emitError("operand is not defined before this op in the exported function");
    k.add_inputs(*id);
  }
  for (Value r : op.getY())
    k.add_outputs(values.get(r, pb::ROLE_ACTIVATION));
  auto &attrs = *k.mutable_attrs();
  for (auto code : op.getOps().getAsRange<graph::FusedOpcodeAttr>())
    attrs["ops"].mutable_strings()->add_v(graph::stringifyFusedOpcode(code.getValue()).str());
  for (int32_t a : op.getArgs())
    attrs["args"].mutable_ints()->add_v(a);
  // An empty list still names its kind.
  attrs["constants"].mutable_floats();
  for (float c : op.getConstants())
    attrs["constants"].mutable_floats()->add_v(c);
  for (int32_t r : op.getOutputs())
    attrs["outputs"].mutable_ints()->add_v(r);
  return success();
}

} // namespace

LogicalResult strait::exportProgram(func::FuncOp func, int rank, int worldSize,
                                    StringRef device, pb::Program &program) {
  RankExport self;
  self.rank = rank;
  self.device = device.str();
  return exportProgram(func, self, worldSize, {}, program);
}

namespace {

/// Lowers the ops of one function into a program, once or once per
/// micro-batch.
class ProgramLowering {
public:
  ProgramLowering(func::FuncOp func, pb::Program &program, StepBuilder &steps,
                  int microBatches, bool parameterCopies, const PipelineOrder &order)
      : func(func), program(program), steps(steps), microBatches(microBatches),
        parameterCopies(parameterCopies), pipelineOrder(order) {}

  LogicalResult run(ValueTable &values);

private:
  LogicalResult lowerLeaf(Operation &op, ValueTable &values);
  LogicalResult lowerOp(Operation &op, ValueTable &values);
  LogicalResult lowerReturn(func::ReturnOp ret, ValueTable &values);
  LogicalResult lowerParameterCopies(Block &body, ValueTable &values);
  bool mergeIntoPrevious(const pb::Kernel &k);
  LogicalResult sliceBatchInputs(ValueTable &base, ValueTable &mb, int m);

  func::FuncOp func;
  pb::Program &program;
  StepBuilder &steps;
  int microBatches;
  bool parameterCopies;
  const PipelineOrder &pipelineOrder;
  /// Kernel ids of forward ops, per micro-batch.
  SmallVector<DenseMap<int64_t, uint32_t>> kernelOfOpId{1};
  size_t currentMicroBatch = 0;
  SmallVector<BlockArgument> batchArgs;
  /// Casts lowered into the `once` step, and per variable the value of its
  /// 16-bit copy that AdamW keeps up to date.
  llvm::DenseSet<Operation *> onceOps;
  llvm::StringMap<uint32_t> copyOfVariable;
};

} // namespace

LogicalResult ProgramLowering::lowerLeaf(Operation &op, ValueTable &values) {
  if (isa<graph::ReadVariableOp>(op))
    return success(); // one value per variable, made beforehand
  auto c = cast<graph::ConstantOp>(op);
  std::string name;
  if (auto loc = dyn_cast<NameLoc>(c.getLoc()))
    name = loc.getName().str();
  uint32_t id = values.get(c.getResult(), pb::ROLE_CONSTANT, name);
  if (failed(fillTensorData(c.getValue(), *values.at(id).mutable_constant())))
    return c.emitError("constant cannot be exported");
  return success();
}

/// Whether AccumulateGrad `acc` of a one-micro-batch step can be skipped:
/// its total would be the gradient itself (widened to f32 when it is
/// 16-bit), and every reader is an optimizer whose kernel reads an f32,
/// bf16 or f16 gradient, widening it on load exactly as AccumulateGrad
/// would. The update is then bit-identical, without the copy and without a
/// persistent f32 gradient per variable. An all-reduce, a clip, a transfer
/// or an output still gets the f32 total.
static bool optimizerReadsGradient(graph::AccumulateGradOp acc) {
  Type elt = getElementTypeOrSelf(acc.getGrad().getType());
  return (elt.isF32() || elt.isBF16() || elt.isF16()) && !acc.getResult().use_empty() &&
         llvm::all_of(acc.getResult().getUsers(),
                      [](Operation *u) { return isa<graph::AdamWOp, graph::SGDOp>(u); });
}

/// The variable `v` reads, or null.
static StringAttr variableRead(Value v) {
  auto read = v.getDefiningOp<graph::ReadVariableOp>();
  return read ? read.getVariableAttr().getAttr() : StringAttr();
}

/// Casts of a variable to bf16 / f16 (autocast's weight casts) leave the
/// iteration: they become one `once` step, run when the parameters are
/// loaded, whose results are persistent ROLE_PARAMETER_COPY values (one per
/// variable and type). That is exact where the variable does not change
/// during the step and every later value is written by the step's AdamW: a
/// variable no op assigns (frozen, or a forward-only program), or one that
/// AdamW updates, which then also writes the copy of the new value (a
/// fourth output group; the rounding is Cast's). Other variables (SGD's,
/// BatchNormalization's running statistics) keep their per-step casts.
LogicalResult ProgramLowering::lowerParameterCopies(Block &body, ValueTable &values) {
  llvm::DenseSet<StringAttr> assigned, adamW;
  for (Operation &op : body.without_terminator()) {
    if (auto assign = dyn_cast<graph::AssignVariableOp>(op))
      assigned.insert(assign.getVariableAttr().getAttr());
    if (auto adam = dyn_cast<graph::AdamWOp>(op))
      if (StringAttr var = variableRead(adam.getParam()))
        adamW.insert(var);
  }
  pb::RunKernels *run = nullptr;
  llvm::DenseMap<std::pair<StringAttr, Type>, uint32_t> copies;
  for (Operation &op : body.without_terminator()) {
    auto castOp = dyn_cast<graph::CastOp>(op);
    StringAttr var = castOp ? variableRead(castOp.getInput()) : StringAttr();
    if (!var || (assigned.contains(var) && !adamW.contains(var)))
      continue;
    Type from = getElementTypeOrSelf(castOp.getInput().getType());
    Type to = getElementTypeOrSelf(castOp.getType());
    if (!from.isF32() || !(to.isBF16() || to.isF16()))
      continue;
    onceOps.insert(&op);
    if (auto it = copies.find({var, to}); it != copies.end()) {
      values.alias(castOp.getResult(), it->second);
      continue;
    }
    if (!run) {
      pb::Step *step = steps.newStep("init");
      step->set_once(true);
      run = step->mutable_run();
    }
    pb::Kernel *k = program.add_kernels();
    k->set_id(program.kernels_size() - 1);
    if (failed(lowerToKernel(&op, values, *k)))
      return failure();
    run->add_kernel_ids(k->id());
    pb::Value &copy = values.at(k->outputs(0));
    copy.set_role(pb::ROLE_PARAMETER_COPY);
    copy.set_name(var.str() + (to.isBF16() ? ".bf16" : ".f16"));
    copies[{var, to}] = k->outputs(0);
    // AdamW writes one copy per variable (the first cast's type).
    if (adamW.contains(var))
      copyOfVariable.try_emplace(var.getValue(), k->outputs(0));
  }
  return success();
}

/// Appends AdamW kernel `k` (the program's last, just lowered) to the kernel
/// before it when that is an AdamW with the same learning rate, step and
/// attributes that the current step ends with (only variable reads and
/// writes, which are no kernels, came between them): the optimizer's
/// updates become one multi-tensor kernel (lr, step, X..., G..., M..., V...
/// -> X..., M..., V...), which the CUDA backend runs in a few launches
/// instead of one per variable. Under loss scaling the kernels share a
/// trailing found_inf input, which the merged kernel keeps once.
bool ProgramLowering::mergeIntoPrevious(const pb::Kernel &k) {
  int flag = k.inputs_size() - 6; // 1: a trailing found_inf
  if (k.op() != "AdamW" || program.kernels_size() < 2 || (flag != 0 && flag != 1) ||
      (k.outputs_size() != 3 && k.outputs_size() != 4))
    return false;
  pb::Kernel &prev = *program.mutable_kernels(program.kernels_size() - 2);
  int n = (prev.inputs_size() - 2 - flag) / 4;
  if (prev.op() != k.op() || prev.domain() != k.domain() || !steps.endsWith(prev.id()) ||
      prev.inputs_size() < 6 + flag || (prev.inputs_size() - 2 - flag) % 4 ||
      (prev.outputs_size() != 3 * n && prev.outputs_size() != 4 * n) ||
      prev.inputs(0) != k.inputs(0) || prev.inputs(1) != k.inputs(1) ||
      (flag && prev.inputs(prev.inputs_size() - 1) != k.inputs(6)) ||
      prev.attrs_size() != k.attrs_size())
    return false;
  for (const auto &[name, attr] : k.attrs()) {
    auto it = prev.attrs().find(name);
    if (it == prev.attrs().end() || it->second.SerializeAsString() != attr.SerializeAsString())
      return false;
  }
  // Rebuild the operand lists with k's tensor appended to each group; the
  // parameters' 16-bit copies (a fourth output group where any tensor has
  // one) are absent for the tensors without.
  std::vector<uint32_t> ins(prev.inputs().begin(), prev.inputs().begin() + 2);
  for (int g = 0; g < 4; ++g) {
    ins.insert(ins.end(), prev.inputs().begin() + 2 + g * n, prev.inputs().begin() + 2 + (g + 1) * n);
    ins.push_back(k.inputs(2 + g));
  }
  if (flag)
    ins.push_back(k.inputs(6));
  int groups = std::max<int>(prev.outputs_size() / n, k.outputs_size());
  std::vector<uint32_t> outs;
  for (int g = 0; g < groups; ++g) {
    for (int i = 0; i < n; ++i)
      outs.push_back(g * n + i < prev.outputs_size() ? prev.outputs(g * n + i) : kAbsentValue);
    outs.push_back(g < k.outputs_size() ? k.outputs(g) : kAbsentValue);
  }
  prev.mutable_inputs()->Assign(ins.begin(), ins.end());
  prev.mutable_outputs()->Assign(outs.begin(), outs.end());
  return true;
}

LogicalResult ProgramLowering::lowerOp(Operation &op, ValueTable &values) {
  if (isa<graph::AssignVariableOp>(op) || onceOps.contains(&op))
    return success(); // the producer writes the variable's value; a once cast ran
  if (auto acc = dyn_cast<graph::AccumulateGradOp>(op);
      acc && microBatches <= 1 && optimizerReadsGradient(acc))
    if (std::optional<uint32_t> grad = values.lookup(acc.getGrad())) {
      values.alias(acc.getResult(), *grad);
      return success();
    }
  if (isa<dist::DistDialect>(op.getDialect()))
    return exportComm(&op, values, steps);
  if (!isa<graph::GraphDialect>(op.getDialect()))
    return op.emitError("op of dialect '")
           << op.getDialect()->getNamespace() << "' cannot be exported to a program";
  // Loss scaling unscales a gradient in place where the op is its only
  // reader (the accumulated, all-reduced total): no second buffer per
  // gradient (the kernels read and write each element at one index).
  if (auto unscale = dyn_cast<graph::UnscaleGradientsOp>(op))
    for (auto [g, u] : llvm::zip(unscale.getGrads(), unscale.getUnscaled()))
      if (g.hasOneUse() && g.getType() == u.getType())
        if (std::optional<uint32_t> id = values.lookup(g))
          values.alias(u, *id);
  pb::Kernel *k = program.add_kernels();
  k->set_id(program.kernels_size() - 1);
  auto fused = dyn_cast<graph::FusedElementwiseOp>(op);
  if (failed(fused ? lowerFused(fused, values, *k) : lowerToKernel(&op, values, *k)))
    return failure();
  if (auto adam = dyn_cast<graph::AdamWOp>(op))
    if (StringAttr var = variableRead(adam.getParam()))
      if (auto it = copyOfVariable.find(var.getValue()); it != copyOfVariable.end())
        k->add_outputs(it->second);
  if (mergeIntoPrevious(*k)) {
    program.mutable_kernels()->RemoveLast();
    return success();
  }
  DenseMap<int64_t, uint32_t> &forwardKernels = kernelOfOpId[currentMicroBatch];
  if (auto id = op.getAttrOfType<IntegerAttr>("graph.op_id"))
    forwardKernels[id.getInt()] = k->id();
  if (auto gradOf = op.getAttrOfType<IntegerAttr>("graph.grad_of"))
    if (auto it = forwardKernels.find(gradOf.getInt()); it != forwardKernels.end())
      k->set_forward_kernel(it->second + 1);
  // The mean gradient over micro-batches persists across them; the program's
  // micro-batch count is the one it averages over.
  if (isa<graph::AccumulateGradOp>(op)) {
    values.at(k->outputs(0)).set_role(pb::ROLE_GRADIENT);
    (*k->mutable_attrs())["micro_batches"].set_i(microBatches);
  }
  steps.run().add_kernel_ids(k->id());
  return success();
}

LogicalResult ProgramLowering::lowerReturn(func::ReturnOp ret, ValueTable &values) {
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    std::optional<uint32_t> id = values.lookup(v);
    if (!id)
      return ret.emitError("returned value is not produced in the function");
    pb::Value &pv = values.at(*id);
    if (pv.role() != pb::ROLE_ACTIVATION)
      return ret.emitError("output ") << i << " is an input, weight or constant; "
                                              "only computed values can be outputs";
    pv.set_role(pb::ROLE_OUTPUT);
    if (auto name = func.getResultAttrOfType<StringAttr>(i, "graph.name"))
      pv.set_name(name.str());
  }
  return success();
}

/// Micro-batch `m` reads rows [m*b, (m+1)*b) of each batch input.
LogicalResult ProgramLowering::sliceBatchInputs(ValueTable &base, ValueTable &mb, int m) {
  for (BlockArgument arg : batchArgs) {
    uint32_t full = *base.lookup(arg);
    int64_t rows = cast<ShapedType>(arg.getType()).getDimSize(0);
    mb.erase(arg);
    uint32_t part = mb.get(arg, pb::ROLE_ACTIVATION,
                           program.values(full).name() + ".mb" + std::to_string(m));
    pb::Kernel *k = program.add_kernels();
    k->set_id(program.kernels_size() - 1);
    k->set_op("Slice");
    k->set_opset(18);
    for (uint32_t in : {full, mb.constInts({m * rows}), mb.constInts({(m + 1) * rows}),
                        mb.constInts({0})})
      k->add_inputs(in);
    k->add_outputs(part);
    steps.run().add_kernel_ids(k->id());
  }
  return success();
}

LogicalResult ProgramLowering::run(ValueTable &values) {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  // Backward ops: those autodiff tagged, the transfers dist-insert-comm
  // marked as carrying backward values, and every op reading their results.
  llvm::DenseSet<Operation *> backward;
  for (Operation &op : body.without_terminator())
    if (op.hasAttr("graph.grad_of") || op.hasAttr("dist.backward") ||
        llvm::any_of(op.getOperands(), [&](Value v) {
          Operation *d = v.getDefiningOp();
          return d && backward.contains(d);
        }))
      backward.insert(&op);
  auto phaseOf = [&](Operation &op) {
    return backward.contains(&op) ? "backward" : "forward";
  };
  if (parameterCopies && failed(lowerParameterCopies(body, values)))
    return failure();
  if (microBatches <= 1) {
    for (Operation &op : body.without_terminator()) {
      // Leaves are values, not kernels: they do not end a step (the
      // optimizer's variable reads would otherwise split the update).
      bool leaf = isa<graph::ReadVariableOp, graph::ConstantOp>(op);
      if (!leaf)
        steps.setPhase(phaseOf(op));
      if (failed(leaf ? lowerLeaf(op, values) : lowerOp(op, values)))
        return failure();
    }
    return lowerReturn(ret, values);
  }
  // Per-step ops: those after the gradient accumulation (all-reduce, clipping,
  // optimizer) and the transfers dist-insert-comm marked dist.per_step (a
  // recv of another stage's accumulated partial gradient of a tied
  // variable); every other op runs once per micro-batch.
  llvm::DenseSet<Operation *> perStep;
  for (Operation &op : body.without_terminator())
    if (llvm::any_of(op.getOperands(), [&](Value v) {
          Operation *d = v.getDefiningOp();
          return d && (isa<graph::AccumulateGradOp>(d) || perStep.contains(d));
        }) || isa<graph::AssignVariableOp>(op) || op.hasAttr("dist.per_step"))
      perStep.insert(&op);
  for (Operation &op : body.without_terminator()) {
    if (isa<graph::ReadVariableOp, graph::ConstantOp>(op) && failed(lowerLeaf(op, values)))
      return failure();
    // Values shared by all micro-batches: accumulated gradients and outputs
    // (the last micro-batch's value is the output).
    if (auto acc = dyn_cast<graph::AccumulateGradOp>(op))
      values.get(acc.getResult(), pb::ROLE_GRADIENT);
  }
  for (Value v : ret.getOperands())
    if (v.getDefiningOp() && !perStep.contains(v.getDefiningOp()))
      values.get(v, pb::ROLE_ACTIVATION);
  // The output named "loss" (an f32 scalar) is the mean of the micro-batches'
  // losses, summed in micro-batch order (so GPipe and 1F1B agree bit for
  // bit): each micro-batch writes its own "loss.mb<m>" and a Mean kernel of
  // the update writes "loss". Every other output holds the last micro-batch's
  // value.
  SmallVector<Value> averaged;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto name = func.getResultAttrOfType<StringAttr>(i, "graph.name");
    auto type = dyn_cast<ShapedType>(v.getType());
    if (name && name.getValue() == "loss" && v.getDefiningOp() &&
        !perStep.contains(v.getDefiningOp()) && type && type.hasStaticShape() &&
        type.getNumElements() == 1 && type.getElementType().isF32() &&
        !llvm::is_contained(averaged, v))
      averaged.push_back(v);
  }
  // Batch inputs hold all micro-batches, stacked along dimension 0.
  for (BlockArgument arg : func.getArguments()) {
    auto type = cast<ShapedType>(arg.getType());
    if (type.getRank() == 0 || type.isDynamicDim(0) ||
        llvm::all_of(arg.getUsers(), [&](Operation *u) { return perStep.contains(u); }))
      continue;
    batchArgs.push_back(arg);
    values.at(*values.lookup(arg)).set_shape(0, type.getDimSize(0) * microBatches);
  }
  // GPipe order: the forwards of every micro-batch, then their backwards,
  // then the update. Each rank's transfers then follow one order that all
  // ranks share (phase, micro-batch, position in the original block, where
  // every recv follows its send), so blocking transfers cannot wait on each
  // other in a cycle, and stage s+1 computes micro-batch m while stage s
  // computes m+1; every stage holds the activations of all M micro-batches.
  // 1F1B order: stage s of S runs the forwards of w micro-batches (at least
  // the classic min(S-1-s, M); more where the planner costed a warm-up that
  // covers the round trip of slow links), then the forward of m+w and the
  // backward of m alternately, then the last backwards: it holds at most
  // w+1 micro-batches' activations. The backwards still run in micro-batch
  // order (the gradient sums are GPipe's, bit for bit), but the ranks'
  // orders differ, so a blocking send could wait on a peer that waits on
  // this rank: the transfers are deferred (the runtime sends without
  // waiting for the receive, docs/distribution-dialect.md).
  std::vector<std::pair<bool, int>> order; // (backward, micro-batch)
  bool oneFOneB = pipelineOrder.oneFOneB;
  int warmup = oneFOneB ? static_cast<int>(pipelineOrder.warmupOf(steps.stage(),
                                                                  steps.numStages(), microBatches))
                        : microBatches;
  for (int m = 0; m < warmup; ++m)
    order.push_back({false, m});
  for (int m = 0; m < microBatches; ++m) {
    if (oneFOneB && m + warmup < microBatches)
      order.push_back({false, m + warmup});
    order.push_back({true, m});
  }
  std::vector<ValueTable> tables;
  tables.reserve(microBatches);
  for (int m = 0; m < microBatches; ++m) {
    tables.push_back(values);
    for (Value v : averaged) {
      tables[m].erase(v);
      tables[m].get(v, pb::ROLE_ACTIVATION, "loss.mb" + std::to_string(m));
    }
  }
  kernelOfOpId.resize(microBatches);
  steps.setDeferTransfers(oneFOneB);
  for (auto [backwardPhase, m] : order) {
    steps.setPhase(backwardPhase ? "backward" : "forward");
    steps.setMicroBatch(m);
    currentMicroBatch = m;
    if (!backwardPhase && failed(sliceBatchInputs(values, tables[m], m)))
      return failure();
    for (Operation &op : body.without_terminator())
      if (!isa<graph::ReadVariableOp, graph::ConstantOp>(op) && !perStep.contains(&op) &&
          backward.contains(&op) == backwardPhase && failed(lowerOp(op, tables[m])))
        return failure();
  }
  steps.setDeferTransfers(false);
  steps.setMicroBatch(-1);
  steps.setPhase("update");
  for (Operation &op : body.without_terminator())
    if (perStep.contains(&op) && failed(lowerOp(op, tables.back())))
      return failure();
  for (Value v : averaged) {
    pb::Kernel *k = program.add_kernels();
    k->set_id(program.kernels_size() - 1);
    k->set_op("Mean");
    k->set_opset(13);
    k->set_name("loss: mean over the micro-batches");
    for (ValueTable &t : tables)
      k->add_inputs(*t.lookup(v));
    uint32_t out = *values.lookup(v);
    k->add_outputs(out);
    steps.run().add_kernel_ids(k->id());
    tables.back().alias(v, out);
  }
  return lowerReturn(ret, tables.back());
}

LogicalResult strait::exportProgram(func::FuncOp func, const RankExport &self,
                                    int worldSize, const StageRanks &stageRanks,
                                    pb::Program &program, int microBatches,
                                    bool parameterCopies, const PipelineOrder &order) {
  program.set_format_version(pb::FORMAT_VERSION_1);
  program.set_rank(self.rank);
  program.set_world_size(worldSize);
  program.set_device(self.device);
  program.set_micro_batches(std::max(1, microBatches));
  program.set_schedule(order.oneFOneB ? pb::SCHEDULE_1F1B : pb::SCHEDULE_GPIPE);
  program.set_producer("straitc 0.1");
  // The learning-rate schedule graph-build-training-step recorded; the
  // launcher evaluates it each step (docs/training.md).
  if (auto training = func->getAttrOfType<DictionaryAttr>("graph.training")) {
    auto peak = training.getAs<FloatAttr>("lr");
    if (peak && training.get("optimizer") != StringAttr::get(func.getContext(), "none")) {
      pb::LrSchedule *schedule = program.mutable_lr_schedule();
      schedule->set_peak_lr(static_cast<float>(peak.getValueAsDouble()));
      if (auto warmup = training.getAs<IntegerAttr>("warmup_steps"))
        schedule->set_warmup_steps(warmup.getInt());
      if (auto total = training.getAs<IntegerAttr>("total_steps"))
        schedule->set_total_steps(total.getInt());
      if (auto low = training.getAs<FloatAttr>("min_lr"))
        schedule->set_min_lr(static_cast<float>(low.getValueAsDouble()));
    }
    if (auto scale = training.getAs<FloatAttr>("loss_scale")) {
      pb::LossScale *ls = program.mutable_loss_scale();
      ls->set_init_scale(static_cast<float>(scale.getValueAsDouble()));
      auto dynamic = training.getAs<BoolAttr>("loss_scale_dynamic");
      ls->set_dynamic(dynamic && dynamic.getValue());
      if (auto g = training.getAs<FloatAttr>("loss_scale_growth"))
        ls->set_growth_factor(static_cast<float>(g.getValueAsDouble()));
      if (auto b = training.getAs<FloatAttr>("loss_scale_backoff"))
        ls->set_backoff_factor(static_cast<float>(b.getValueAsDouble()));
      if (auto n = training.getAs<IntegerAttr>("loss_scale_interval"))
        ls->set_growth_interval(static_cast<uint32_t>(n.getInt()));
    }
  }
  ValueTable values(program);
  StepBuilder steps(program, self, stageRanks);

  for (BlockArgument arg : func.getArguments()) {
    auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "graph.name");
    values.get(arg, pb::ROLE_INPUT, name ? name.getValue() : "");
  }

  // One value per variable, shared by all its reads. A value assigned to a
  // variable is that value: the kernel producing it writes the variable in
  // place (optimizer outputs alias their inputs).
  auto module = func->getParentOfType<ModuleOp>();
  llvm::StringMap<uint32_t> variableIds;
  auto variableValue = [&](Value v, StringRef name) {
    auto it = variableIds.find(name);
    if (it != variableIds.end())
      return values.alias(v, it->second);
    auto var = module ? module.lookupSymbol<graph::VariableOp>(name) : nullptr;
    bool state = var && var->hasAttr("graph.optimizer_state_of");
    uint32_t id = values.get(v, state ? pb::ROLE_OPTIMIZER_STATE : pb::ROLE_PARAMETER, name);
    values.at(id).set_parameter_name(name.str());
    variableIds[name] = id;
  };
  Block &body = func.getBody().front();
  for (Operation &op : body)
    if (auto assign = dyn_cast<graph::AssignVariableOp>(op))
      variableValue(assign.getValue(), assign.getVariable());
  for (Operation &op : body)
    if (auto read = dyn_cast<graph::ReadVariableOp>(op))
      variableValue(read.getResult(), read.getVariable());

  ProgramLowering lowering(func, program, steps, std::max(1, microBatches), parameterCopies,
                           order);
  if (failed(lowering.run(values)))
    return failure();
  if (program.steps_size() == 0)
    steps.run();
  return success();
}

int64_t PipelineOrder::warmupOf(int64_t stage, int64_t numStages, int64_t microBatches) const {
  int64_t w = std::numeric_limits<int64_t>::max();
  for (int64_t t = 0; t <= stage; ++t) {
    int64_t classic = numStages - 1 - t;
    int64_t planned = t < static_cast<int64_t>(warmup.size()) ? warmup[t] : classic;
    w = std::min(w, std::max(classic, planned));
  }
  return std::max<int64_t>(0, std::min(w, microBatches));
}

std::optional<std::string> strait::againstThePipeline(ArrayRef<RankExport> ranks) {
  llvm::DenseSet<Operation *> seen;
  for (const RankExport &r : ranks) {
    if (!r.function || !seen.insert(r.function).second)
      continue;
    std::optional<std::string> found;
    func::FuncOp fn = r.function;
    fn.walk([&](dist::SendOp send) {
      if (send->hasAttr("dist.per_step"))
        return WalkResult::advance();
      bool backward = send->hasAttr("dist.backward");
      int64_t to = send.getPeer();
      if (backward ? to < r.stage : to > r.stage)
        return WalkResult::advance();
      found = llvm::formatv("stage {0} sends channel {1} to stage {2} in the {3} phase", r.stage,
                            send.getChannel(), to, backward ? "backward" : "forward")
                  .str();
      return WalkResult::interrupt();
    });
    if (found)
      return found;
  }
  return std::nullopt;
}
