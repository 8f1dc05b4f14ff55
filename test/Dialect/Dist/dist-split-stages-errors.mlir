// RUN: strait-opt %s -split-input-file --dist-split-stages -verify-diagnostics

// A value crossing stages without a recv cannot be split.
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["a"], ranks = [0]>, #dist.placement<stage = 1, devices = ["b"], ranks = [1]>]>} {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    %a = graph.Relu %x {dist.stage = #dist.stage<0>} : tensor<2xf32>
    // expected-error@+1 {{operand crosses from stage 0 to stage 1 without dist.recv; run dist-insert-comm first}}
    %b = graph.Relu %a {dist.stage = #dist.stage<1>} : tensor<2xf32>
    return %b : tensor<2xf32>
  }
}

// -----

// An output that is an input cannot be produced by a stage.
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["a"], ranks = [0]>]>} {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    // expected-error@+1 {{result 0 of @main is an argument; a stage cannot output its input}}
    return %x : tensor<2xf32>
  }
}
