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

// D8: the encoded bytes follow the size model (fp16: 2 bytes a value).
func.func @fp16_type(%x: tensor<2x2xf32>) -> tensor<16xi8> {
  // expected-error@+1 {{D8: codec 'fp16' encodes 'tensor<2x2xf32>' in 8 bytes (tensor<8xi8>), not 'tensor<16xi8>'}}
  %r = dist.compress %x codec <fp16> : tensor<2x2xf32> -> tensor<16xi8>
  return %r : tensor<16xi8>
}

// -----

// D8: topk needs a ratio.
func.func @topk_no_ratio(%x: tensor<4xf32>) -> tensor<16xi8> {
  // expected-error@+1 {{D8: topk needs a ratio in (0, 1]}}
  %r = dist.compress %x codec <topk> : tensor<4xf32> -> tensor<16xi8>
  return %r : tensor<16xi8>
}

// -----

// D8: k = ceil(ratio n) values and u32 indices: 2 x 8 bytes.
func.func @topk_k(%x: tensor<4xf32>) -> tensor<24xi8> {
  // expected-error@+1 {{D8: codec 'topk' encodes 'tensor<4xf32>' in 16 bytes (tensor<16xi8>), not 'tensor<24xi8>'}}
  %r = dist.compress %x codec <topk> ratio 0.5 : tensor<4xf32> -> tensor<24xi8>
  return %r : tensor<24xi8>
}

// -----

// D8: only the top-k codecs take a ratio.
func.func @int8_ratio(%x: tensor<4xf32>) -> tensor<8xi8> {
  // expected-error@+1 {{D8: only topk, topk_int8 and topk_int4 take a ratio}}
  %r = dist.compress %x codec <int8> ratio 0.5 : tensor<4xf32> -> tensor<8xi8>
  return %r : tensor<8xi8>
}

// -----

// D8: only the quantizers take a block size.
func.func @fp16_block(%x: tensor<4xf32>) -> tensor<8xi8> {
  // expected-error@+1 {{D8: only the quantizing codecs (int8, int4, int3, int2, topk_int8, topk_int4, aqsgd_int2/3/4) take a block size}}
  %r = dist.compress %x codec <fp16> block 2 : tensor<4xf32> -> tensor<8xi8>
  return %r : tensor<8xi8>
}

// -----

// D8: topk_int8 needs a ratio.
func.func @topk_int8_no_ratio(%x: tensor<4xf32>) -> tensor<16xi8> {
  // expected-error@+1 {{D8: topk_int8 needs a ratio in (0, 1]}}
  %r = dist.compress %x codec <topk_int8> block 2 : tensor<4xf32> -> tensor<16xi8>
  return %r : tensor<16xi8>
}

// -----

// D8: topk_int4 of 64x64 at 1%: k = 41, Rice parameter 7 (41 * 2^7 >= 4096):
// 21 code bytes + 4 (one scale) + ceil(41 * 9 / 8) = 47 bytes of gaps = 72.
func.func @topk_int4_size(%x: tensor<64x64xf32>) -> tensor<92xi8> {
  // expected-error@+1 {{D8: codec 'topk_int4' encodes 'tensor<64x64xf32>' in 72 bytes (tensor<72xi8>), not 'tensor<92xi8>'}}
  %r = dist.compress %x codec <topk_int4> ratio 0.01 : tensor<64x64xf32> -> tensor<92xi8>
  return %r : tensor<92xi8>
}

// -----

// D8: a block holds at least one value.
func.func @int8_block_zero(%x: tensor<4xf32>) -> tensor<8xi8> {
  // expected-error@+1 {{D8: the block size must be positive, got 0}}
  %r = dist.compress %x codec <int8> block 0 : tensor<4xf32> -> tensor<8xi8>
  return %r : tensor<8xi8>
}

// -----

// D8: codecs encode floats.
func.func @int_input(%x: tensor<4xi64>) -> tensor<8xi8> {
  // expected-error@+1 {{D8: codecs encode float tensors, got 'i64'}}
  %r = dist.compress %x codec <int8> : tensor<4xi64> -> tensor<8xi8>
  return %r : tensor<8xi8>
}

// -----

// D9: the decoder checks the same size rule (int4: 2 bytes and one scale).
func.func @int4_decode_size(%v: tensor<7xi8>) -> tensor<4xf32> {
  // expected-error@+1 {{D9: codec 'int4' encodes 'tensor<4xf32>' in 6 bytes (tensor<6xi8>), not 'tensor<7xi8>'}}
  %r = dist.decompress %v codec <int4> : tensor<7xi8> -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// D10: islands partition the group: every rank once.
func.func @islands_overlap(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{D10: rank 1 is in more than one island}}
  %r = dist.all_reduce %x reduce <mean> over [0, 1, 2] islands [array<i64: 0, 1>, array<i64: 1, 2>] channel 0 : tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

// D10: islands cover the group.
func.func @islands_cover(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{D10: the islands must cover the group (3 of 4 ranks)}}
  %r = dist.all_reduce %x reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 1>, array<i64: 2>] channel 0 : tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

// D10: island ranks belong to the group.
func.func @islands_foreign(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{D10: island 1 has rank 5, which is not in the group}}
  %r = dist.all_reduce %x reduce <mean> over [0, 1] islands [array<i64: 0>, array<i64: 5>] channel 0 : tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

// D10: a hierarchy needs two islands at least.
func.func @islands_one(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{D10: islands must be at least two groups}}
  %r = dist.all_reduce %x reduce <mean> over [0, 1] islands [array<i64: 0, 1>] channel 0 : tensor<2xf32>
  return %r : tensor<2xf32>
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

// -----

// 'dist.per_step' (a transfer run once per step) marks only transfers.
func.func @per_step_on_compute(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{'dist.per_step' is a unit attribute of dist.send and dist.recv}}
  %y = graph.Relu %x {dist.per_step} : tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

// D9: aqsgd_int3 of 16x64: ceil(3 * 1024 / 8) = 384 code bytes + 4 scales.
func.func @aqsgd_int3_size(%v: tensor<384xi8>) -> tensor<16x64xf32> {
  // expected-error@+1 {{D9: codec 'aqsgd_int3' encodes 'tensor<16x64xf32>' in 400 bytes (tensor<400xi8>), not 'tensor<384xi8>'}}
  %r = dist.decompress %v codec <aqsgd_int3> : tensor<384xi8> -> tensor<16x64xf32>
  return %r : tensor<16x64xf32>
}

// -----

// D8: AQ-SGD keeps per-sample state, never an error-feedback residual.
func.func @aqsgd_feedback(%x: tensor<16x64xf32>) -> tensor<272xi8> {
  // expected-error@+1 {{D8: aqsgd_int2 keeps per-sample state, not an error-feedback residual}}
  %r = dist.compress %x codec <aqsgd_int2> error_feedback : tensor<16x64xf32> -> tensor<272xi8>
  return %r : tensor<272xi8>
}

// -----

// D8: AQ-SGD encodes for a dist.send, not for an all-reduce.
func.func @aqsgd_all_reduce(%x: tensor<16x64xf32>) -> tensor<272xi8> {
  // expected-error@+1 {{D8: aqsgd_int2 encodes pipeline activations for a dist.send, not for 'dist.all_reduce'}}
  %c = dist.compress %x codec <aqsgd_int2> : tensor<16x64xf32> -> tensor<272xi8>
  %r = dist.all_reduce %c reduce <sum> over [0, 1] channel 0 : tensor<272xi8>
  return %r : tensor<272xi8>
}
