//===- DistPasses.td - Passes of the distribution dialect --*- tablegen -*-===//

#ifndef STRAIT_DIALECT_DIST_DISTPASSES_TD
#define STRAIT_DIALECT_DIST_DISTPASSES_TD

include "mlir/Pass/PassBase.td"

def DistAssignStages : Pass<"dist-assign-stages", "::mlir::ModuleOp"> {
  let summary = "Plan the model on a cluster and put a pipeline stage on every op";
  let description = [{
    Plans `@main` with the planner (`planFunction`, or a forced number of
    equal stages with `num-stages`, or the explicit `boundaries`) and applies
    the plan: `dist.stage = #dist.stage<N>` on every op of `@main`, and
    `dist.plan` (stages -> devices and ranks, micro-batches, schedule) on the
    module. Forward ops take the stage of their cost node; backward ops
    (`graph.grad_of = N`) the stage of the forward op with `graph.op_id = N`;
    ops tied to a variable (gradient accumulation, assignment) the stage of
    the variable's first forward user; other ops the stage of their users,
    else of their operands. Constants and variable reads go with their users
    and are cloned once per further stage that uses them. A trained variable
    that ops of several stages read (a tied embedding / LM head) gets a copy
    in each: every such stage accumulates its own partial gradient, adds the
    partials of all stages in stage order (dist-insert-comm makes the
    cross-stage uses per-step transfers) and runs the update on its copy.
    Global-norm clipping (`graph.ClipByGlobalNorm`, f32) becomes
    stage-local: each stage's sum of squares of its own gradients, summed
    in stage order in every stage (only the f32 scalars cross stages), and
    each stage scales its own gradients.

    ```
    strait-opt --dist-assign-stages='cluster=local-4cpu.yaml num-stages=2' model.mlir
    strait-opt --dist-assign-stages='boundaries=3 replicas=2,1' model.mlir
    ```
  }];
  let options = [
    Option<"cluster", "cluster", "std::string", "\"\"",
           "cluster file (YAML); without it, `boundaries` gives the plan">,
    Option<"strategy", "strategy", "std::string", "\"strait\"",
           "planner: strait, uniform, pipedream or dtfm">,
    Option<"globalBatch", "global-batch", "double", "0",
           "samples per iteration (0: the input's batch)">,
    Option<"numStages", "num-stages", "int64_t", "0",
           "force this many stages of equal blocks over equal device chunks (0: the planner decides)">,
    ListOption<"boundaries", "boundaries", "int64_t",
               "explicit plan: index of the first cost node (computational op, "
               "in program order) of stages 1, 2, ...">,
    ListOption<"replicas", "replicas", "int64_t",
               "explicit plan: data-parallel replicas per stage (default 1 each)">,
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "micro-batches per iteration (with a cluster: imposed when > 1, "
           "else the planner chooses)">,
    Option<"allReduceBucketMib", "all-reduce-bucket-mib", "double", "256",
           "the gradient all-reduces' bucket size (dist-bucket-all-reduces): each bucket pays "
           "the latency">,
    Option<"localSteps", "local-steps", "int64_t", "1",
           "local steps H: the replicas of a stage that span several islands average "
           "across islands every H steps, so the planner costs that phase once per H steps">,
    Option<"schedule", "schedule", "std::string", "\"auto\"",
           "pipeline schedule: auto (the planner's choice), gpipe or 1f1b">,
    Option<"recompute", "recompute", "std::string", "\"none\"",
           "activation recomputation: none, full (every stage) or auto (only the stages "
           "of a plan that fits no other way); the chosen stages' blocks are recomputed "
           "in their backward (graph-recompute-blocks)">
  ];
  let statistics = [
    Statistic<"numCloned", "num-cloned", "Constants and reads cloned into other stages">,
    Statistic<"numReplicated", "num-replicated",
              "Trained variables (and optimizer states) copied into every stage reading them">,
    Statistic<"numRecomputed", "num-recomputed", "Blocks recomputed in their backward">
  ];
  let dependentDialects = ["::strait::dist::DistDialect"];
}

