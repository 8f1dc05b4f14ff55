// RUN: rm -rf %t && straitc %s --cluster %inputs/compress-2site.yaml --num-stages 1 --loss cross-entropy --optimizer sgd --compress=topk:0.25:int4 -o %t | FileCheck %s --check-prefix=JOB
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank3.program.pb | FileCheck %s --check-prefix=AR --implicit-check-not=DTYPE_I8
// RUN: straitc %s --cluster %inputs/compress-2site.yaml --num-stages 1 --loss cross-entropy --emit=mlir --compress=topk:0.1:int8 | FileCheck %s --check-prefix=IR
// RUN: not straitc %s --cluster %inputs/compress-2site.yaml --num-stages 1 --compress=topk:0.1:int3 -o %t.bad 2>&1 | FileCheck %s --check-prefix=VALUES
// RUN: not straitc %s --cluster %inputs/compress-2site.yaml --num-stages 2 --compress-link=east:west=topk:0.1:fp16 -o %t.bad 2>&1 | FileCheck %s --check-prefix=LINK
// RUN: not ls %t.bad/plan.pb

// Top-k with quantized values (topk:R:int8, topk:R:int4) on the gradient
// all-reduce of one stage over both sites: straitc lists it as
// --compress spells it, the program carries CODEC_TOPK_INT4 with the
// ratio, the block size and error feedback.
// JOB: straitc: compressed all-reduce of stage 0: topk:0.25:int4+ef (1 value)

// AR: codec {
// AR-NEXT: codec: CODEC_TOPK_INT4
// AR-NEXT: topk_ratio: 0.25
// AR-NEXT: error_feedback: true
// AR-NEXT: block_size: 256
// AR-NEXT: }

// The bucket of both 16x16 gradients (512 values) at 10%: k = 52, Rice
// parameter 4 (52 * 2^4 >= 512): 52 codes + one f32 scale + ceil(52 * 6 / 8)
// = 39 bytes of gaps = 95 bytes (D8).
// IR: dist.compress %{{.*}} codec <topk_int8> ratio 1.000000e-01 block 256 error_feedback {dist.stage = #dist.stage<0>} : tensor<512xf32> -> tensor<95xi8>
// IR: dist.decompress %{{.*}} codec <topk_int8> ratio 1.000000e-01 block 256 {dist.stage = #dist.stage<0>} : tensor<95xi8> -> tensor<512xf32>

// Bad value types name the flag; nothing is written.
// VALUES: error: --compress=topk:0.1:int3: topk:RATIO:VALUES quantizes the kept values to int8 or int4; got 'int3'
// LINK: error: --compress-link='east:west=topk:0.1:fp16': topk:RATIO:VALUES quantizes the kept values to int8 or int4; got 'fp16'

graph.Variable @layers.0.w : tensor<16x16xf32> = dense<0.5> : tensor<16x16xf32>
graph.Variable @layers.1.w : tensor<16x16xf32> = dense<0.25> : tensor<16x16xf32>
func.func @main(%x: tensor<8x16xf32> {graph.name = "x"}) -> (tensor<8x16xf32> {graph.name = "logits"}) {
  %w0 = graph.ReadVariable @layers.0.w : tensor<16x16xf32>
  %h = graph.MatMul %x, %w0 : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %w1 = graph.ReadVariable @layers.1.w : tensor<16x16xf32>
  %y = graph.MatMul %h, %w1 : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}
