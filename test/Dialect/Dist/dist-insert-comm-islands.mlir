// RUN: strait-opt %s -split-input-file --dist-insert-comm='cluster=%inputs/compress-2site.yaml' | FileCheck %s
// RUN: strait-opt %s -split-input-file --dist-insert-comm | FileCheck %s --check-prefix=FLAT
// RUN: strait-opt %s -split-input-file --dist-insert-comm='cluster=%inputs/compress-2site.yaml local-steps=4' | FileCheck %s --check-prefix=LOCAL

// With the cluster, replicas on both sites (e0, e1 in east; w0, w1 in west,
// 10 Gbps inside, 10 Mbps between) reduce hierarchically: one island per
// site, as rank groups. Without the cluster the all-reduce is flat.
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0", "w0", "e1", "w1"], ranks = [0, 1, 2, 3]>]>} {
  graph.Variable @w : tensor<4xf32>
  // CHECK-LABEL: func @main
  // CHECK: dist.all_reduce %{{.*}} reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 2>, array<i64: 1, 3>] channel 0
  // FLAT-LABEL: func @main
  // FLAT: dist.all_reduce %{{.*}} reduce <mean> over [0, 1, 2, 3] channel 0
  // LOCAL-LABEL: func @main
  // LOCAL: dist.all_reduce %{{.*}} reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 2>, array<i64: 1, 3>] channel 0
  func.func @main(%g: tensor<4xf32>) -> tensor<4xf32> {
    %a = graph.AccumulateGrad %g for @w {dist.stage = #dist.stage<0>, micro_batches = 1 : i64} : tensor<4xf32>
    return %a : tensor<4xf32>
  }
}

// -----

// One replica per site: the islands would be single ranks, which is the
// flat ring, so no islands are marked; replicas inside one site neither.
// With local-steps > 1 the islands decide what synchronizes every step:
// the two sites are islands of one rank each (two devices on one link show
// no bandwidth gap; the sites split them).
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0", "w0"], ranks = [0, 1]>, #dist.placement<stage = 1, devices = ["e1", "w1"], ranks = [2, 3]>]>} {
  graph.Variable @w : tensor<4xf32>
  // CHECK-LABEL: func @main
  // CHECK: dist.all_reduce %{{.*}} reduce <mean> over [0, 1] channel 0
  // LOCAL-LABEL: func @main
  // LOCAL: dist.all_reduce %{{.*}} reduce <mean> over [0, 1] islands [array<i64: 0>, array<i64: 1>] channel 0
  func.func @main(%g: tensor<4xf32>) -> tensor<4xf32> {
    %a = graph.AccumulateGrad %g for @w {dist.stage = #dist.stage<0>, micro_batches = 1 : i64} : tensor<4xf32>
    return %a : tensor<4xf32>
  }
}
