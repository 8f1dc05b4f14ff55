// RUN: strait-opt %s --dist-bucket-all-reduces | FileCheck %s
// RUN: strait-opt %s --dist-bucket-all-reduces='bucket-mib=0.0009' | FileCheck %s --check-prefix=SMALL
// RUN: strait-opt %s --dist-bucket-all-reduces='bucket-mib=0' | FileCheck %s --check-prefix=OFF

// Runs of alike all-reduces become one bucket each: %a, %b and %c (f32 over
// [0, 1]) are packed; %d has other islands, %e another element type, and %f
// comes after a send, so each ends the run before it. %r0 and %rf2 are read
// before the next all-reduce: their runs close there. With 0.9 KiB buckets
// %a (1 KiB) fills one alone (left as it is) and %b, %c share the next.

// CHECK-LABEL: func.func @main
// CHECK: %[[RA:.*]] = dist.all_reduce %{{.*}} reduce <mean> over [0, 1] channel 0
// CHECK-NOT: dist.all_reduce
// CHECK: %[[FA:.*]] = graph.Reshape %{{.*}} {{.*}}shape = array<i64: 256>{{.*}} : (tensor<16x16xf32>) -> tensor<256xf32>
// CHECK: %[[FB:.*]] = graph.Reshape %{{.*}} : (tensor<8xf32>) -> tensor<8xf32>
// CHECK: %[[FC:.*]] = graph.Reshape %{{.*}} : (tensor<2x4xf32>) -> tensor<8xf32>
// CHECK: %[[CAT:.*]] = graph.Concat %[[FA]], %[[FB]], %[[FC]] {axis = 0 : i64, dist.stage = #dist.stage<0>} : (tensor<256xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<272xf32>
// CHECK: %[[R:.*]] = dist.all_reduce %[[CAT]] reduce <mean> over [0, 1] channel 1 {dist.stage = #dist.stage<0>} : tensor<272xf32>
// CHECK: %[[S:.*]]:3 = graph.Split %[[R]] {dist.stage = #dist.stage<0>, split = array<i64: 256, 8, 8>}
// CHECK: graph.Reshape %[[S]]#0 {{.*}} -> tensor<16x16xf32>
// CHECK: graph.Reshape %[[S]]#1 {{.*}} -> tensor<8xf32>
// CHECK: graph.Reshape %[[S]]#2 {{.*}} -> tensor<2x4xf32>
// CHECK: dist.all_reduce %{{.*}} islands [array<i64: 0>, array<i64: 1>] channel 4
// CHECK: dist.all_reduce %{{.*}} channel 5 {{.*}} : tensor<8xbf16>
// CHECK: dist.send
// CHECK: graph.Concat %{{.*}}, %{{.*}} {{.*}} -> tensor<16xf32>
// CHECK: dist.all_reduce %{{.*}} channel 7 {{.*}} : tensor<16xf32>
// CHECK: %[[USE:.*]] = graph.Relu
// CHECK: dist.all_reduce %{{.*}} channel 9 {{.*}} : tensor<8xf32>
// CHECK-NOT: dist.all_reduce

// SMALL: graph.Concat %{{.*}}, %{{.*}} {{.*}} -> tensor<16xf32>
// SMALL: dist.all_reduce %{{.*}} channel 2 {{.*}} : tensor<16xf32>
// SMALL-NOT: tensor<272xf32>

// OFF-COUNT-9: dist.all_reduce
// OFF-NOT: graph.Concat

module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["a", "b"], ranks = [0, 1]>, #dist.placement<stage = 1, devices = ["c"], ranks = [2]>]>} {
  func.func @main(%x0: tensor<8xf32>, %a: tensor<16x16xf32>, %b: tensor<8xf32>, %c: tensor<2x4xf32>, %d: tensor<8xf32>, %e: tensor<8xbf16>, %f: tensor<8xf32>, %f2: tensor<8xf32>, %g: tensor<8xf32>, %h: tensor<8xf32>) -> (tensor<8xf32>, tensor<16x16xf32>, tensor<8xf32>, tensor<2x4xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
    %r0 = dist.all_reduce %x0 reduce <mean> over [0, 1] channel 0 {dist.stage = #dist.stage<0>} : tensor<8xf32>
    %keep = graph.Relu %r0 {dist.stage = #dist.stage<0>} : tensor<8xf32>
    %ra = dist.all_reduce %a reduce <mean> over [0, 1] channel 1 {dist.stage = #dist.stage<0>} : tensor<16x16xf32>
    %rb = dist.all_reduce %b reduce <mean> over [0, 1] channel 2 {dist.stage = #dist.stage<0>} : tensor<8xf32>
    %rc = dist.all_reduce %c reduce <mean> over [0, 1] channel 3 {dist.stage = #dist.stage<0>} : tensor<2x4xf32>
    %rd = dist.all_reduce %d reduce <mean> over [0, 1] islands [array<i64: 0>, array<i64: 1>] channel 4 {dist.stage = #dist.stage<0>} : tensor<8xf32>
    %re = dist.all_reduce %e reduce <mean> over [0, 1] channel 5 {dist.stage = #dist.stage<0>} : tensor<8xbf16>
    dist.send %x0 to stage 1 channel 6 {dist.stage = #dist.stage<0>} : tensor<8xf32>
    %rf = dist.all_reduce %f reduce <mean> over [0, 1] channel 7 {dist.stage = #dist.stage<0>} : tensor<8xf32>
    %rf2 = dist.all_reduce %f2 reduce <mean> over [0, 1] channel 8 {dist.stage = #dist.stage<0>} : tensor<8xf32>
    %use = graph.Relu %rf2 {dist.stage = #dist.stage<0>} : tensor<8xf32>
    %rh = dist.all_reduce %h reduce <mean> over [0, 1] channel 9 {dist.stage = #dist.stage<0>} : tensor<8xf32>
    return %keep, %ra, %rb, %rc, %rd, %re, %rf, %use, %rh, %g : tensor<8xf32>, tensor<16x16xf32>, tensor<8xf32>, tensor<2x4xf32>, tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  }
}
