// RUN: not strait-opt %s --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress=none compress-link=e1:w1=aqsgd:2' 2>&1 | FileCheck %s --check-prefix=LINK
// RUN: strait-opt %s --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress=aqsgd:2' 2>&1 | FileCheck %s --check-prefix=GLOBAL

// AQ-SGD keeps state per dataset sample at both ends of a pipeline cut: an
// override that puts it on the link of a gradient all-reduce is an error
// naming the override; the global mode compresses cuts only and says so.

// LINK: error: --compress-link=e1:w1=aqsgd:2: AQ-SGD compresses the forward activations of a pipeline cut, but this link carries the gradient all-reduce of stage 0 (give it a gradient codec, e.g. int8)
// GLOBAL: warning: --compress=aqsgd:2 leaves the gradient all-reduce of stage 0 uncompressed: AQ-SGD compresses pipeline activations only (give the all-reduce's link a codec with --compress-link)
// GLOBAL-NOT: dist.compress
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0", "e1", "w0", "w1"], ranks = [0, 1, 2, 3]>]>} {
  func.func @main(%g: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %a = graph.Relu %g {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    %r = dist.all_reduce %a reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 1>, array<i64: 2, 3>] channel 0 {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    return %r : tensor<256x256xf32>
  }
}
