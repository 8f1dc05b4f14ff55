// straitc's training flags reach graph-build-training-step, and
// `strait-opt --strait-pipeline` takes the same options (one pipeline).
//
// AdamW, schedule, clipping, labels, freezing:
// RUN: straitc %s --loss cross-entropy --optimizer adamw --lr 0.01 --beta1 0.8 \
// RUN:   --beta2 0.99 --eps 1e-6 --weight-decay 0.1 --clip-norm 2 --warmup-steps 10 \
// RUN:   --total-steps 100 --min-lr 0.001 --label tgt --ignore-index 7 \
// RUN:   --frozen 'body.*' --emit=mlir -o %t.adamw.straitc.mlir
// RUN: strait-opt %s --strait-pipeline='loss=cross-entropy optimizer=adamw lr=0.01 \
// RUN:   beta1=0.8 beta2=0.99 eps=1e-6 weight-decay=0.1 clip-norm=2 warmup-steps=10 \
// RUN:   total-steps=100 min-lr=0.001 label=tgt ignore-index=7 frozen=body.*' \
// RUN:   -o %t.adamw.opt.mlir
// RUN: diff %t.adamw.straitc.mlir %t.adamw.opt.mlir
// RUN: FileCheck %s --check-prefix=ADAMW < %t.adamw.opt.mlir
//
// SGD with Nesterov momentum, --trainable as a comma list and repeated:
// RUN: straitc %s --loss cross-entropy --optimizer sgd --momentum 0.5 --nesterov \
// RUN:   --weight-decay 0.01 --trainable 'head.*,nothing' --trainable 'extra.*' \
// RUN:   --emit=mlir -o %t.sgd.straitc.mlir
// RUN: strait-opt %s --strait-pipeline='loss=cross-entropy optimizer=sgd momentum=0.5 \
// RUN:   nesterov=true weight-decay=0.01 trainable=head.*,nothing,extra.*' -o %t.sgd.opt.mlir
// RUN: diff %t.sgd.straitc.mlir %t.sgd.opt.mlir
// RUN: FileCheck %s --check-prefix=SGD < %t.sgd.opt.mlir
//
// mse on a named output, gradients returned (unfused, to see the loss's Sub):
// RUN: straitc %s --loss mse --output h --optimizer none --return-gradients \
// RUN:   --fuse=none --emit=mlir | FileCheck %s --check-prefix=MSE

graph.Variable @head.w : tensor<4x3xf32> = dense<0.5> : tensor<4x3xf32>
graph.Variable @body.w : tensor<4x4xf32> = dense<0.25> : tensor<4x4xf32>
graph.Variable @extra.b : tensor<4xf32> = dense<0.1> : tensor<4xf32>

// ADAMW: graph.Variable @head.w.adam_m {frozen, graph.optimizer_state_of = @head.w}
// ADAMW: graph.Variable @body.w {frozen}
// ADAMW-NOT: @body.w.adam_m
// ADAMW-LABEL: func.func @stage0
// ADAMW-SAME: tensor<2xi64> {graph.name = "tgt"}
// ADAMW-SAME: graph.training = {loss = "cross-entropy", lr = 1.000000e-02 : f64, micro_batches = 1 : i64, min_lr = 1.000000e-03 : f64, optimizer = "adamw", total_steps = 100 : i64, warmup_steps = 10 : i64}
// ADAMW: graph.SoftmaxCrossEntropyLossWithGrad {{.*}}ignore_index = 7 : i64
// ADAMW: graph.ClipByGlobalNorm {{.*}}max_norm = 2.000000e+00
// ADAMW-COUNT-2: graph.AdamW {{.*}}beta1 = 8.000000e-01 : f32, beta2 = 9.900000e-01 : f32, {{.*}}epsilon = 9.99999997E-7 : f32, weight_decay = 1.000000e-01 : f32
// ADAMW-NOT: graph.AdamW

// SGD-LABEL: func.func @stage0
// SGD-SAME: graph.training = {loss = "cross-entropy", lr = 1.000000e-03 : f64, {{.*}}optimizer = "sgd"
// SGD-NOT: graph.ClipByGlobalNorm
// SGD: graph.SGD {{.*}}momentum = 5.000000e-01 : f32, nesterov = 1 : i64, weight_decay = 0.00999999977 : f32
// SGD: graph.AssignVariable @head.w =
// SGD: graph.SGD
// SGD: graph.AssignVariable @extra.b =
// SGD-NOT: graph.AssignVariable @body.w

// MSE-LABEL: func.func @stage0
// MSE-SAME: tensor<2x4xf32> {graph.name = "labels"}
// MSE-SAME: {graph.name = "grad.body.w"}
// MSE: graph.Sub
// MSE-NOT: graph.AssignVariable
func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x3xf32> {graph.name = "y"}, tensor<2x4xf32> {graph.name = "h"}) {
  %w0 = graph.ReadVariable @body.w : tensor<4x4xf32>
  %m = graph.MatMul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %b = graph.ReadVariable @extra.b : tensor<4xf32>
  %h = graph.Add %m, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %w1 = graph.ReadVariable @head.w : tensor<4x3xf32>
  %y = graph.MatMul %h, %w1 : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  return %y, %h : tensor<2x3xf32>, tensor<2x4xf32>
}
