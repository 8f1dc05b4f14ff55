// RUN: strait-opt %s -split-input-file -verify-diagnostics

// dist.topk_adapt (dist-insert-compression adaptive-topk) is checked by the
// dialect: two bounds around the codec's ratio, on a top-k dist.compress.

func.func @int8(%x: tensor<64x256xf32>) -> tensor<16448xi8> {
  // expected-error @+1 {{'dist.topk_adapt' is an array<f64: MIN, MAX> on a top-k dist.compress}}
  %b = dist.compress %x codec <int8> block 256 {dist.topk_adapt = array<f64: 0.01, 0.1>} : tensor<64x256xf32> -> tensor<16640xi8>
  return %b : tensor<16640xi8>
}

// -----

func.func @outside(%x: tensor<64x256xf32>) -> tensor<6560xi8> {
  // expected-error @+1 {{'dist.topk_adapt' needs 0 < MIN <= ratio <= MAX <= 1}}
  %b = dist.compress %x codec <topk> ratio 0.05 {dist.topk_adapt = array<f64: 0.1, 0.2>} : tensor<64x256xf32> -> tensor<6560xi8>
  return %b : tensor<6560xi8>
}

// -----

func.func @three(%x: tensor<64x256xf32>) -> tensor<6560xi8> {
  // expected-error @+1 {{'dist.topk_adapt' is an array<f64: MIN, MAX> on a top-k dist.compress}}
  %b = dist.compress %x codec <topk> ratio 0.05 {dist.topk_adapt = array<f64: 0.01, 0.05, 0.1>} : tensor<64x256xf32> -> tensor<6560xi8>
  return %b : tensor<6560xi8>
}
