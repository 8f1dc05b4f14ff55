//===- BucketAllReduces.cpp - One all-reduce per bucket of gradients ------===//
//
// dist-insert-comm gives every replicated gradient its own dist.all_reduce:
// GPT-2 small has 148, each a ring of 2 (p - 1) messages that pays the
// link's latency, tens to hundreds of milliseconds a message between sites.
// This pass packs runs of all-reduces that reduce alike (same stage, group,
// islands, reduction and element type) into buckets of at least
// `bucket-mib` MiB, the last one smaller, PyTorch DDP-style:
//
//   Reshape (flat views) -> Concat -> one dist.all_reduce -> Split -> Reshape
//
// A run ends at any other dist op (a transfer, an all-reduce of another
// kind), so the order of every rank's blocking transfers is the same as
// before; the bucket's all-reduce takes the place of its last member, which
// is also where every member's result was last still unused.
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Dist/DistOps.h"
#include "strait/Dialect/Dist/DistPasses.h"
#include "strait/Dialect/Graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace strait::dist {
#define GEN_PASS_DEF_DISTBUCKETALLREDUCES
#include "strait/Dialect/Dist/DistPasses.h.inc"
} // namespace strait::dist

using namespace mlir;
using namespace strait;
using namespace strait::dist;

namespace {

/// What makes two all-reduces combinable: they reduce the same way over the
/// same ranks, and their values can share one flat buffer.
bool sameKind(AllReduceOp a, AllReduceOp b) {
  auto ta = cast<RankedTensorType>(a.getValue().getType());
  auto tb = cast<RankedTensorType>(b.getValue().getType());
  return getStage(a) == getStage(b) && a.getGroup() == b.getGroup() &&
         a.getIslandsAttr() == b.getIslandsAttr() && a.getReduction() == b.getReduction() &&
         ta.getElementType() == tb.getElementType() && ta.hasStaticShape() &&
         tb.hasStaticShape();
}

double bytesOf(AllReduceOp op) {
  auto t = cast<RankedTensorType>(op.getValue().getType());
  return static_cast<double>(t.getNumElements()) *
         std::max<unsigned>(1, t.getElementTypeBitWidth() / 8);
}

struct BucketAllReducesPass
    : public dist::impl::DistBucketAllReducesBase<BucketAllReducesPass> {
  using DistBucketAllReducesBase::DistBucketAllReducesBase;
  void runOnOperation() override;
  void rewrite(SmallVector<AllReduceOp> bucket);
};

/// Replaces the bucket's all-reduces (program order, two or more) with one
/// over their flattened, concatenated values, right after the last one.
void BucketAllReducesPass::rewrite(SmallVector<AllReduceOp> bucket) {
  AllReduceOp last = bucket.back();
  int64_t stage = *getStage(last);
  OpBuilder b(last);
  b.setInsertionPointAfter(last);
  Location loc = last.getLoc();
  Type elt = cast<RankedTensorType>(last.getValue().getType()).getElementType();
  SmallVector<Value> flats;
  SmallVector<int64_t> sizes;
  int64_t total = 0;
  for (AllReduceOp op : bucket) {
    auto t = cast<RankedTensorType>(op.getValue().getType());
    int64_t n = t.getNumElements();
    auto flat = b.create<graph::ReshapeOp>(loc, RankedTensorType::get({n}, elt), op.getValue(),
                                           b.getDenseI64ArrayAttr({n}), b.getI64IntegerAttr(0));
    setStage(flat, stage);
    flats.push_back(flat.getResult());
    sizes.push_back(n);
    total += n;
  }
  auto flatType = RankedTensorType::get({total}, elt);
  auto concat = b.create<graph::ConcatOp>(loc, flatType, flats, b.getI64IntegerAttr(0));
  setStage(concat, stage);
  auto reduce = b.create<AllReduceOp>(loc, flatType, concat.getResult(), last.getReductionAttr(),
                                      last.getGroupAttr(), last.getIslandsAttr(),
                                      bucket.front().getChannelAttr());
  setStage(reduce, stage);
  SmallVector<Type> pieceTypes;
  for (int64_t n : sizes)
    pieceTypes.push_back(RankedTensorType::get({n}, elt));
  auto split = b.create<graph::SplitOp>(loc, pieceTypes, reduce.getResult(),
                                        b.getI64IntegerAttr(0), b.getDenseI64ArrayAttr(sizes));
  setStage(split, stage);
  for (auto [i, op] : llvm::enumerate(bucket)) {
    auto t = cast<RankedTensorType>(op.getType());
    auto back = b.create<graph::ReshapeOp>(loc, t, split.getResult(i),
                                           b.getDenseI64ArrayAttr(t.getShape()),
                                           b.getI64IntegerAttr(0));
    setStage(back, stage);
    op.getResult().replaceAllUsesWith(back.getResult());
  }
  for (AllReduceOp op : bucket)
    op.erase();
  ++numBuckets;
  numMerged += bucket.size();
}

void BucketAllReducesPass::runOnOperation() {
  if (!(bucketMib > 0))
    return;
  const double cap = bucketMib * 1048576.0;
  getOperation().walk([&](func::FuncOp func) {
    if (func.isExternal())
      return;
    SmallVector<SmallVector<AllReduceOp>> buckets;
    SmallVector<AllReduceOp> open; // the current run's bucket
    double openBytes = 0;
    auto close = [&] {
      if (open.size() >= 2)
        buckets.push_back(open);
      open.clear();
      openBytes = 0;
    };
    for (Operation &op : func.getBody().front()) {
      auto reduce = dyn_cast<AllReduceOp>(op);
      if (!reduce) {
        // Another transfer in between: keep the order of blocking ops.
        if (isa<DistDialect>(op.getDialect()))
          close();
        continue;
      }
      // A member's result read before this all-reduce could not wait for
      // the bucket: the run ends before it.
      bool usedBefore = llvm::any_of(open, [&](AllReduceOp m) {
        return llvm::any_of(m->getUsers(), [&](Operation *u) { return u->isBeforeInBlock(&op); });
      });
      if (!open.empty() && (usedBefore || !sameKind(open.front(), reduce)))
        close();
      if (!getStage(reduce) || !cast<RankedTensorType>(reduce.getType()).hasStaticShape()) {
        close(); // not for this pass: left as it is
        continue;
      }
      open.push_back(reduce);
      openBytes += bytesOf(reduce);
      if (openBytes >= cap)
        close();
    }
    close();
    for (SmallVector<AllReduceOp> &bucket : buckets)
      rewrite(bucket);
  });
}

} // namespace
