// RUN: strait-opt %s --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress=none compress-link=west:east=topk:0.05' | FileCheck %s --check-prefix=SITES
// RUN: strait-opt %s --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress-link=e0:w0=none' | FileCheck %s --check-prefix=OFF
// RUN: strait-opt %s --dist-insert-compression='compress=none compress-link=e0:w0=bf16' | FileCheck %s --check-prefix=NOCLUSTER

// Per-link overrides win over the mode: a site pair in either order (top-k
// on activations only when asked for), a device pair that turns auto off,
// and without a cluster the plan's device names.

// SITES: dist.compress %{{.*}} codec <topk> ratio 5.000000e-02 {dist.stage = #dist.stage<0>} : tensor<64x256xf32> -> tensor<6560xi8>
// SITES: dist.decompress %{{.*}} codec <topk> ratio 5.000000e-02 {dist.stage = #dist.stage<1>} : tensor<6560xi8> -> tensor<64x256xf32>
// OFF-NOT: dist.compress
// NOCLUSTER: dist.compress %{{.*}} codec <bf16> {dist.stage = #dist.stage<0>} : tensor<64x256xf32> -> tensor<32768xi8>
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0"], ranks = [0]>, #dist.placement<stage = 1, devices = ["w0"], ranks = [1]>]>} {
  func.func @main(%x: tensor<64x256xf32>) -> tensor<64x256xf32> {
    %h = graph.Relu %x {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    dist.send %h to stage 1 channel 0 {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %r = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    %y = graph.Relu %r {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    return %y : tensor<64x256xf32>
  }
}
