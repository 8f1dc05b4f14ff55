// Loss scaling (graph-build-training-step's loss-scale, straitc --loss-scale; docs/training.md
// "Loss scaling"): the backward is seeded with the new f32 argument loss_scale, the
// accumulated gradients are unscaled (and checked for inf/nan) before clipping, every
// optimizer update reads the flag and skips on it, and the flag is the result found_inf.
// RUN: strait-opt %s --graph-build-training-step='loss=cross-entropy optimizer=adamw loss-scale=dynamic loss-scale-interval=3 clip-norm=1' | FileCheck %s
// RUN: strait-opt %s --graph-build-training-step='loss=cross-entropy optimizer=sgd loss-scale=128' | FileCheck %s --check-prefix=SGD
//
// straitc: dynamic by default with --precision f16 (none with bf16, f32 or returned
// gradients), and the same IR as the pipeline option.
// RUN: straitc %s --loss cross-entropy --optimizer adamw --precision f16 --emit=mlir -o %t.f16.mlir
// RUN: strait-opt %s --strait-pipeline='loss=cross-entropy optimizer=adamw precision=f16 loss-scale=dynamic' -o %t.opt.mlir
// RUN: diff %t.f16.mlir %t.opt.mlir
// RUN: FileCheck %s --check-prefix=F16 < %t.f16.mlir
// RUN: straitc %s --loss cross-entropy --optimizer adamw --precision bf16 --emit=mlir | FileCheck %s --check-prefix=NONE
// RUN: straitc %s --loss cross-entropy --optimizer adamw --precision f16 --loss-scale none --emit=mlir | FileCheck %s --check-prefix=NONE
// RUN: straitc %s --loss cross-entropy --optimizer sgd --precision f16 --return-gradients --emit=mlir | FileCheck %s --check-prefix=NONE
//
// The exported program: the inputs, the output, UnscaleGradients and the AdamW kernel's
// trailing found_inf input, and Program.loss_scale for the launcher.
// RUN: rm -rf %t.job
// RUN: straitc %s --loss cross-entropy --optimizer adamw --precision f16 --loss-scale-interval 7 --emit=program -o %t.job > /dev/null
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t.job/rank0.program.pb | FileCheck %s --check-prefix=PROG
//
// Bad values name the flag; nothing is written.
// RUN: not straitc %s --loss cross-entropy --loss-scale fast --emit=mlir 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not straitc %s --loss cross-entropy --loss-scale -4 --emit=mlir 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not straitc %s --loss cross-entropy --loss-scale 1e39 --emit=mlir 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not straitc %s --loss cross-entropy --loss-scale dynamic --loss-scale-init 0 --emit=mlir 2>&1 | FileCheck %s --check-prefix=INIT
// RUN: not straitc %s --loss cross-entropy --loss-scale dynamic --loss-scale-growth 1 --emit=mlir 2>&1 | FileCheck %s --check-prefix=GROW
// RUN: not straitc %s --loss cross-entropy --loss-scale dynamic --loss-scale-backoff 1 --emit=mlir 2>&1 | FileCheck %s --check-prefix=BACK
// RUN: not straitc %s --loss cross-entropy --loss-scale dynamic --loss-scale-interval 0 --emit=mlir 2>&1 | FileCheck %s --check-prefix=INTERVAL
// RUN: not straitc %s --loss cross-entropy --optimizer none --loss-scale dynamic --emit=mlir 2>&1 | FileCheck %s --check-prefix=NOOPT
// RUN: not straitc %s --loss-scale dynamic --emit=mlir 2>&1 | FileCheck %s --check-prefix=NOLOSS

