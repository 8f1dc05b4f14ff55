//===- DistOps.td - Distribution dialect ops ---------------*- tablegen -*-===//

#ifndef STRAIT_DIALECT_DIST_DISTOPS_TD
#define STRAIT_DIALECT_DIST_DISTOPS_TD

include "strait/Dialect/Dist/DistAttrs.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/OpBase.td"

class Dist_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dist_Dialect, mnemonic, traits>;

def Dist_NonNegativeI64 : ConfinedAttr<I64Attr, [IntNonNegative]>;

def Dist_SendOp : Dist_Op<"send", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Send a value to the ops of another pipeline stage";
  let description = [{
    Runs in the stage that produces `value` (its `dist.stage`) and hands the
    value to stage `peer`, where exactly one `dist.recv` with the same
    `channel` from this stage receives it. The exporter maps replica `r` of
    this stage to replica `r` of the peer. The peer differs from the
    sender's stage (D5).

    ```mlir
    dist.send %h to stage 1 channel 0 {dist.stage = #dist.stage<0>} : tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$value, Dist_NonNegativeI64:$peer,
                       Dist_NonNegativeI64:$channel);
  let assemblyFormat = [{
    $value `to` `stage` $peer `channel` $channel attr-dict `:` type($value)
  }];
  let hasVerifier = 1;
}

def Dist_RecvOp : Dist_Op<"recv", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Receive a value sent by another pipeline stage";
  let description = [{
    The counterpart of `dist.send`: the result is the value that stage
    `peer` sent on `channel` (same type, D6).

    ```mlir
    %h = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>} : tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Dist_NonNegativeI64:$peer, Dist_NonNegativeI64:$channel);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    `from` `stage` $peer `channel` $channel attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

def Dist_IslandsAttr : TypedArrayAttrBase<DenseI64ArrayAttr, "list of rank groups">;

def Dist_AllReduceOp : Dist_Op<"all_reduce", [
    MemoryEffects<[MemRead, MemWrite]>, AllTypesMatch<["value", "result"]>]> {
  let summary = "Reduce a value over the ranks of a group";
  let description = [{
    Every rank of `group` contributes its `value`; all get the sum (or mean)
    back. Used for the gradients of parameters replicated over data-parallel
    ranks. The group lists sorted distinct non-negative ranks (D7); all ranks
    of a group reduce the same values in the same order on the same
    `channel`.

    With `islands` (a partition of the group into at least two sorted rank
    groups joined by fast links, D10) the reduction is hierarchical: inside
    each island, then across islands (the slow links carry the data once
    per island), then the result is shared inside each island.

    The value may be the encoded bytes of a `dist.compress` (and the result
    then feeds a `dist.decompress`): the reduction happens in the codec's
    domain (the runtime encodes each rank's chunks, sums the decoded chunks
    and encodes each sum once more, so every element goes through two
    encodings whatever the group's size; with islands, only the
    inter-island phase is encoded).

    ```mlir
    %g2 = dist.all_reduce %g reduce <mean> over [0, 1] channel 4 : tensor<64x64xf32>
    %g3 = dist.all_reduce %g reduce <mean> over [0, 1, 2, 3]
        islands [array<i64: 0, 1>, array<i64: 2, 3>] channel 5 : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$value, Dist_ReductionAttr:$reduction,
                       DenseI64ArrayAttr:$group, OptionalAttr<Dist_IslandsAttr>:$islands,
                       Dist_NonNegativeI64:$channel);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $value `reduce` $reduction `over` $group (`islands` $islands^)? `channel` $channel
    attr-dict `:` type($value)
  }];
  let hasVerifier = 1;
}

def Dist_CompressOp : Dist_Op<"compress", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Encode a value for a transfer on a slow link";
  let description = [{
    Encodes `value` with `codec` into the bytes a `dist.send` or a
    `dist.all_reduce` carries; the receiver's `dist.decompress` restores the
    plain type. The result is `tensor<N x i8>` where `N` is the wire size of
    the codec (D8, the size model of docs/planner.md): `fp16`/`bf16` 2n,
    `int8` n + 4 ceil(n/B), `int4` ceil(n/2) + 4 ceil(n/B) (one f32 scale
    per block of `block` = B elements, default 256), `topk` k (e + 4) with
    k = ceil(ratio n) kept values of e bytes each and their u32 indices,
    `topk_int8` / `topk_int4` k resp. ceil(k/2) code bytes + 4 ceil(k/B)
    (one f32 scale per block of B kept values) + ceil(k (b + 2) / 8) bytes
    of Rice-coded gaps, b the least integer >= 0 with k 2^b >= n (a bound:
    the runtime sends Elias-gamma-coded gaps instead where they are fewer).
    `int2` / `int3` ceil(2n/8) resp. ceil(3n/8) + 4 ceil(n/B) (codes -2..1 /
    -4..3). `aqsgd_int2` / `aqsgd_int3` / `aqsgd_int4` (AQ-SGD, on the
    forward activations of a pipeline cut only): both ends keep the last
    reconstruction m(x) of each dataset sample x and the wire carries
    int2 / int3 / int4 codes of a(x) - m(x), so the size is that codec's (a
    micro-batch with a sample seen for the first time goes as int8); they
    feed a `dist.send`, never an all-reduce, and take no `error_feedback`.
    `ratio` (in (0, 1]) only for the top-k codecs, `block` only for the
    quantizing codecs.
    With `error_feedback` the sender keeps what the codec dropped and adds
    it to the next transfer of the same value (for gradients). The op has
    state (the residual), hence memory effects.

    The exporter folds compress -> send, recv -> decompress and compress ->
    all_reduce -> decompress into the transfer's CodecParams: the program
    moves the plain value and the runtime encodes on the wire.

    ```mlir
    %c = dist.compress %h codec <int8> block 256 : tensor<16x64xf32> -> tensor<1040xi8>
    %k = dist.compress %g codec <topk> ratio 0.01 error_feedback : tensor<64x64xf32> -> tensor<328xi8>
    %q = dist.compress %g codec <topk_int8> ratio 0.01 block 256 error_feedback
        : tensor<64x64xf32> -> tensor<92xi8>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$value, Dist_CodecAttr:$codec,
                       OptionalAttr<F64Attr>:$ratio, OptionalAttr<I64Attr>:$block,
                       UnitAttr:$error_feedback);
  let results = (outs RankedTensorOf<[I8]>:$encoded);
  let assemblyFormat = [{
    $value `codec` $codec (`ratio` $ratio^)? (`block` $block^)?
    (`error_feedback` $error_feedback^)? attr-dict `:` type($value) `->` type($encoded)
  }];
  let hasVerifier = 1;
}

def Dist_DecompressOp : Dist_Op<"decompress", [Pure]> {
  let summary = "Decode the bytes of a dist.compress";
  let description = [{
    The inverse of `dist.compress` with the same codec, ratio and block:
    its input holds the encoded bytes (the size D8 gives for the result
    type), its result is the plain value (D9; `topk` fills the entries that
    were not kept with zeros).

    ```mlir
    %h = dist.decompress %r codec <int8> block 256 : tensor<1040xi8> -> tensor<16x64xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[I8]>:$encoded, Dist_CodecAttr:$codec,
                       OptionalAttr<F64Attr>:$ratio, OptionalAttr<I64Attr>:$block);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $encoded `codec` $codec (`ratio` $ratio^)? (`block` $block^)? attr-dict
    `:` type($encoded) `->` type($result)
  }];
  let hasVerifier = 1;
}

#endif // STRAIT_DIALECT_DIST_DISTOPS_TD
