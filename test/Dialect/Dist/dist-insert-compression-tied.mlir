// RUN: strait-opt %s -split-input-file --dist-insert-compression='compress=int8' 2>/dev/null | FileCheck %s
// RUN: strait-opt %s -split-input-file --dist-insert-compression='compress=int8' 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
// RUN: strait-opt %s -split-input-file --dist-insert-compression='compress=aqsgd:2:int4' 2>/dev/null | FileCheck %s --check-prefix=AQ
// RUN: strait-opt %s -split-input-file --dist-insert-compression='cluster=%inputs/compress-2site.yaml' 2>/dev/null | FileCheck %s --check-prefix=AUTO

// The per-step exchange of a tied variable's partial gradients (sends
// marked dist.per_step): each copy's stage sums its own partial and the
// received ones, so the sender must go on with the decoded value it sent.
// One dist.compress (error feedback) feeds the send, a local
// dist.decompress of it right after the send replaces every other use on
// the sending stage; the receiver decodes the same bytes. Under
// aqsgd:B:GRAD the exchange takes GRAD. With the cluster (10 Mbps between
// the sites, 1 ms), auto weighs the 64 KiB per step (about 53 ms) against
// the stages' compute (a Relu: microseconds) like a gradient all-reduce:
// nothing fits, and of the weight-gradient ladder (no AdamW here, so top-k
// is allowed) the fastest, top-k at 1e-3 with int8 values, saves the most.

