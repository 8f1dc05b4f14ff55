//===- GraphPasses.td - Passes on the graph dialect --------*- tablegen -*-===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHPASSES_TD
#define STRAIT_DIALECT_GRAPH_GRAPHPASSES_TD

include "mlir/Pass/PassBase.td"

def GraphInferShapes : Pass<"graph-infer-shapes", "::mlir::ModuleOp"> {
  let summary = "Refine tensor types from the inputs and fold shape arithmetic";
  let description = [{
    Optionally sets the shapes of function arguments (`input-shapes`), then
    re-infers every op's result shapes in program order and folds ops whose
    operands became constant (Shape/Gather/Concat chains), as the importer
    does. Element types are kept where they differ from the inferred ones
    (the 16-bit results graph-cast-motion chose). Function result types
    follow.

    ```
    strait-opt --graph-infer-shapes='input-shapes=input_ids=8x128' model.mlir
    ```
  }];
  let options = [
    ListOption<"inputShapes", "input-shapes", "std::string",
               "NAME=DxDx... for arguments named by graph.name (or arg<N>)">
  ];
  let statistics = [
    Statistic<"numFolded", "num-folded", "Ops folded to constants">,
    Statistic<"numRefined", "num-refined", "Result types changed">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

def GraphBuildTrainingStep : Pass<"graph-build-training-step", "::mlir::ModuleOp"> {
  let summary = "Turn a forward graph into one training step (loss, backward, update)";
  let description = [{
    Rewrites `@main` (or the module's only function) into a training step:
    the forward ops (each tagged `graph.op_id`), a loss, the reverse-mode
    gradient of every trainable variable (each backward op tagged
    `graph.grad_of` = the id of the forward op it differentiates; rules come
    from GradientOpInterface), one `graph.AccumulateGrad` per variable (the
    micro-batch boundary), optional `graph.ClipByGlobalNorm`, and an
    optimizer update stored with `graph.AssignVariable`. New arguments:
    labels (cross-entropy, mse), `lr` (f32) and `step` (i64, from 1); new
    result: `loss`. The model's outputs are dropped (`step-outputs=loss`, the
    default: what they alone need is dead code) or kept (`step-outputs=all`).
    BatchNormalization switches to batch statistics and
    updates its running statistics. See docs/training.md.

    ```
    strait-opt --graph-build-training-step='loss=cross-entropy optimizer=adamw weight-decay=0.1 clip-norm=1.0 frozen=h.0.*' model.mlir
    ```
  }];
  let options = [
    Option<"loss", "loss", "std::string", "\"cross-entropy\"",
           "cross-entropy (integer labels), mse, or output (the output is the loss)">,
    Option<"output", "output", "std::string", "\"\"",
           "graph.name of the output the loss uses (default: the first)">,
    Option<"labelName", "label", "std::string", "\"labels\"",
           "graph.name of the new labels argument">,
    Option<"ignoreIndex", "ignore-index", "int64_t", "-100",
           "cross-entropy: label value that contributes nothing">,
    Option<"optimizer", "optimizer", "std::string", "\"adamw\"",
           "sgd, adamw, or none (gradients only: no update, no state change)">,
    Option<"returnGradients", "return-gradients", "bool", "false",
           "also return each variable's gradient as a result grad.<name>">,
    Option<"padClasses", "pad-classes", "int64_t", "64",
           "cross-entropy on a product's logits with the model outputs dropped: when "
           "the class count is no multiple of this (0: never) and the product is "
           "large, compute the logits with the classes padded to a multiple "
           "(zero weight columns, -inf bias), so every GEMM row is 16-byte aligned">,
    Option<"padClassesMinWork", "pad-classes-min-work", "int64_t", "1073741824",
           "pad-classes: only products of at least rows x classes x inner this large">,
    Option<"stepOutputs", "step-outputs", "std::string", "\"loss\"",
           "results of the step: loss (the loss, and the gradients with "
           "return-gradients) or all (also the model's outputs)">,
    Option<"momentum", "momentum", "double", "0.9", "sgd: momentum">,
    Option<"nesterov", "nesterov", "bool", "false", "sgd: Nesterov momentum">,
    Option<"beta1", "beta1", "double", "0.9", "adamw: first-moment decay">,
    Option<"beta2", "beta2", "double", "0.999", "adamw: second-moment decay">,
    Option<"epsilon", "eps", "double", "1e-8", "adamw: denominator epsilon">,
    Option<"freezeVarianceAfter", "freeze-variance-after", "int64_t", "0",
           "adamw: freeze the second moment after this many steps (0: never; "
           "compressed AdamW)">,
    Option<"weightDecay", "weight-decay", "double", "0.0",
           "decoupled (adamw) or L2 (sgd) weight decay">,
    Option<"clipNorm", "clip-norm", "double", "0.0",
           "clip gradients to this global L2 norm (0: no clipping)">,
    Option<"lossScale", "loss-scale", "std::string", "\"none\"",
           "none, dynamic (GradScaler's dynamic loss scaling), or a fixed scale > 0: "
           "the backward is seeded with the scale (new f32 argument loss_scale), "
           "graph.UnscaleGradients divides the accumulated gradients by it and "
           "flags inf/nan (new result found_inf), and the optimizer skips its "
           "update on a flagged step">,
    Option<"lossScaleInit", "loss-scale-init", "double", "65536.0",
           "dynamic loss scaling: the initial scale (GradScaler's init_scale, recorded "
           "for the launcher)">,
    Option<"lossScaleGrowth", "loss-scale-growth", "double", "2.0",
           "dynamic loss scaling: scale factor after growth-interval finite steps (> 1)">,
    Option<"lossScaleBackoff", "loss-scale-backoff", "double", "0.5",
           "dynamic loss scaling: scale factor on a step with inf/nan (in (0, 1))">,
    Option<"lossScaleInterval", "loss-scale-interval", "int64_t", "2000",
           "dynamic loss scaling: consecutive finite steps before the scale grows (>= 1)">,
    Option<"lr", "lr", "double", "1e-3",
           "peak learning rate, recorded for the launcher's schedule">,
    Option<"warmupSteps", "warmup-steps", "int64_t", "0",
           "schedule: linear warm-up steps (recorded for the launcher)">,
    Option<"totalSteps", "total-steps", "int64_t", "0",
           "schedule: step at which the cosine decay reaches min-lr (0: constant after warm-up)">,
    Option<"minLr", "min-lr", "double", "0.0",
           "schedule: learning rate at the end of the cosine decay">,
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "micro-batches whose gradients one update averages">,
    ListOption<"trainable", "trainable", "std::string",
               "glob patterns of trainable variables (default: all float ones; of a "
               "PyTorch export that marks its parameters, those only)">,
    ListOption<"frozen", "frozen", "std::string",
               "glob patterns of variables to freeze (win over trainable)">
  ];
  let statistics = [
    Statistic<"numTrainable", "num-trainable", "Variables updated">,
    Statistic<"numBackwardOps", "num-backward-ops", "Ops built by gradient rules">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

def GraphAddLora : Pass<"graph-add-lora", "::mlir::ModuleOp"> {
  let summary = "Add LoRA adapters to the weights of linear layers and freeze the rest";
  let description = [{
    Parameter-efficient fine-tuning (LoRA, Hu et al. 2021) on any imported
    model. For each target weight W used as the weight operand of a product
    y = x W (MatMul(x, W), MatMul(x, Transpose(W)) of a PyTorch Linear's
    [out, in] weight, Gemm(x, W) with or without transB), two variables
    `<W>.lora_A` [in, R] and `<W>.lora_B` [R, out] are added and every such
    product becomes

      y' = y + MatMul(MatMul(x, A) * (alpha / R), B)

    A is drawn uniformly from [-1/sqrt(in), 1/sqrt(in)] (PEFT's
    kaiming_uniform(a=sqrt(5)) bound) with a seeded generator (the seed
    contract is in docs/training.md, "LoRA"; python/strait/lora.py computes
    the same values), B is zeros, so y' = y at step 0. A shape-only W (no
    value) gets an A without value: the exporter's seeded normal(0.02).
    Default targets (no `targets`): every 2-D float variable all of whose
    reads are weight operands of such products, except the weight of a
    product whose result reaches a function result only through Reshape,
    Cast, Transpose, Flatten, Squeeze, Unsqueeze or the Add of a bias (the
    LM head or classifier); embeddings and tied LM heads (read by a Gather) are never
    eligible. With `freeze-base` (the default) every other float variable
    gets `frozen`, except those matching `trainable`. Runs before the
    forward fusions (graph-fold-transposes still sees MatMul(x, Transpose(W))).

    With `dropout` p > 0 the adapter reads Dropout(x, p) instead of x (PEFT's
    `lora_dropout`; the base product still reads x); graph-build-training-step
    keys it like any Dropout, so it drops in training, reproducibly, and is
    the identity in evaluation. A weight read by products and by another op
    (a Gather of a tied embedding, ...) is adapted only when `targets` names
    it, and then only in its products, as PEFT adapts only the Linear module;
    the other readers keep reading the base weight. A remark names each such
    weight either way.

    ```
    strait-opt --graph-add-lora='rank=8 alpha=16 targets=*.q_proj.weight,*.v_proj.weight' model.mlir
    ```
  }];
  let options = [
    Option<"rank", "rank", "int64_t", "8", "adapter rank R (>= 1)">,
    Option<"alpha", "alpha", "double", "0.0",
           "the update is scaled by alpha / R (0: alpha = R, scale 1)">,
    ListOption<"targets", "targets", "std::string",
               "glob patterns of the weights to adapt (default: every eligible "
               "product weight but the output head)">,
    Option<"seed", "seed", "uint64_t", "0", "seed of A's initial values">,
    Option<"dropout", "dropout", "double", "0.0",
           "PEFT's lora_dropout: a Dropout of this ratio on the adapter's input "
           "x (x A becomes Dropout(x) A), keyed like the model's own Dropouts">,
    Option<"freezeBase", "freeze-base", "bool", "true",
           "freeze every float variable but the adapters and `trainable`">,
    ListOption<"trainable", "trainable", "std::string",
               "glob patterns of base variables that stay trainable">
  ];
  let statistics = [
    Statistic<"numAdapted", "num-adapted", "Weights given adapters">,
    Statistic<"numProducts", "num-products", "Products rewritten">,
    Statistic<"numAdapterElements", "num-adapter-elements", "Elements of A and B">,
    Statistic<"numFrozen", "num-frozen", "Variables frozen">,
    Statistic<"numPartial", "num-partial",
              "Weights adapted in their products only (other readers keep W)">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

def GraphFuseElementwise : Pass<"graph-fuse-elementwise", "::mlir::func::FuncOp"> {
  let summary = "Fuse connected elementwise ops into graph.FusedElementwise";
  let description = [{
    Groups elementwise ops (unary math, binary arithmetic and comparisons with
    numpy broadcasting, Where, Cast between f32, bf16, f16 and from i1,
    scalar constants) whose results share one static shape into one
    `graph.FusedElementwise` that evaluates them in one pass over the
    elements; the casts at a group's edge become 16-bit loads and stores. In program order each candidate op
    joins the groups of its operands' producers when the group stays
    placeable: every input of the group is defined before the first op
    outside the group that uses a group result (so the fused op can take
    that place without moving any other op). Results used outside become the
    fused op's outputs (several if needed). Forward, backward and per-step
    (after gradient accumulation) ops are not mixed. Groups of one op are
    left alone. See docs/graph-dialect.md.

    ```
    strait-opt --graph-fuse-elementwise model.mlir
    ```
  }];
  let options = [
    Option<"maxInstructions", "max-instructions", "unsigned", "64",
           "largest program (instructions, constants included)">
  ];
  let statistics = [
    Statistic<"numGroups", "num-groups", "FusedElementwise ops created">,
    Statistic<"numFusedOps", "num-fused-ops", "Elementwise ops replaced">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

def GraphRematerialize : Pass<"graph-rematerialize", "::mlir::func::FuncOp"> {
  let summary = "Recompute forward elementwise values in the backward pass";
  let description = [{
    On a training step: a forward elementwise value (an op graph-fuse-elementwise
    fuses) whose backward readers are all elementwise ops of its shape is
    recomputed in front of them, from the forward values it derives from,
    when those take fewer bytes than the values they replace (counting only
    those the backward does not read anyway). Autodiff keeps the forward
    GELU's x, x/2, tanh and 1 + tanh for its gradient; all four derive from
    one product (bf16 under mixed precision), so the backward reads that
    product instead and the forward keeps nothing else. The clones carry
    the graph.grad_of of their first backward reader, so that
    graph-fuse-elementwise fuses them into the backward group and the
    planner counts the smaller set of kept values. Exact: the clones are the
    same operations on the same inputs. straitc runs it after the training
    step when fusing (`--rematerialize`, default on). See docs/graph-dialect.md.

    ```
    strait-opt --graph-rematerialize --graph-fuse-elementwise step.mlir
    ```
  }];
  let statistics = [
    Statistic<"numCloned", "num-cloned", "Forward ops cloned into the backward pass">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

def GraphFuseRMSNorm : Pass<"graph-fuse-rmsnorm", "::mlir::func::FuncOp"> {
  let summary = "Rewrite the decomposed RMSNorm of LLaMA exports into graph.RMSNormalization";
  let description = [{
    Matches, on f32 values,
    `Pow(x, 2) -> ReduceMean(trailing axes, keepdims) -> Add(eps) -> Sqrt ->
    Reciprocal | Div(1, .) -> Mul(x, .) -> Mul(weight, .)` (and
    `Div(x, Sqrt)` for the middle two; Add, Mul and the weight on either
    side), where every intermediate value has that one user, eps is a scalar
    constant, the exponent 2 and the numerator 1 are splat constants, and
    the weight broadcasts to the reduced dims without widening x. The chain
    becomes one `graph.RMSNormalization` (axis = the first reduced dim),
    whose gradient rule is the fused `graph.RMSNormalizationGrad`. It runs
    on the forward graph before `graph-build-training-step`. See
    docs/graph-dialect.md.

    ```
    strait-opt --graph-fuse-rmsnorm model.mlir
    ```
  }];
  let statistics = [
    Statistic<"numFused", "num-fused", "RMSNormalization ops created">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

def GraphRewriteExpertMatMuls : Pass<"graph-rewrite-expert-matmuls", "::mlir::func::FuncOp"> {
  let summary = "Compute gathered-expert batched matmuls without per-slot weight copies";
  let description = [{
    Matches `MatMul(GatherND(W, idx[S, 1]), B)` and `MatMul(Gather(W,
    idx[S], axis 0), B)` with W [E, O, I], B [S, I, N], static f32 shapes and
    the gather's result read only by the MatMul (or, transposed experts,
    `MatMul(B [S, N, I], gather of W [E, I, O])`, whose W is transposed to
    [I, E*O] once): the static-shape experts of
    mixture-of-experts exports (transformers' `batched_mm`), which copy an
    expert's weights per routed token (S * O * I elements, kept for the
    backward). When E * N < I it computes every slot column c = s * N + n
    against every expert in one GEMM,
    `Z = MatMul(Reshape(Transpose(B, [0, 2, 1]), [S*N, I]), Transpose(Reshape(W, [E*O, I])))`
    viewed as [S*N, E, O], and picks each slot's expert with a batched
    `MatMul(mask [S*N, 1, E], Z)`, mask[c, 0, e] = (idx[s] == e, or e - E for
    a negative index) as 0/1 floats: E * S * N * O elements and E times the
    gathered product's FLOPs, no gather or scatter kernels, and a backward of
    plain products. When N = 1 and B repeats each of T = S / k tokens k times
    through views of an `Expand` or `Tile` of [T, 1, I] to [T, k, I]
    (transformers' `repeat_interleave`), the GEMM reads the T tokens and the
    selection is `MatMul(mask [T, k, E], Z [T, E, O])`: E / k times the
    gathered product's FLOPs. Autodiff differentiates the plain ops. It runs on the
    forward graph before `graph-fold-transposes`.

    `mode=grouped` instead computes each slot's routed product only, as one
    `graph.GroupedMatMul` of the slots' rows [S*N, I] with W and the slots'
    indices (the kernels sort the rows by expert and run one GEMM per
    expert): 2 * S * N * I * O FLOPs, the gathered product's, without its
    weight copies, for any E. `mode=auto` (the default) takes the grouped
    form unless the all-experts GEMM does fewer than twice its FLOPs (and
    the all-experts form applies); `mode=dense` only the all-experts form
    (where E * N < I), `mode=gathered` leaves the products as exported. See
    docs/graph-dialect.md, "Expert matmuls".

    ```
    strait-opt --graph-rewrite-expert-matmuls model.mlir
    strait-opt --graph-rewrite-expert-matmuls=mode=dense model.mlir
    ```
  }];
  let options = [
    Option<"mode", "mode", "std::string", "\"auto\"",
           "auto, grouped, dense or gathered (no rewrite)">
  ];
  let statistics = [
    Statistic<"numRewritten", "num-rewritten", "Expert matmuls rewritten">,
    Statistic<"numGrouped", "num-grouped", "Expert matmuls rewritten as GroupedMatMul">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

def GraphFuseRotary : Pass<"graph-fuse-rotary", "::mlir::func::FuncOp"> {
  let summary = "Rewrite the rotate-half rotary embeddings of LLaMA exports into graph.FusedRotaryEmbedding";
  let description = [{
    Matches `Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, h, D)), Slice(x, 0,
    h)), sin))` over x's last axis (D even, h = D / 2; Add and Mul operands
    in either order; slices of step 1; every intermediate with that one
    user; x f32, bf16 or f16 and both products of x's type, so cos and sin
    broadcast without widening it) and replaces it by one
    `graph.FusedRotaryEmbedding(x, cos, sin)`, whose gradient is the same
    op with `adjoint = 1`. It runs on the forward graph before
    `graph-build-training-step`. See docs/graph-dialect.md.

    ```
    strait-opt --graph-fuse-rotary model.mlir
    ```
  }];
  let statistics = [
    Statistic<"numFused", "num-fused", "FusedRotaryEmbedding ops created">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

def GraphFuseAttention : Pass<"graph-fuse-attention", "::mlir::func::FuncOp"> {
  let summary = "Rewrite the decomposed attention of transformer exports into graph.FusedAttention";
  let description = [{
    Matches `MatMul(Q, Kt) -> Mul(c) | Div(c) -> [Add(bias)] -> Softmax(last
    axis) -> MatMul(., V)`, where every intermediate value has that one
    user, each scale is a splat float constant (Mul by c gives c, Div by c
    gives 1/c; several multiply, and scalings of Q and/or Kt right before
    the first MatMul count too), the bias (either Add operand) broadcasts to
    the scores without widening them and does not read a variable, and Q,
    Kt, V have one element type (f32, bf16 or f16), one rank and the same
    batch dims. The chain becomes one `graph.FusedAttention` (the product of
    the scales as `scale`), whose gradient rule is one
    `graph.FusedAttentionGrad`; the T x T scores and probabilities are no
    longer tensors of the graph. A bias computed from constants only
    (Expand, Cast, Where, comparisons, arithmetic) is read element by element
    without building it: all zeros, it is dropped; a causal
    mask (0 on and below the diagonal shifted by Tk - Tq, at most -1e30 or
    -inf above) becomes `causal = 1` without a bias. It runs on the forward graph before
    `graph-build-training-step`, followed by `graph-fold-transposes`. See
    docs/graph-dialect.md.

    ```
    strait-opt --graph-fuse-attention model.mlir
    ```
  }];
  let statistics = [
    Statistic<"numFused", "num-fused", "FusedAttention ops created">,
    Statistic<"numCausal", "num-causal", "constant causal masks turned into causal = 1">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

def GraphFoldTransposes : Pass<"graph-fold-transposes", "::mlir::func::FuncOp"> {
  let summary = "Fold Transposes into the products and attention ops that read or write them";
  let description = [{
    On the forward graph, after graph-fuse-attention: a Transpose becomes
    its reader's operand layout, so that neither the forward pass nor the
    backward pass autodiff builds from it moves the data.

    - `FusedAttention`: a Transpose that computes Q, Kt or V folds into the
      op's `q_perm` / `kt_perm` / `v_perm` (composed with one it has), and a
      Transpose that is Y's only user into `y_perm`. GPT-2's blocks then read
      Q, K, V and write Y as `[B, T, H, D]` tensors; the gradient op inherits
      the layouts.
    - `MatMul(A, Transpose(W, [1, 0]))` with a 2-D W (the linear layers of
      exports that keep PyTorch's `[out, in]` weight, LLaMA's) becomes
      `Gemm(A, W, transB = 1)`, A flattened to 2-D and the product reshaped
      back; `MatMul(Transpose(X, [1, 0]), B)` of 2-D operands becomes
      `Gemm(X, B, transA = 1)`. Gemm's gradients use its flags, no Transpose.
    - `FusedRotaryEmbedding(Transpose(x, p), cos, sin)` with p keeping the
      last axis becomes `Transpose(FusedRotaryEmbedding(x, cos', sin'), p)`
      (cos', sin' transposed by p^-1), first, so that LLaMA's rotated Q and
      K reach the attention through a Transpose it folds.
    - `Split(P, last axis, n equal parts)` whose parts reach only
      FusedAttention's Q, Kt and V, each through a Reshape to
      `[P's leading dims..., tail...]` (GPT-2's `[B, T, 3C]` projection cut
      into `[B, T, H, D]` heads), after the Transposes: one Reshape (a view)
      of P to `[lead..., n, tail...]`, which the attention reads part i of
      with `q_select` / `kt_select` / `v_select = [axis, i]`. The Split and
      the heads' Reshapes go, and autodiff's FusedAttentionGrad writes the
      packed dQKV itself (packed_grad): no Concat of dQ, dK, dV either.

    Transposes left without a reader go. See docs/graph-dialect.md.

    ```
    strait-opt --graph-fuse-attention --graph-fold-transposes model.mlir
    ```
  }];
  let statistics = [
    Statistic<"numAttention", "num-attention",
              "Transposes folded into FusedAttention permutations">,
    Statistic<"numMatMul", "num-matmul", "MatMuls over a transposed operand made Gemms">,
    Statistic<"numRotary", "num-rotary", "Transposes moved past a FusedRotaryEmbedding">,
    Statistic<"numSplit", "num-split", "Splits of a packed QKV read by FusedAttention selects">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

def GraphAutocast : Pass<"graph-autocast", "::mlir::ModuleOp"> {
  let summary = "Mixed precision: run GEMM-like ops on bf16 (or f16) operands";
  let description = [{
    An automatic-mixed-precision policy like PyTorch's autocast, applied to
    the forward graph before `graph-build-training-step`, so that autodiff
    differentiates through the casts. Every MatMul, Gemm, Conv and
    ConvTranspose whose float operands are all f32 gets a `graph.Cast` to
    `precision` on each float operand (a fresh cast per use, so gradients of
    a value used by several products are summed in f32 after the backward
    cast), computes in `precision` (result element type `precision`; the
    kernels accumulate in f32) and its result is cast back to f32 for every
    other op: softmax, normalizations, losses, reductions and elementwise ops
    stay f32. Variables stay f32 (the master weights): the weight read by a
    product is cast each step, its gradient is cast back to f32 (the rule of
    Cast) before it reaches AccumulateGrad and the optimizer, whose state
    stays f32. Einsum is left in f32. See docs/training.md, "Mixed precision".

    ```
    strait-opt --graph-autocast='precision=bf16' --graph-build-training-step model.mlir
    ```
  }];
  let options = [
    Option<"precision", "precision", "std::string", "\"bf16\"",
           "element type of the products' operands and results: bf16 or f16">
  ];
  let statistics = [
    Statistic<"numOps", "num-ops", "Ops that now compute in low precision">,
    Statistic<"numCasts", "num-casts", "Cast ops inserted">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

def GraphCastMotion : Pass<"graph-cast-motion", "::mlir::func::FuncOp"> {
  let summary = "Move casts through layout ops and cancel exact round trips";
  let description = [{
    Cleans up the casts `graph-autocast` leaves around layout ops, with
    bit-identical results: a narrowing `graph.Cast` (f32 to bf16 or f16)
    moves up through Transpose, Reshape, Squeeze, Unsqueeze, Flatten, Slice,
    Expand and Gather (data operand), and through a Split whose used results
    are all cast to one type (one cast of its input); a widening Cast (bf16
    or f16 to f32) moves down through the same single-input layout ops and
    through a Concat whose inputs are all such casts (one cast of its
    result). A cast moves only when the value between it and the layout op
    has no other user, and only between ops of one phase (forward /
    backward). Then `Cast(f32 -> T)` of `Cast(T -> f32)` of x is x (T = bf16
    or f16: exact; f32 -> T -> f32 is kept), and duplicate casts of one
    value to one type merge. `SoftmaxCrossEntropyLoss` of `Cast(T -> f32)`
    of x reads x (the kernel upcasts on load; the loss stays f32), and
    `Cast(f32 -> T)` of `SoftmaxCrossEntropyLossGrad(dl, Cast(T -> f32)(x),
    y)` is the T-typed gradient of x (the kernel rounds its f32 result once
    to T). Likewise a `LayerNormalization` or `RMSNormalization` whose Y
    only feeds a narrowing cast writes the T-typed Y (computed in f32,
    rounded once; its backward reads X, not Y), and
    `LayerNormalizationGrad`, `RMSNormalizationGrad` and `AccumulateGrad`
    read a widened 16-bit dY / gradient themselves (widened on load; the
    accumulator stays f32). It runs after `graph-build-training-step` (on
    the forward graph, merging casts would sum gradients in T instead of
    f32). See docs/training.md, "Mixed precision".

    ```
    strait-opt --graph-autocast --graph-build-training-step --graph-cast-motion model.mlir
    ```
  }];
  let statistics = [
    Statistic<"numMoved", "num-moved", "Casts moved through a layout op">,
    Statistic<"numCancelled", "num-cancelled", "T -> f32 -> T round trips removed">,
    Statistic<"numMerged", "num-merged", "Duplicate casts merged">,
    Statistic<"numLossFolded", "num-loss-folded",
              "Casts folded into SoftmaxCrossEntropyLoss(Grad) on 16-bit scores">,
    Statistic<"numNormFolded", "num-norm-folded",
              "Casts folded into LayerNormalization(Grad) and RMSNormalization(Grad) (16-bit Y / dY)">,
    Statistic<"numAccumulateFolded", "num-accumulate-folded",
              "Casts folded into AccumulateGrad (16-bit gradients)">,
    Statistic<"numRotaryFolded", "num-rotary-folded",
              "FusedRotaryEmbeddings made to read and write 16-bit values">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

def GraphFuseLossGrad : Pass<"graph-fuse-loss-grad", "::mlir::func::FuncOp"> {
  let summary = "Compute the softmax cross-entropy and its gradient in one op";
  let description = [{
    Replaces a `SoftmaxCrossEntropyLoss` and a `SoftmaxCrossEntropyLossGrad`
    with the same scores, labels, weights, reduction and ignore_index by one
    `graph.SoftmaxCrossEntropyLossWithGrad`, when the gradient's dLoss is
    known before the loss: a constant (autodiff's seed; cloned in front of
    the loss without its `graph.grad_of`), or a value defined before the
    loss by an op that is not a backward op. The fused op takes the loss's
    place and its `graph.op_id`, so the exporter runs it in the forward
    (of each micro-batch): the scores are read once and die there, and
    dScores waits for the backward. Results are bit for bit the two ops'.
    It runs after `graph-cast-motion` (which narrows the gradient to the
    16-bit scores' type) and before `graph-rematerialize`. See
    docs/graph-dialect.md.

    ```
    strait-opt --graph-build-training-step --graph-fuse-loss-grad model.mlir
    ```
  }];
  let statistics = [
    Statistic<"numFused", "num-fused", "SoftmaxCrossEntropyLossWithGrad ops created">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

def GraphRecomputeBlocks : Pass<"graph-recompute-blocks", "::mlir::func::FuncOp"> {
  let summary = "Recompute each block's forward right before its backward";
  let description = [{
    On a training step: the forward ops are grouped into blocks as the
    planner's coarsening does (by the layer key of the weights they read,
    `model.layers.3`). In every block, the forward ops that the block's own
    backward reads (and what they derive from inside the block) are cloned
    right before the block's first backward op; the clones carry that op's
    graph.grad_of (so stage assignment, the micro-batch split and 1F1B put
    them in the backward task of the same micro-batch and stage) and
    graph.recomputed. Between a micro-batch's forward and its backward only
    the blocks' inputs then stay alive. Exact: the clones are the same ops
    on the same inputs; a Dropout keyed by graph-build-training-step replays
    its mask from its key. Blocks with other random ops (RandomUniformLike,
    RandomNormalLike, Bernoulli, an unkeyed Dropout) are left alone with a
    warning. straitc
    applies the same transformation to the stages the planner chooses
    (`--recompute auto|full`, in dist-assign-stages); this pass recomputes
    every block. See docs/training.md, "Activation recomputation".

    ```
    strait-opt --graph-build-training-step='loss=mse' --graph-recompute-blocks step.mlir
    ```
  }];
  let statistics = [
    Statistic<"numBlocks", "num-blocks", "Blocks recomputed">,
    Statistic<"numCloned", "num-cloned", "Forward ops cloned into the backward pass">,
    Statistic<"numRefused", "num-refused", "Blocks left alone: they draw random numbers">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

#endif // STRAIT_DIALECT_GRAPH_GRAPHPASSES_TD
