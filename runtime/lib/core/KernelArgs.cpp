//===- KernelArgs.cpp - Operand checks shared by the backends -------------===//

#include "strait/runtime/KernelArgs.h"

#include <string>

namespace strait {
namespace rt {

StatusOr<AccumulateGradArgs> accumulateGradArgs(const KernelContext &ctx) {
  AccumulateGradArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.grad, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(int64_t mbs, ctx.getAttrs().getInt("micro_batches", 1));
  if (mbs < 1)
    return ctx.error("micro_batches must be positive");
  int mb = ctx.getMicroBatch();
  if (mbs > 1 && mb < 0)
    return ctx.error("AccumulateGrad over " + std::to_string(mbs) +
                     " micro-batches must run in a step with micro_batch set");
  if (mb >= mbs)
    return ctx.error("micro_batch " + std::to_string(mb) + " >= micro_batches " +
                     std::to_string(mbs));
  STRAIT_ASSIGN_OR_RETURN(a.total, ctx.requireOutput(0, a.grad->shape, a.grad->dtype));
  a.scale = 1.0f / static_cast<float>(mbs);
  a.first = mb <= 0;
  return a;
}

StatusOr<SgdArgs> sgdArgs(const KernelContext &ctx) {
  SgdArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.lr, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(a.param, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(a.grad, ctx.requireInput(2, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(a.velocity, ctx.requireInput(3, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(a.momentum, ctx.getAttrs().getFloat("momentum", 0));
  STRAIT_ASSIGN_OR_RETURN(a.weightDecay, ctx.getAttrs().getFloat("weight_decay", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t nesterov, ctx.getAttrs().getInt("nesterov", 0));
  a.nesterov = nesterov != 0;
  if (a.lr->numel() != 1 || a.grad->shape != a.param->shape ||
      a.velocity->shape != a.param->shape)
    return ctx.error("lr must be a scalar and param/grad/velocity shapes equal");
  STRAIT_ASSIGN_OR_RETURN(a.paramOut, ctx.requireOutput(0, a.param->shape, a.param->dtype));
  STRAIT_ASSIGN_OR_RETURN(a.velocityOut,
                          ctx.requireOutput(1, a.param->shape, a.param->dtype));
  return a;
}

StatusOr<size_t> optimizerGroups(const KernelContext &ctx, size_t groups, size_t outGroups) {
  STRAIT_RETURN_IF_ERROR(ctx.requireInput(0).getStatus());
  STRAIT_RETURN_IF_ERROR(ctx.requireInput(1).getStatus());
  size_t rest = ctx.numInputs() - 2;
  if (rest == 0 || rest % groups)
    return ctx.error(std::to_string(rest) + " tensor inputs do not form " +
                     std::to_string(groups) + " equal groups");
  size_t n = rest / groups;
  if (ctx.numOutputs() != n * outGroups)
    return ctx.error("expected " + std::to_string(n * outGroups) + " outputs");
  for (size_t i = 0; i < n; ++i) {
    const Tensor *x = ctx.input(2 + i);
    for (size_t g = 0; g < groups; ++g) {
      const Tensor *in = ctx.input(2 + g * n + i);
      if (!in || in->dtype != program::DTYPE_F32 || in->shape != x->shape)
        return ctx.unsupported("optimizer tensors must be f32 of equal shapes");
    }
    for (size_t g = 0; g < outGroups; ++g)
      STRAIT_RETURN_IF_ERROR(ctx.requireOutput(g * n + i, x->shape, x->dtype).getStatus());
  }
  return n;
}

StatusOr<AdamWAttrs> adamWAttrs(const KernelContext &ctx) {
  AdamWAttrs a;
  const AttrReader &at = ctx.getAttrs();
  STRAIT_ASSIGN_OR_RETURN(a.beta1, at.getFloat("beta1", a.beta1));
  STRAIT_ASSIGN_OR_RETURN(a.beta2, at.getFloat("beta2", a.beta2));
  STRAIT_ASSIGN_OR_RETURN(a.epsilon, at.getFloat("epsilon", a.epsilon));
  STRAIT_ASSIGN_OR_RETURN(a.weightDecay, at.getFloat("weight_decay", a.weightDecay));
  return a;
}

} // namespace rt
} // namespace strait
