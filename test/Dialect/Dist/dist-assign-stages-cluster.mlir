// RUN: strait-opt %s --dist-assign-stages='cluster=%inputs/dist-2cpu.yaml num-stages=2' | FileCheck %s
// RUN: strait-opt %s --dist-assign-stages='cluster=%inputs/dist-2cpu.yaml' | FileCheck %s --check-prefix=PLANNER
// RUN: strait-opt %s --dist-assign-stages='cluster=%inputs/dist-2cpu.yaml num-stages=2 schedule=gpipe' | FileCheck %s --check-prefix=GPIPE
// RUN: not strait-opt %s --dist-assign-stages='cluster=%inputs/dist-2cpu.yaml schedule=zigzag' 2>&1 | FileCheck %s --check-prefix=BAD

// With a cluster, num-stages=2 forces one layer per stage, one device each;
// devices are named after the cluster's; the schedule is 1F1B unless asked
// otherwise.
// GPIPE: module attributes {dist.memory_left = array<i64: {{[0-9]+}}, {{[0-9]+}}>, dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1,
// BAD: error: cannot plan @main: unknown schedule 'zigzag' (auto, gpipe or 1f1b)
// dist.memory_left: what each stage's device has left beside the planner's
// peak memory (90% of 4 GiB usable, 3865470566 bytes, less 352 bytes).
// CHECK: module attributes {dist.memory_left = array<i64: 3865470214, 3865470214>, dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["cpu0"], ranks = [0]>, #dist.placement<stage = 1, devices = ["cpu1"], ranks = [1]>]>, dist.warmup = array<i64: 0, 0>}
// The planner's own choice for this tiny model: one stage on one device
// (a slow link is not worth crossing), ranks from 0.
// PLANNER: module attributes {dist.memory_left = array<i64: {{[0-9]+}}>, dist.plan = #dist.plan<schedule = {{.*}}, stages = [#dist.placement<stage = 0, devices = ["cpu0"], ranks = [0]>]>{{.*}}}
// PLANNER-NOT: #dist.stage<1>
graph.Variable @layers.0.w : tensor<4x4xf32>
graph.Variable @layers.1.w : tensor<4x4xf32>
// CHECK-LABEL: func @main
func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32> {graph.name = "y"}) {
  // CHECK: graph.ReadVariable @layers.0.w {dist.stage = #dist.stage<0>}
  %w0 = graph.ReadVariable @layers.0.w : tensor<4x4xf32>
  // CHECK: graph.MatMul {{.*}} {dist.stage = #dist.stage<0>}
  %h = graph.MatMul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  // CHECK: graph.ReadVariable @layers.1.w {dist.stage = #dist.stage<1>}
  %w1 = graph.ReadVariable @layers.1.w : tensor<4x4xf32>
  // CHECK: graph.MatMul {{.*}} {dist.stage = #dist.stage<1>}
  %y = graph.MatMul %h, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
