// RUN: not strait-opt %s --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress=int5' 2>&1 | FileCheck %s --check-prefix=GLOBAL
// RUN: not strait-opt %s --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress-link=east:west=int5' 2>&1 | FileCheck %s --check-prefix=CODEC
// RUN: not strait-opt %s --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress-link=east:west=topk:2' 2>&1 | FileCheck %s --check-prefix=RATIO
// RUN: not strait-opt %s --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress-link=east=int8' 2>&1 | FileCheck %s --check-prefix=FORM
// RUN: not strait-opt %s --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress-link=east:mars=int8' 2>&1 | FileCheck %s --check-prefix=LINK
// RUN: not strait-opt %s --dist-insert-compression='compress=auto' 2>&1 | FileCheck %s --check-prefix=AUTO
// RUN: not strait-opt %s --dist-insert-compression='cluster=%inputs/dist-2cpu.yaml' 2>&1 | FileCheck %s --check-prefix=DEVICE

// Bad overrides name the flag and the link; auto needs the cluster; the
// plan's devices must be in the cluster file.

// GLOBAL: error: --compress=int5: unknown codec 'int5' (expected none, fp16, bf16, int8, int4, int3, int2, topk:RATIO or aqsgd:BITS)
// CODEC: error: --compress-link='east:west=int5': unknown codec 'int5'
// RATIO: error: --compress-link='east:west=topk:2': topk needs a ratio in (0, 1], e.g. topk:0.01; got '2'
// FORM: error: --compress-link='east=int8': expected SITE_A:SITE_B=CODEC[:RATIO]
// LINK: error: --compress-link=east:mars=int8: no link of the plan joins 'east' and 'mars' (sites, hosts or devices of the stages)
// AUTO: error: --compress=auto needs the cluster file (cluster=FILE)
// DEVICE: error: device 'e0' of stage 0 is not in cluster file '{{.*}}dist-2cpu.yaml'
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0"], ranks = [0]>, #dist.placement<stage = 1, devices = ["w0"], ranks = [1]>]>} {
  func.func @main(%x: tensor<64x256xf32>) -> tensor<64x256xf32> {
    %h = graph.Relu %x {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    dist.send %h to stage 1 channel 0 {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %r = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    %y = graph.Relu %r {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    return %y : tensor<64x256xf32>
  }
}
