// RUN: strait-opt %s --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress=none compress-link=e1:w1=int8' | FileCheck %s
// RUN: strait-opt %s --dist-insert-compression='compress=none compress-link=w1:e1=int4' | FileCheck %s --check-prefix=NAMES
// RUN: not strait-opt %s --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress=none compress-link=e0:e1=int8' 2>&1 | FileCheck %s --check-prefix=INSIDE
// RUN: strait-opt %s --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress=topk:0.01:int4' | FileCheck %s --check-prefix=QTOPK

// A per-link override of an all-reduce's inter-island phase may name any
// pair of replicas in different islands (not only the islands' first
// members), with the cluster (sites, hosts, devices) or without (the plan's
// device names); gradients always get error feedback. A pair inside one
// island is no link of the all-reduce's slow phase: an error.

// CHECK: %[[C:.*]] = dist.compress %{{.*}} codec <int8> block 256 error_feedback {dist.stage = #dist.stage<0>} : tensor<256x256xf32> -> tensor<66560xi8>
// CHECK-NEXT: dist.all_reduce %[[C]] reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 1>, array<i64: 2, 3>] channel 0 {dist.stage = #dist.stage<0>} : tensor<66560xi8>
// NAMES: dist.compress %{{.*}} codec <int4> block 256 error_feedback
// INSIDE: error: --compress-link=e0:e1=int8: no link of the plan joins 'e0' and 'e1'

// Top-k with int4 values between the islands: k = 656 of 65536, Rice
// parameter 7: 328 code bytes + 3 scales (12) + ceil(656 * 9 / 8) = 738.
// QTOPK: %[[C:.*]] = dist.compress %{{.*}} codec <topk_int4> ratio 1.000000e-02 block 256 error_feedback {dist.stage = #dist.stage<0>} : tensor<256x256xf32> -> tensor<1078xi8>
// QTOPK-NEXT: dist.all_reduce %[[C]] reduce <mean> over [0, 1, 2, 3] islands
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0", "e1", "w0", "w1"], ranks = [0, 1, 2, 3]>]>} {
  func.func @main(%g: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %a = graph.Relu %g {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    %r = dist.all_reduce %a reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 1>, array<i64: 2, 3>] channel 0 {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    return %r : tensor<256x256xf32>
  }
}
