// RUN: strait-opt %s --dist-insert-compression='compress=topk:0.05 adaptive-topk=0.005:0.2' | FileCheck %s
// RUN: strait-opt %s --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress=none compress-link=west:east=topk:0.05 adaptive-topk=0.01:0.05' | FileCheck %s --check-prefix=LINK
// RUN: not strait-opt %s --dist-insert-compression='compress=topk:0.05 adaptive-topk=0.1:0.2' 2>&1 | FileCheck %s --check-prefix=OUTSIDE
// RUN: not strait-opt %s --dist-insert-compression='compress=topk:0.05 adaptive-topk=0.2:0.1' 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not strait-opt %s --dist-insert-compression='compress=topk:0.05 adaptive-topk=0:0.1' 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not strait-opt %s --dist-insert-compression='compress=topk:0.05 adaptive-topk=0.1' 2>&1 | FileCheck %s --check-prefix=FORM
// RUN: not strait-opt %s --dist-insert-compression='compress=topk:0.05 adaptive-topk=a:b' 2>&1 | FileCheck %s --check-prefix=FORM
// RUN: not strait-opt %s --dist-insert-compression='compress=int8 adaptive-topk=0.01:0.1' 2>&1 | FileCheck %s --check-prefix=NOTOPK
// RUN: not strait-opt %s --dist-insert-compression='compress=none adaptive-topk=0.01:0.1' 2>&1 | FileCheck %s --check-prefix=NONE

// adaptive-topk marks the sender's dist.compress of every top-k transfer
// between stages with its bounds (the exporter's CodecParams adapt,
// ratio_min, ratio_max); the receiver's dist.decompress needs nothing (a
// payload carries its k). The codec's ratio is where the run starts and
// must lie within the bounds.

// CHECK: dist.compress %{{.*}} codec <topk> ratio 5.000000e-02 {dist.stage = #dist.stage<0>, dist.topk_adapt = array<f64: 5.000000e-03, 2.000000e-01>} : tensor<64x256xf32> -> tensor<6560xi8>
// CHECK: dist.decompress %{{.*}} codec <topk> ratio 5.000000e-02 {dist.stage = #dist.stage<1>} : tensor<6560xi8> -> tensor<64x256xf32>
// LINK: dist.compress %{{.*}} codec <topk> ratio 5.000000e-02 {dist.stage = #dist.stage<0>, dist.topk_adapt = array<f64: 1.000000e-02, 5.000000e-02>}
// OUTSIDE: error: --adaptive-topk=0.1:0.2: the top-k ratio 0.05 of the transfers from stage 0 to stage 1 (its starting ratio) is outside [0.1, 0.2]
// ORDER: error: --adaptive-topk={{.*}}: needs 0 < MIN <= MAX <= 1
// FORM: error: --adaptive-topk={{.*}}: expected MIN:MAX, two ratios such as 0.005:0.2
// NOTOPK: error: --adaptive-topk=0.01:0.1: no transfer between stages uses top-k (give --compress topk:R or --compress-link A:B=topk:R; all-reduces never adapt)
// NONE: error: --adaptive-topk=0.01:0.1 needs top-k transfers between stages: give --compress topk:R or --compress-link A:B=topk:R
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0"], ranks = [0]>, #dist.placement<stage = 1, devices = ["w0"], ranks = [1]>]>} {
  func.func @main(%x: tensor<64x256xf32>) -> tensor<64x256xf32> {
    %h = graph.Relu %x {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    dist.send %h to stage 1 channel 0 {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %r = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    %y = graph.Relu %r {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    return %y : tensor<64x256xf32>
  }
}