// CHECK-LABEL: func.func @main
// CHECK: %[[G0:.*]] = graph.Relu %{{.*}} {dist.stage = #dist.stage<0>}
// CHECK: %[[C0:.*]] = dist.compress %[[G0]] codec <int8> block 256 error_feedback {dist.stage = #dist.stage<0>} : tensor<64x256xf32> -> tensor<16640xi8>
// CHECK-NEXT: dist.send %[[C0]] to stage 1 channel 0 {dist.backward, dist.per_step
// CHECK-NEXT: %[[D0:.*]] = dist.decompress %[[C0]] codec <int8> block 256 {dist.stage = #dist.stage<0>}
// CHECK-NEXT: %[[R0:.*]] = dist.recv from stage 0 channel 0 {{.*}} : tensor<16640xi8>
// CHECK-NEXT: %[[P0:.*]] = dist.decompress %[[R0]] codec <int8> block 256 {dist.stage = #dist.stage<1>}
// CHECK: %[[C1:.*]] = dist.compress %[[G1:.*]] codec <int8> block 256 error_feedback {dist.stage = #dist.stage<1>}
// CHECK-NEXT: dist.send %[[C1]] to stage 0 channel 1
// CHECK-NEXT: %[[D1:.*]] = dist.decompress %[[C1]] codec <int8> block 256 {dist.stage = #dist.stage<1>}
// CHECK-NEXT: %[[R1:.*]] = dist.recv from stage 1 channel 1
// CHECK-NEXT: %[[P1:.*]] = dist.decompress %[[R1]] codec <int8> block 256 {dist.stage = #dist.stage<0>}
// Both stages add the same decoded partials in stage order.
// CHECK: graph.Add %[[D0]], %[[P1]] {dist.stage = #dist.stage<0>}
// CHECK: graph.Add %[[P0]], %[[D1]] {dist.stage = #dist.stage<1>}
// AQ-LABEL: func.func @main
// AQ: dist.compress %{{.*}} codec <int4> block 256 error_feedback {dist.stage = #dist.stage<0>}
// AQ: dist.compress %{{.*}} codec <int4> block 256 error_feedback {dist.stage = #dist.stage<1>}
// AUTO-LABEL: func.func @main
// AUTO: dist.compress %{{.*}} codec <topk_int8> ratio {{.*}} error_feedback {dist.stage = #dist.stage<0>}
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0"], ranks = [0]>, #dist.placement<stage = 1, devices = ["w0"], ranks = [1]>]>} {
  func.func @main(%x: tensor<64x256xf32>, %y: tensor<64x256xf32>) -> (tensor<64x256xf32>, tensor<64x256xf32>) {
    %g0 = graph.Relu %x {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    dist.send %g0 to stage 1 channel 0 {dist.backward, dist.per_step, dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %p0 = dist.recv from stage 0 channel 0 {dist.backward, dist.per_step, dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    %g1 = graph.Relu %y {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    dist.send %g1 to stage 0 channel 1 {dist.backward, dist.per_step, dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    %p1 = dist.recv from stage 1 channel 1 {dist.backward, dist.per_step, dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %s0 = graph.Add %g0, %p1 {dist.stage = #dist.stage<0>} : (tensor<64x256xf32>, tensor<64x256xf32>) -> tensor<64x256xf32>
    %s1 = graph.Add %p0, %g1 {dist.stage = #dist.stage<1>} : (tensor<64x256xf32>, tensor<64x256xf32>) -> tensor<64x256xf32>
    return %s0, %s1 : tensor<64x256xf32>, tensor<64x256xf32>
  }
}

// -----

// Three copies: stage 0's partial goes to stages 1 and 2 from one
// dist.compress (the exporter encodes once: keep_decoded, then
// repeat_payload), and stage 0 sums the decoded value.

// CHECK-LABEL: func.func @main
// CHECK: %[[C:.*]] = dist.compress %{{.*}} codec <int8> block 256 error_feedback {dist.stage = #dist.stage<0>}
// CHECK-NEXT: dist.send %[[C]] to stage 1 channel 0
// CHECK-NEXT: %[[D:.*]] = dist.decompress %[[C]] codec <int8> block 256 {dist.stage = #dist.stage<0>}
// CHECK-NEXT: dist.recv from stage 0 channel 0
// CHECK-NEXT: dist.decompress
// CHECK-NEXT: dist.send %[[C]] to stage 2 channel 1
// CHECK-NEXT: dist.recv from stage 0 channel 1
// CHECK-NEXT: dist.decompress
// CHECK-NOT: dist.compress
// CHECK: graph.Relu %[[D]] {dist.stage = #dist.stage<0>}
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0"], ranks = [0]>, #dist.placement<stage = 1, devices = ["e1"], ranks = [1]>, #dist.placement<stage = 2, devices = ["w0"], ranks = [2]>]>} {
  func.func @main(%x: tensor<64x256xf32>) -> (tensor<64x256xf32>, tensor<64x256xf32>, tensor<64x256xf32>) {
    %g0 = graph.Relu %x {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    dist.send %g0 to stage 1 channel 0 {dist.backward, dist.per_step, dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %p1 = dist.recv from stage 0 channel 0 {dist.backward, dist.per_step, dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    dist.send %g0 to stage 2 channel 1 {dist.backward, dist.per_step, dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %p2 = dist.recv from stage 0 channel 1 {dist.backward, dist.per_step, dist.stage = #dist.stage<2>} : tensor<64x256xf32>
    %s0 = graph.Relu %g0 {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    return %s0, %p1, %p2 : tensor<64x256xf32>, tensor<64x256xf32>, tensor<64x256xf32>
  }
}

// -----

// A value the sender uses before its send, and a variable's read (which a
// decoded value must not overwrite) stay exact, with a remark.

// REMARK: remark: the per-step transfer of this value stays exact: the sender must go on with the decoded value, but the value is used before it is sent
// REMARK: remark: the per-step transfer of this value stays exact: the sender must go on with the decoded value, but the value is not a computed one
// CHECK-LABEL: func.func @main
// CHECK-NOT: dist.compress
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0"], ranks = [0]>, #dist.placement<stage = 1, devices = ["w0"], ranks = [1]>]>} {
  graph.Variable @w : tensor<64x256xf32> = dense<0.5> : tensor<64x256xf32>
  func.func @main(%x: tensor<64x256xf32>) -> (tensor<64x256xf32>, tensor<64x256xf32>, tensor<64x256xf32>, tensor<64x256xf32>) {
    %g0 = graph.Relu %x {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %s0 = graph.Relu %g0 {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    dist.send %g0 to stage 1 channel 0 {dist.backward, dist.per_step, dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %p1 = dist.recv from stage 0 channel 0 {dist.backward, dist.per_step, dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    %w = graph.ReadVariable @w {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    dist.send %w to stage 1 channel 1 {dist.backward, dist.per_step, dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %q1 = dist.recv from stage 0 channel 1 {dist.backward, dist.per_step, dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    %t0 = graph.Relu %w {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    return %s0, %p1, %q1, %t0 : tensor<64x256xf32>, tensor<64x256xf32>, tensor<64x256xf32>, tensor<64x256xf32>
  }
}
