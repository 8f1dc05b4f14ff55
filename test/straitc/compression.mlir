// RUN: rm -rf %t && straitc %s --cluster %inputs/compress-2site.yaml --num-stages 2 --loss cross-entropy --optimizer sgd --compress=int8 --compress-link=east:west=fp16 -o %t | FileCheck %s --check-prefix=JOB
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank0.program.pb | FileCheck %s --check-prefix=SEND --implicit-check-not=DTYPE_I8
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank2.program.pb | FileCheck %s --check-prefix=RECV --implicit-check-not=DTYPE_I8
// RUN: rm -rf %t.ar && straitc %s --cluster %inputs/compress-2site.yaml --num-stages 1 --loss cross-entropy --optimizer sgd --compress=topk:0.25 -o %t.ar > /dev/null
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t.ar/rank3.program.pb | FileCheck %s --check-prefix=AR
// RUN: straitc %s --cluster %inputs/compress-2site.yaml --num-stages 2 --loss cross-entropy --emit=mlir --compress=int8 | FileCheck %s --check-prefix=IR
// RUN: strait-opt %s --strait-pipeline="cluster=%inputs/compress-2site.yaml num-stages=2 loss=cross-entropy compress=none compress-link=east:west=topk:0.5,e0:e1=int8" | FileCheck %s --check-prefix=PIPE
// RUN: not straitc %s --cluster %inputs/compress-2site.yaml --num-stages 2 --compress-link=east:mars=int8 -o %t.bad 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not ls %t.bad/plan.pb

// The exporter folds dist.compress -> dist.send, dist.recv -> dist.decompress
// and compress -> all_reduce -> decompress into the steps' CodecParams: the
// program moves the plain f32 value, the runtime encodes on the wire.
// Stages on both sites (east: ranks 0, 1; west: 2, 3); the link override
// (fp16) wins over the global int8.

// No program value holds encoded bytes (--implicit-check-not=DTYPE_I8).
// straitc lists what dist-insert-compression put on each link.
// JOB: straitc: compressed all-reduce of stage 0: int8+ef (1 value)
// JOB-NEXT: straitc: compressed all-reduce of stage 1: int8+ef (1 value)
// JOB-NEXT: straitc: compressed stage 0 -> 1: fp16 (1 value)
// JOB-NEXT: straitc: compressed stage 1 -> 0: fp16 (1 value)
// JOB: straitc: wrote

// SEND: send {
// SEND-NEXT: value_id:
// SEND-NEXT: peer: 2
// SEND-NEXT: channel: 2
// SEND-NEXT: codec {
// SEND-NEXT: codec: CODEC_FP16
// SEND-NEXT: }
// The gradient coming back is decoded into a plain f32 value too.
// SEND: recv {
// SEND-NEXT: value_id:
// SEND-NEXT: peer: 2
// SEND-NEXT: channel: 3
// SEND-NEXT: codec {
// SEND-NEXT: codec: CODEC_FP16
// The all-reduce inside east (ranks 0, 1) is no east-west link: the global
// codec applies, with error feedback on gradients.
// SEND: all_reduce {
// SEND-NEXT: value_ids:
// SEND-NEXT: ranks: 0
// SEND-NEXT: ranks: 1
// SEND-NEXT: reduce: REDUCE_MEAN
// SEND-NEXT: codec {
// SEND-NEXT: codec: CODEC_INT8
// SEND-NEXT: error_feedback: true
// SEND-NEXT: block_size: 256

// RECV: name: "recv.ch2"
// RECV-NEXT: dtype: DTYPE_F32
// RECV-NEXT: shape: 8
// RECV-NEXT: shape: 16
// RECV: recv {
// RECV-NEXT: value_id:
// RECV-NEXT: channel: 2
// RECV-NEXT: codec {
// RECV-NEXT: codec: CODEC_FP16

// One stage on all four devices: the gradient all-reduce is hierarchical
// (one island per site) and its inter-island phase uses top-k with error
// feedback.
// AR: all_reduce {
// AR-NEXT: value_ids:
// AR-NEXT: ranks: 0
// AR-NEXT: ranks: 1
// AR-NEXT: ranks: 2
// AR-NEXT: ranks: 3
// AR-NEXT: reduce: REDUCE_MEAN
// AR-NEXT: codec {
// AR-NEXT: codec: CODEC_TOPK
// AR-NEXT: topk_ratio: 0.25
// AR-NEXT: error_feedback: true
// AR-NEXT: }
// AR-NEXT: islands {
// AR-NEXT: ranks: 0
// AR-NEXT: ranks: 1
// AR-NEXT: }
// AR-NEXT: islands {
// AR-NEXT: ranks: 2
// AR-NEXT: ranks: 3

// The IR after the pipeline holds the codec ops in each stage function.
// IR-LABEL: func.func @stage0
// IR: dist.compress %{{.*}} codec <int8> block 256 {dist.stage = #dist.stage<0>} : tensor<8x16xf32> -> tensor<132xi8>
// IR-LABEL: func.func @stage1
// IR: dist.recv from stage 0 channel {{[0-9]+}} {dist.stage = #dist.stage<1>} : tensor<132xi8>
// IR-NEXT: dist.decompress %{{.*}} codec <int8> block 256 {dist.stage = #dist.stage<1>} : tensor<132xi8> -> tensor<8x16xf32>

// The same options on strait-opt's --strait-pipeline (compress-link is a
// comma-separated list): top-k on the east-west cut, int8 on the all-reduce
// between e0 and e1 (stage 0's replicas), nothing on stage 1's (w0, w1).
// PIPE-LABEL: func.func @stage0
// PIPE: dist.compress %{{.*}} codec <topk> ratio 5.000000e-01 {dist.stage = #dist.stage<0>} : tensor<8x16xf32> -> tensor<512xi8>
// PIPE: dist.compress %{{.*}} codec <int8> block 256 error_feedback {dist.stage = #dist.stage<0>} : tensor<16x16xf32> -> tensor<260xi8>
// PIPE-LABEL: func.func @stage1
// PIPE-NOT: codec <int8>
// PIPE: return

// A link override that names no link of the plan fails before any file is
// written.
// BAD: error: --compress-link=east:mars=int8: no link of the plan joins 'east' and 'mars'

graph.Variable @layers.0.w : tensor<16x16xf32> = dense<0.5> : tensor<16x16xf32>
graph.Variable @layers.1.w : tensor<16x16xf32> = dense<0.25> : tensor<16x16xf32>
func.func @main(%x: tensor<8x16xf32> {graph.name = "x"}) -> (tensor<8x16xf32> {graph.name = "logits"}) {
  %w0 = graph.ReadVariable @layers.0.w : tensor<16x16xf32>
  %h = graph.MatMul %x, %w0 : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %w1 = graph.ReadVariable @layers.1.w : tensor<16x16xf32>
  %y = graph.MatMul %h, %w1 : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}
