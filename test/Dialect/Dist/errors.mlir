// RUN: strait-opt %s -split-input-file -verify-diagnostics

// D5: a send to the sender's own stage.
func.func @send_self(%x: tensor<2xf32>) {
  // expected-error@+1 {{D5: peer stage 0 is the op's own stage}}
  dist.send %x to stage 0 channel 0 {dist.stage = #dist.stage<0>} : tensor<2xf32>
  return
}

// -----

// D5: a receive from the receiver's own stage.
func.func @recv_self() -> tensor<2xf32> {
  // expected-error@+1 {{D5: peer stage 1 is the op's own stage}}
  %r = dist.recv from stage 1 channel 0 {dist.stage = #dist.stage<1>} : tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

// D7: group ranks out of order.
func.func @group_unsorted(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{D7: group ranks must be sorted and distinct}}
  %r = dist.all_reduce %x reduce <sum> over [1, 0] channel 0 : tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

// D7: an empty group.
func.func @group_empty(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{D7: the group is empty}}
  %r = dist.all_reduce %x reduce <sum> over [] channel 0 : tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

// D8: fp16 encodes to f16 elements of the same shape.
func.func @fp16_type(%x: tensor<2x2xf32>) -> tensor<2x2xbf16> {
  // expected-error@+1 {{D8: codec 'fp16' encodes 'tensor<2x2xf32>' as ('tensor<2x2xf16>'), not ('tensor<2x2xbf16>')}}
  %r = dist.compress %x codec <fp16> : tensor<2x2xf32> -> tensor<2x2xbf16>
  return %r : tensor<2x2xbf16>
}

// -----

// D8: topk needs a ratio.
func.func @topk_no_ratio(%x: tensor<4xf32>) {
  // expected-error@+1 {{D8: topk needs a ratio in (0, 1]}}
  %v, %i = dist.compress %x codec <topk> : tensor<4xf32> -> tensor<2xf32>, tensor<2xi64>
  return
}

// -----

// D8: k follows the ratio.
func.func @topk_k(%x: tensor<4xf32>) {
  // expected-error@+1 {{D8: codec 'topk' encodes 'tensor<4xf32>' as ('tensor<2xf32>', 'tensor<2xi64>'), not ('tensor<3xf32>', 'tensor<3xi64>')}}
  %v, %i = dist.compress %x codec <topk> ratio 0.5 : tensor<4xf32> -> tensor<3xf32>, tensor<3xi64>
  return
}

// -----

// D8: only topk takes a ratio.
func.func @int8_ratio(%x: tensor<4xf32>) -> tensor<4xi8> {
  // expected-error@+1 {{D8: only topk takes a ratio}}
  %r = dist.compress %x codec <int8> ratio 0.5 : tensor<4xf32> -> tensor<4xi8>
  return %r : tensor<4xi8>
}

// -----

// D8: codecs encode floats.
func.func @int_input(%x: tensor<4xi64>) -> tensor<4xi8> {
  // expected-error@+1 {{D8: codecs encode float tensors, got 'i64'}}
  %r = dist.compress %x codec <int8> : tensor<4xi64> -> tensor<4xi8>
  return %r : tensor<4xi8>
}

// -----

// D9: topk decodes values and indices.
func.func @topk_decode_one(%v: tensor<2xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{D9: topk decodes two inputs (values, indices)}}
  %r = dist.decompress %v codec <topk> : tensor<2xf32> -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// D1: dist.stage must be a #dist.stage.
func.func @stage_not_typed(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{D1: 'dist.stage' must be a #dist.stage attribute}}
  %r = graph.Relu %x {dist.stage = 1 : i64} : tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

// D1: negative stage index.
func.func @stage_negative(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{D1: stage index must be non-negative, got -1}}
  %r = graph.Relu %x {dist.stage = #dist.stage<-1>} : tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

// D1: a stage outside the module's plan.
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["a"], ranks = [0]>]>} {
  func.func @stage_outside(%x: tensor<2xf32>) -> tensor<2xf32> {
    // expected-error@+1 {{D1: stage 3 is not in the plan, which has 1 stages}}
    %r = graph.Relu %x {dist.stage = #dist.stage<3>} : tensor<2xf32>
    return %r : tensor<2xf32>
  }
}

// -----

// D2: one rank per device.
// expected-error@+2 {{D2: stage 0 has 2 devices but 1 ranks}}
// expected-error@+1 {{failed to parse Dist_PlanAttr parameter 'stages'}}
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["a", "b"], ranks = [0]>]>} {
}

// -----

// D3: stages in order.
// expected-error@+1 {{D3: stages[0] is the placement of stage 1}}
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 1, devices = ["a"], ranks = [0]>]>} {
}

// -----

// D3: at least one micro-batch.
// expected-error@+1 {{D3: micro_batches must be at least 1, got 0}}
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 0, stages = [#dist.placement<stage = 0, devices = ["a"], ranks = [0]>]>} {
}

// -----

// D4: a rank in two stages.
// expected-error@+1 {{D4: rank 0 is used by more than one stage}}
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["a"], ranks = [0]>, #dist.placement<stage = 1, devices = ["b"], ranks = [0]>]>} {
}

// -----

// D4: ranks are dense from 0.
// expected-error@+1 {{D4: ranks must be 0..0; rank 0 is missing}}
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["a"], ranks = [1]>]>} {
}

// -----

// The plan belongs on a module.
// expected-error@+1 {{'dist.plan' belongs on a module}}
func.func @plan_on_func() attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["a"], ranks = [0]>]>} {
  return
}

// -----

// Unknown attributes of the dialect are rejected.
// expected-error@+1 {{unknown distribution attribute 'dist.foo'}}
func.func @unknown_attr() attributes {dist.foo = 1 : i64} {
  return
}