def DistInsertComm : Pass<"dist-insert-comm", "::mlir::ModuleOp"> {
  let summary = "Insert send/recv at stage cuts and all-reduce of replicated gradients";
  let description = [{
    For every value of `@main` used in a stage other than its producer's:
    one `dist.send` in the producer's stage, right after the producer, and
    one `dist.recv` in each consumer stage, right after the send (one
    transfer per value and stage pair; the consumer stage's uses read the
    received value). Keeping each pair adjacent in the block's order makes
    the per-rank orders of blocking transfers consistent (no deadlock). Gradients flow backwards by the same rule.
    Transfers of per-step values (an accumulated gradient, or anything
    computed from one) are marked `dist.per_step`: the exporter runs them
    once per step, after the last micro-batch, with the update. Every
    gradient accumulation of a variable (an op naming the variable whose
    result has the variable's type) in a stage with several replicas gets a
    `dist.all_reduce ... reduce <mean>` over the stage's ranks. Channels are
    numbered from 0 in insertion order. With `cluster` (the file the plan was
    made on), a stage whose replicas span several bandwidth islands (its
    devices' maximum spanning tree cut at the largest bandwidth gap of at
    least 1.5x, as the planner costs it) gets a hierarchical all-reduce:
    `islands [...]` lists the ranks of each island. With `local-steps` > 1
    (straitc --local-steps, where the islands also decide what synchronizes
    every step), replicas alone on their island get islands too, and two
    devices whose one link shows no bandwidth gap are split by site.

    ```
    strait-opt --dist-assign-stages='boundaries=2' --dist-insert-comm model.mlir
    strait-opt --dist-assign-stages='cluster=c.yaml' --dist-insert-comm='cluster=c.yaml' model.mlir
    ```
  }];
  let options = [
    Option<"cluster", "cluster", "std::string", "\"\"",
           "cluster file (YAML) naming the plan's devices: islands of all-reduces">,
    Option<"localSteps", "local-steps", "int64_t", "1",
           "local steps H (straitc --local-steps): > 1 marks islands of single replicas "
           "(or sites) too">
  ];
  let statistics = [
    Statistic<"numTransfers", "num-transfers", "Send/recv pairs inserted">,
    Statistic<"numAllReduces", "num-all-reduces", "All-reduces inserted">,
    Statistic<"numHierarchical", "num-hierarchical", "All-reduces over several islands">
  ];
  let dependentDialects = ["::strait::dist::DistDialect"];
}

def DistBucketAllReduces : Pass<"dist-bucket-all-reduces", "::mlir::ModuleOp"> {
  let summary = "Pack the gradient all-reduces into buckets of a few MiB";
  let description = [{
    Runs after dist-insert-comm, before dist-insert-compression. Runs of
    `dist.all_reduce` with the same stage, group, islands, reduction and
    element type, with no other dist op between them, become buckets of at
    least `bucket-mib` MiB (the last of a run may be smaller): each bucket's
    values are reshaped flat, concatenated, reduced by one all-reduce (the
    first member's channel) and split back, right after the bucket's last
    member. Every all-reduce pays the link's latency 2 (p - 1) times, so
    one per bucket instead of one per gradient tensor saves that many round
    trips (148 all-reduces a step for GPT-2 small). A run also ends before
    an all-reduce when a member's result is read before it. `bucket-mib=0`
    leaves every all-reduce alone.

    ```
    strait-opt --dist-insert-comm --dist-bucket-all-reduces='bucket-mib=32' model.mlir
    ```
  }];
  let options = [
    Option<"bucketMib", "bucket-mib", "double", "256",
           "bucket size in MiB (0: no buckets)">
  ];
  let statistics = [
    Statistic<"numBuckets", "num-buckets", "Buckets built">,
    Statistic<"numMerged", "num-merged", "All-reduces packed into buckets">
  ];
  let dependentDialects = ["::strait::dist::DistDialect", "::strait::graph::GraphDialect"];
}

def DistInsertCompression : Pass<"dist-insert-compression", "::mlir::ModuleOp"> {
  let summary = "Compress the transfers that cross slow links";
  let description = [{
    Runs after dist-insert-comm. Groups the transfers of `@main` by link
    (sending stage, receiving stage) and treats each gradient all-reduce's
    inter-island phase (or its flat ring) as one more link, then picks a
    codec per link:

    - `compress=auto` (with `cluster`): AdaTopK-like, the least lossy codec
      whose predicted time (latency + wire bytes / bandwidth + encode and
      decode time) fits the link's target: the larger compute time of the
      two stages per micro-batch for a cut, the stage's compute over all
      micro-batches for an all-reduce. Activations: fp16, int8, int4
      (quantization, AQ-SGD style); activation gradients: bf16, int8, int4;
      weight gradients: bf16, int8, int4, then (when int4 is still over 3x
      the target) top-k with the largest ratio that fits, all with error
      feedback. A link that fits uncompressed gets
      nothing.
    - `compress=none`: only the `compress-link` overrides;
      `compress=CODEC` (fp16, bf16, int8, int4, int3, int2, topk:R): that
      codec on every transfer and all-reduce. `compress=aqsgd:B[:GRAD]`
      (B = 2, 3, 4): AQ-SGD (`aqsgd_intB`) on the forward activations of
      every cut, the plain codec GRAD (default int8) on the activation
      gradients (the sends marked `dist.backward`); gradient all-reduces
      stay uncompressed (a warning names them).
    - `compress-link=A:B=CODEC[:R]` (repeatable): the codec of the links
      between A and B (sites, hosts or device names of the plan, either
      order); wins over `compress`. An override that names no link of the
      plan is an error, and so is an `aqsgd` override on a link that
      carries a gradient all-reduce.
    - `adaptive-topk=MIN:MAX`: every top-k transfer between stages (never an
      all-reduce) gets `dist.topk_adapt = array<f64: MIN, MAX>` on its
      `dist.compress`; the exporter writes it as CodecParams adapt,
      ratio_min, ratio_max and the runtime adapts the ratio to the link
      within [MIN, MAX], starting at the codec's ratio, which must lie in
      it. No top-k transfer between stages is an error.

    The per-step exchange of a tied variable's partial gradients (sends
    marked `dist.per_step`; docs/distribution-dialect.md, "Tied variables
    across stages") is one more link per sending stage, a weight gradient
    (error feedback; under `aqsgd:B:GRAD` the codec GRAD): its value gets
    one `dist.compress`, feeding its sends to every other copy's stage,
    and a local `dist.decompress` of it that replaces every other use of
    the value on the sending stage, so each copy sums the same decoded
    partials (the exporter makes the first send `keep_decoded` and the
    others `repeat_payload`). A value with a use before its first send
    stays exact.

    A compressed transfer becomes `dist.compress` (sender's stage) ->
    `dist.send`/`dist.recv` of the encoded bytes -> `dist.decompress`
    (receiver's stage); an all-reduce becomes `dist.compress` ->
    `dist.all_reduce` of the bytes -> `dist.decompress`. Only f32 values of
    at least 64 elements are encoded (the runtime's codecs carry f32).

    ```
    strait-opt --dist-insert-comm --dist-insert-compression='cluster=c.yaml compress=auto' model.mlir
    strait-opt --dist-insert-compression='compress=none compress-link=east:west=int8' model.mlir
    ```
  }];
  let options = [
    Option<"cluster", "cluster", "std::string", "\"\"",
           "cluster file (YAML) of the plan: links, device speeds, islands">,
    Option<"compress", "compress", "std::string", "\"auto\"",
           "auto, none, or a codec for every link: fp16, bf16, int8, int4, int3, int2, "
           "topk:R, aqsgd:B[:GRAD]">,
    ListOption<"compressLink", "compress-link", "std::string",
               "per link: A:B=CODEC[:R] (A, B: sites, hosts or devices)">,
    Option<"allReduceBucketMib", "all-reduce-bucket-mib", "double", "256",
           "the gradient all-reduces' bucket size (dist-bucket-all-reduces): each bucket pays "
           "the latency">,
    Option<"adaptiveTopk", "adaptive-topk", "std::string", "\"\"",
           "MIN:MAX: the runtime adapts the ratio of every top-k transfer between stages to "
           "its link, within [MIN, MAX] (a dist.topk_adapt attribute on its dist.compress)">,
    Option<"localSteps", "local-steps", "int64_t", "1",
           "local steps H (straitc --local-steps): an all-reduce over several islands "
           "synchronizes once per H iterations, so `auto` weighs its inter-island transfer "
           "against H iterations of compute">,
    Option<"warmupCodec", "warmup-codec", "std::string", "\"none\"",
           "compressed AdamW (AdamW freeze_variance_after = N): the dense codec (fp16, bf16, "
           "int8, int4, int3, int2) of the gradient all-reduces' N warm-up steps, with error "
           "feedback, instead of exact f32 (a dist.warmup_codec attribute on their "
           "dist.compress); none: exact">
  ];
  let statistics = [
    Statistic<"numCompressed", "num-compressed", "Transfers given a codec">,
    Statistic<"numCompressedAllReduces", "num-compressed-all-reduces",
              "All-reduces given a codec">,
    Statistic<"numCompressedTied", "num-compressed-tied",
              "Tied-gradient exchanges given a codec (one per value)">
  ];
  let dependentDialects = ["::strait::dist::DistDialect"];
}

def DistSplitStages : Pass<"dist-split-stages", "::mlir::ModuleOp"> {
  let summary = "Split @main into one function per pipeline stage";
  let description = [{
    Creates `func.func @stage<N>` for every stage of the plan, holding the
    ops of `@main` with `dist.stage = #dist.stage<N>` in their order; its
    arguments are the arguments of `@main` those ops use and its results the
    results of `@main` they produce (names kept in `graph.name`). `@main` is
    erased. A value used in a stage other than its producer's without a
    `dist.recv` is an error (run dist-insert-comm first).

    ```
    strait-opt --dist-assign-stages='boundaries=2' --dist-insert-comm --dist-split-stages model.mlir
    ```
  }];
  let dependentDialects = ["::strait::dist::DistDialect"];
}

#endif // STRAIT_DIALECT_DIST_DISTPASSES_TD
