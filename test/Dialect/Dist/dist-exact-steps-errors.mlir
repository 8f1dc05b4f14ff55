// RUN: strait-opt %s -split-input-file -verify-diagnostics

// dist.exact_steps (dist-insert-compression under compressed AdamW) is checked by the
// dialect: a step count >= 1 on a dist.compress that only dist.all_reduce reads.

func.func @zero(%x: tensor<64x256xf32>) -> tensor<16640xi8> {
  // expected-error @+1 {{'dist.exact_steps' is a step count >= 1 on a dist.compress that only dist.all_reduce reads}}
  %b = dist.compress %x codec <int8> block 256 {dist.exact_steps = 0 : i64} : tensor<64x256xf32> -> tensor<16640xi8>
  %r = dist.all_reduce %b reduce <mean> over [0, 1] channel 0 : tensor<16640xi8>
  return %r : tensor<16640xi8>
}

// -----

func.func @send(%x: tensor<64x256xf32>) {
  // expected-error @+1 {{'dist.exact_steps' is a step count >= 1 on a dist.compress that only dist.all_reduce reads}}
  %b = dist.compress %x codec <int8> block 256 {dist.exact_steps = 5 : i64} : tensor<64x256xf32> -> tensor<16640xi8>
  dist.send %b to stage 1 channel 0 : tensor<16640xi8>
  return
}

// -----

func.func @relu(%x: tensor<64x256xf32>) -> tensor<64x256xf32> {
  // expected-error @+1 {{'dist.exact_steps' is a step count >= 1 on a dist.compress that only dist.all_reduce reads}}
  %y = graph.Relu %x {dist.exact_steps = 5 : i64} : tensor<64x256xf32>
  return %y : tensor<64x256xf32>
}

// -----

// dist.warmup_codec (warmup-codec): a dense codec, on a dist.compress with dist.exact_steps.
func.func @warmup_topk(%x: tensor<64x256xf32>) -> tensor<16640xi8> {
  // expected-error @+1 {{'dist.warmup_codec' is a dense codec (fp16, bf16, int8, int4, int3, int2) on a dist.compress with 'dist.exact_steps'}}
  %b = dist.compress %x codec <int8> block 256 {dist.exact_steps = 5 : i64, dist.warmup_codec = #dist.codec<topk>} : tensor<64x256xf32> -> tensor<16640xi8>
  %r = dist.all_reduce %b reduce <mean> over [0, 1] channel 0 : tensor<16640xi8>
  return %r : tensor<16640xi8>
}

// -----

func.func @warmup_without_exact_steps(%x: tensor<64x256xf32>) -> tensor<16640xi8> {
  // expected-error @+1 {{'dist.warmup_codec' is a dense codec (fp16, bf16, int8, int4, int3, int2) on a dist.compress with 'dist.exact_steps'}}
  %b = dist.compress %x codec <int8> block 256 {dist.warmup_codec = #dist.codec<int4>} : tensor<64x256xf32> -> tensor<16640xi8>
  %r = dist.all_reduce %b reduce <mean> over [0, 1] channel 0 : tensor<16640xi8>
  return %r : tensor<16640xi8>
}
