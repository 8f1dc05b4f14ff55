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

def Dist_AllReduceOp : Dist_Op<"all_reduce", [
    MemoryEffects<[MemRead, MemWrite]>, AllTypesMatch<["value", "result"]>]> {
  let summary = "Reduce a value over the ranks of a group";
  let description = [{
    Every rank of `group` contributes its `value`; all get the sum (or mean)
    back. Used for the gradients of parameters replicated over data-parallel
    ranks. The group lists sorted distinct non-negative ranks (D7); all ranks
    of a group reduce the same values in the same order on the same
    `channel`.

    ```mlir
    %g2 = dist.all_reduce %g reduce <mean> over [0, 1] channel 4 : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$value, Dist_ReductionAttr:$reduction,
                       DenseI64ArrayAttr:$group, Dist_NonNegativeI64:$channel);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $value `reduce` $reduction `over` $group `channel` $channel attr-dict
    `:` type($value)
  }];
  let hasVerifier = 1;
}

def Dist_CompressOp : Dist_Op<"compress", [Pure]> {
  let summary = "Encode a value for a transfer (reserved for compression)";
  let description = [{
    Encodes `value` with `codec` before a send or an all-reduce. Result
    types per codec (D8): `fp16`/`bf16` give one tensor of the same shape
    with f16/bf16 elements, `int8`/`int4` one tensor of the same shape with
    i8/i4 elements, `topk` two 1-D tensors of `k = ceil(ratio * numel)`
    elements: the kept values and their i64 flat indices; `ratio` is in
    (0, 1] and given only for `topk`.

    ```mlir
    %v, %i = dist.compress %g codec <topk> ratio 0.25 : tensor<4x4xf32> -> tensor<4xf32>, tensor<4xi64>
    %h = dist.compress %g codec <fp16> : tensor<4x4xf32> -> tensor<4x4xf16>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$value, Dist_CodecAttr:$codec,
                       OptionalAttr<F64Attr>:$ratio);
  let results = (outs Variadic<AnyRankedTensor>:$outputs);
  let assemblyFormat = [{
    $value `codec` $codec (`ratio` $ratio^)? attr-dict `:` type($value) `->` type($outputs)
  }];
  let hasVerifier = 1;
}

def Dist_DecompressOp : Dist_Op<"decompress", [Pure]> {
  let summary = "Decode a value encoded by dist.compress";
  let description = [{
    The inverse of `dist.compress` with the same codec: its inputs are the
    encoder's results and its result the original type (D9; `topk` fills
    the entries that were not kept with zeros).

    ```mlir
    %g = dist.decompress %v, %i codec <topk> : tensor<4xf32>, tensor<4xi64> -> tensor<4x4xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs, Dist_CodecAttr:$codec);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $inputs `codec` $codec attr-dict `:` type($inputs) `->` type($result)
  }];
  let hasVerifier = 1;
}

#endif // STRAIT_DIALECT_DIST_DISTOPS_TD
