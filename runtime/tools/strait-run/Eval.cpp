//===- Eval.cpp - Held-out loss during training (strait-run --eval-data) --===//
//
// Which steps of a training program an evaluation runs (Eval.h). Every rank
// classifies its own program the same way, so the transfers it keeps are
// exactly the ones its peers keep: an activation is produced and consumed by
// forward steps on both sides, a gradient by backward steps on both sides.
//
//===----------------------------------------------------------------------===//
#include "Eval.h"

#include "strait/runtime/Program.h"

#include <map>
#include <set>

namespace strait {
namespace run {

using namespace strait::rt;

namespace {

bool isForward(const program::Step &s) {
  return s.kind_case() == program::Step::kRun && !s.once() &&
         s.label().rfind("forward", 0) == 0;
}

bool isAqSgd(program::Codec c) {
  return c == program::CODEC_AQSGD_INT2 || c == program::CODEC_AQSGD_INT3 ||
         c == program::CODEC_AQSGD_INT4;
}

} // namespace

Status evaluationSteps(const program::Program &p, std::vector<int> &steps,
                       std::map<int, uint32_t> &lossOf) {
  std::map<uint32_t, const program::Kernel *> kernels;
  for (const program::Kernel &k : p.kernels())
    kernels[k.id()] = &k;
  std::set<uint32_t> lossIds; // "loss", or each micro-batch's "loss.mb<m>"
  for (const program::Value &v : p.values())
    if (v.name() == "loss" || v.name().rfind("loss.mb", 0) == 0)
      lossIds.insert(v.id());
  // Values each kind of run step writes and reads.
  std::set<uint32_t> writtenForward, writtenAny, readForward;
  for (const program::Step &s : p.steps()) {
    if (s.kind_case() != program::Step::kRun)
      continue;
    for (uint32_t kid : s.run().kernel_ids()) {
      auto k = kernels.find(kid);
      if (k == kernels.end())
        return invalidArgument("step '" + s.label() + "' names kernel " + std::to_string(kid) +
                               ", which the program does not have");
      for (uint32_t out : k->second->outputs()) {
        writtenAny.insert(out);
        if (isForward(s))
          writtenForward.insert(out);
      }
      if (isForward(s))
        for (uint32_t in : k->second->inputs())
          readForward.insert(in);
    }
  }
  steps.clear();
  lossOf.clear();
  for (int i = 0; i < p.steps_size(); ++i) {
    const program::Step &s = p.steps(i);
    const program::CodecParams *codec = nullptr;
    bool keep = false;
    if (isForward(s)) {
      keep = true;
      for (uint32_t kid : s.run().kernel_ids())
        for (uint32_t out : kernels[kid]->outputs())
          if (lossIds.count(out))
            lossOf[i] = out;
    } else if (s.kind_case() == program::Step::kSend) {
      uint32_t v = s.send().value_id();
      keep = writtenForward.count(v) || !writtenAny.count(v);
      codec = &s.send().codec();
    } else if (s.kind_case() == program::Step::kRecv) {
      keep = readForward.count(s.recv().value_id()) > 0;
      codec = &s.recv().codec();
    }
    if (keep && codec && (isAqSgd(codec->codec()) || codec->adapt()))
      return invalidArgument(std::string("--eval-data: the transfer '") + s.label() + "' is " +
                             (codec->adapt() ? "adaptive top-k" : "AQ-SGD") +
                             ", whose state follows the training batches; evaluation would "
                             "change it");
    if (keep)
      steps.push_back(i);
  }
  if (steps.empty())
    return invalidArgument("--eval-data: the program has no forward steps");
  return Status::ok();
}

} // namespace run
} // namespace strait