// CHECK-LABEL: func.func @main
// CHECK-SAME: %[[SCALE:[a-z0-9]+]]: tensor<f32> {graph.name = "loss_scale"}
// CHECK-SAME: %[[LR:[a-z0-9]+]]: tensor<f32> {graph.name = "lr"}
// CHECK-SAME: %[[STEP:[a-z0-9]+]]: tensor<i64> {graph.name = "optimizer_step"}
// CHECK-SAME: {graph.name = "found_inf"}
// CHECK-SAME: loss_scale = 6.553600e+04 : f64, loss_scale_backoff = 5.000000e-01 : f64, loss_scale_dynamic = true, loss_scale_growth = 2.000000e+00 : f64, loss_scale_interval = 3 : i64
// The seed: 1 * S.
// CHECK: %[[ONE:.*]] = graph.Constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[SEED:.*]] = graph.Mul %[[ONE]], %[[SCALE]]
// CHECK: graph.SoftmaxCrossEntropyLossGrad %[[SEED]],
// CHECK: %[[G0:.*]] = graph.AccumulateGrad {{.*}} for @body.w
// CHECK: %[[G1:.*]] = graph.AccumulateGrad {{.*}} for @head.w
// Unscaled and checked before clipping.
// CHECK: %[[FOUND:.*]], %[[U:.*]]:2 = graph.UnscaleGradients %[[SCALE]], %[[G0]], %[[G1]]
// CHECK: graph.ClipByGlobalNorm %[[U]]#0, %[[U]]#1
// CHECK-COUNT-2: graph.AdamW %[[LR]], %[[STEP]], {{.*}}, %[[FOUND]] {
// CHECK: return %{{.*}}, %[[FOUND]]

// SGD-LABEL: func.func @main
// SGD-SAME: {graph.name = "loss_scale"}
// SGD-NOT: optimizer_step
// SGD-SAME: loss_scale = 1.280000e+02 : f64, loss_scale_dynamic = false
// SGD-NOT: loss_scale_growth
// SGD: %[[FOUND:.*]], %{{.*}}:2 = graph.UnscaleGradients
// SGD-COUNT-2: graph.SGD {{.*}}, %[[FOUND]] {

// F16: graph.UnscaleGradients
// F16-COUNT-2: graph.AdamW {{.*}} -> (tensor<4x{{[0-9]}}xf32>, tensor<4x{{[0-9]}}xf32>, tensor<4x{{[0-9]}}xf32>)
// NONE-NOT: loss_scale
// NONE-NOT: UnscaleGradients
// NONE: graph.{{SGD|AdamW}}
// NONE-NOT: found_inf

// PROG-DAG: name: "loss_scale"
// PROG-DAG: name: "optimizer_step"
// PROG-DAG: name: "found_inf"
// PROG-DAG: op: "UnscaleGradients"
// PROG: op: "AdamW"
// PROG: loss_scale {
// PROG-NEXT: init_scale: 65536
// PROG-NEXT: dynamic: true
// PROG-NEXT: growth_factor: 2
// PROG-NEXT: backoff_factor: 0.5
// PROG-NEXT: growth_interval: 7

// BAD: invalid loss-scale='fast' (straitc --loss-scale): expected none, dynamic or a value in (0, 3.4e38]
// NEG: invalid loss-scale='{{-4|1e39}}' (straitc --loss-scale)
// INIT: invalid loss-scale-init=0 (straitc --loss-scale-init): expected a value in (0, 3.4e38]
// GROW: invalid loss-scale-growth=1 (straitc --loss-scale-growth): expected a finite value > 1
// BACK: invalid loss-scale-backoff=1 (straitc --loss-scale-backoff): expected a value in (0, 1)
// INTERVAL: invalid loss-scale-interval=0 (straitc --loss-scale-interval): expected a step count >= 1
// NOOPT: loss-scale=dynamic (straitc --loss-scale) needs an optimizer and no return-gradients
// NOLOSS: straitc: --loss-scale configures the training step; it needs --loss

graph.Variable @body.w : tensor<4x4xf32> = dense<0.25> : tensor<4x4xf32>
graph.Variable @head.w : tensor<4x3xf32> = dense<0.5> : tensor<4x3xf32>

func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x3xf32> {graph.name = "y"}) {
  %w0 = graph.ReadVariable @body.w : tensor<4x4xf32>
  %h = graph.MatMul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %w1 = graph.ReadVariable @head.w : tensor<4x3xf32>
  %y = graph.MatMul %h, %w1 : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}
