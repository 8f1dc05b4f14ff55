//===- FlashAttention.cu - Tiled attention on tensor cores ----------------===//
//
// (In progress: filled in by the flash-attention work.)
//
//===----------------------------------------------------------------------===//
