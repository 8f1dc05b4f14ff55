// RUN: strait-opt %s --dist-insert-compression='compress=aqsgd:2' | FileCheck %s
// RUN: strait-opt %s --dist-insert-compression='compress=aqsgd:4:bf16' | FileCheck %s --check-prefix=BF16
// RUN: strait-opt %s --dist-insert-compression='compress=none compress-link=w0:e0=aqsgd:3:none' | FileCheck %s --check-prefix=LINK
// RUN: not strait-opt %s --dist-insert-compression='compress=aqsgd:1' 2>&1 | FileCheck %s --check-prefix=BADBITS
// RUN: not strait-opt %s --dist-insert-compression='compress=none compress-link=e0:w0=aqsgd:2:topk:0.1' 2>&1 | FileCheck %s --check-prefix=BADGRAD

// AQ-SGD (aqsgd:B[:GRAD]) on a cut: the forward activation send gets
// aqsgd_intB (the runtime sends the delta against each sample's last
// reconstruction), the backward send (dist.backward: an activation
// gradient) the plain codec GRAD (default int8), and so does the per-step
// transfer of a tied weight's partial gradient, with error feedback
// (dist-insert-compression-tied.mlir). Sizes: 64x256 = 16384 f32, 64 blocks
// of 256: int2 4096 + 256, int8 16384 + 256, int3 6144 + 256.

// CHECK: dist.compress %{{.*}} codec <aqsgd_int2> block 256 {dist.stage = #dist.stage<0>} : tensor<64x256xf32> -> tensor<4352xi8>
// CHECK: dist.decompress %{{.*}} codec <aqsgd_int2> block 256 {dist.stage = #dist.stage<1>} : tensor<4352xi8> -> tensor<64x256xf32>
// CHECK: dist.compress %{{.*}} codec <int8> block 256 {dist.stage = #dist.stage<1>} : tensor<64x256xf32> -> tensor<16640xi8>
// CHECK: dist.send %{{.*}} to stage 0 channel 1 {dist.backward
// CHECK: dist.decompress %{{.*}} codec <int8> block 256 {dist.stage = #dist.stage<0>}
// CHECK: dist.compress %{{.*}} codec <int8> block 256 error_feedback {dist.stage = #dist.stage<0>}
// CHECK: dist.send %{{.*}} to stage 1 channel 2 {dist.backward, dist.per_step
// CHECK-NOT: dist.compress
// BF16: codec <aqsgd_int4> block 256 {dist.stage = #dist.stage<0>} : tensor<64x256xf32> -> tensor<8448xi8>
// BF16: dist.compress %{{.*}} codec <bf16> {dist.stage = #dist.stage<1>} : tensor<64x256xf32> -> tensor<32768xi8>
// BF16: dist.compress %{{.*}} codec <bf16> error_feedback {dist.stage = #dist.stage<0>}
// LINK: codec <aqsgd_int3> block 256 {dist.stage = #dist.stage<0>} : tensor<64x256xf32> -> tensor<6400xi8>
// LINK-NOT: dist.compress
// BADBITS: error: --compress=aqsgd:1: aqsgd:BITS[:GRAD] needs BITS 2, 3 or 4 (the activation delta's codes); got '1'
// BADGRAD: error: --compress-link='e0:w0=aqsgd:2:topk:0.1': aqsgd:BITS:GRAD quantizes the activation gradients with none, fp16, bf16, int8, int4, int3 or int2; got 'topk:0.1'
module attributes {dist.plan = #dist.plan<schedule = gpipe, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0"], ranks = [0]>, #dist.placement<stage = 1, devices = ["w0"], ranks = [1]>]>} {
  func.func @main(%x: tensor<64x256xf32>, %t: tensor<64x256xf32>) -> (tensor<64x256xf32>, tensor<64x256xf32>) {
    %h = graph.Relu %x {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    dist.send %h to stage 1 channel 0 {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %r = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    %g = graph.Relu %r {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    dist.send %g to stage 0 channel 1 {dist.backward, dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    %b = dist.recv from stage 1 channel 1 {dist.backward, dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    dist.send %t to stage 1 channel 2 {dist.backward, dist.per_step, dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %p = dist.recv from stage 0 channel 2 {dist.backward, dist.per_step, dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    return %b, %p : tensor<64x256xf32>, tensor<64x256xf32>
  }
}
