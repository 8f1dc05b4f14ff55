// RUN: strait-opt %s -split-input-file --dist-insert-comm -verify-diagnostics

// Without a plan the pass asks for dist-assign-stages.
// expected-error@+1 {{dist-insert-comm needs a dist.plan and a function @main; run dist-assign-stages first}}
module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}

// -----

// Every op needs a stage.
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["a"], ranks = [0]>]>} {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    // expected-error@+1 {{op has no dist.stage; run dist-assign-stages first}}
    %a = graph.Relu %x : tensor<2xf32>
    return %a : tensor<2xf32>
  }
}
