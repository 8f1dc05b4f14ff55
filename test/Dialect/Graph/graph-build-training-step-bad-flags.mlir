// A bad hyper-parameter is an error naming the option and straitc's flag,
// from straitc, the pipeline and the pass alike; nothing is written.
// RUN: not straitc %s --loss mse --lr -0.5 -o %t.job 2>&1 | FileCheck %s --check-prefix=LR
// RUN: not test -e %t.job
// RUN: not strait-opt %s --strait-pipeline='loss=mse lr=0' 2>&1 | FileCheck %s --check-prefix=LR0
// RUN: not straitc %s --loss mse --optimizer adamw --beta1 1 --emit=mlir 2>&1 | FileCheck %s --check-prefix=BETA1
// RUN: not strait-opt %s --graph-build-training-step='beta2=-0.1' 2>&1 | FileCheck %s --check-prefix=BETA2
// RUN: not straitc %s --loss mse --eps 0 --emit=mlir 2>&1 | FileCheck %s --check-prefix=EPS
// RUN: not straitc %s --loss mse --momentum 1.5 --emit=mlir 2>&1 | FileCheck %s --check-prefix=MOM
// RUN: not straitc %s --loss mse --weight-decay -1 --emit=mlir 2>&1 | FileCheck %s --check-prefix=WD
// RUN: not straitc %s --loss mse --clip-norm -2 --emit=mlir 2>&1 | FileCheck %s --check-prefix=CLIP
// RUN: not straitc %s --loss mse --warmup-steps -3 --emit=mlir 2>&1 | FileCheck %s --check-prefix=WARM
// RUN: not straitc %s --loss mse --warmup-steps 10 --total-steps 10 --emit=mlir 2>&1 | FileCheck %s --check-prefix=TOTAL
// RUN: not straitc %s --loss mse --lr 0.01 --min-lr 0.1 --emit=mlir 2>&1 | FileCheck %s --check-prefix=MINLR
// RUN: not straitc %s --loss mse --optimizer adamw --nesterov --emit=mlir 2>&1 | FileCheck %s --check-prefix=NEST
// RUN: not straitc %s --loss mse --frozen '[' --emit=mlir 2>&1 | FileCheck %s --check-prefix=GLOB

// LR: error: graph-build-training-step: invalid lr=-0.5 (straitc --lr): expected a finite value > 0
// LR0: invalid lr=0 (straitc --lr)
// BETA1: invalid beta1=1 (straitc --beta1): expected a value in [0, 1)
// BETA2: invalid beta2=-0.1 (straitc --beta2): expected a value in [0, 1)
// EPS: invalid eps=0 (straitc --eps): expected a value > 0
// MOM: invalid momentum=1.5 (straitc --momentum): expected a value in [0, 1)
// WD: invalid weight-decay=-1 (straitc --weight-decay)
// CLIP: invalid clip-norm=-2 (straitc --clip-norm)
// WARM: invalid warmup-steps=-3 (straitc --warmup-steps)
// TOTAL: invalid total-steps=10 (straitc --total-steps): expected 0 (no decay) or a value > warmup-steps
// MINLR: invalid min-lr=0.1 (straitc --min-lr): expected a value in [0, lr]
// NEST: nesterov (straitc --nesterov) needs optimizer=sgd and momentum > 0
// GLOB: invalid variable pattern '['
graph.Variable @w : tensor<3xf32> = dense<1.0> : tensor<3xf32>
func.func @main(%x: tensor<2x3xf32> {graph.name = "x"}) -> (tensor<2x3xf32> {graph.name = "y"}) {
  %w = graph.ReadVariable @w : tensor<3xf32>
  %a = graph.Mul %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %a : tensor<2x3xf32>
}

// A training flag without --loss would be ignored: it is an error instead.
// RUN: not straitc %s --lr 0.1 --emit=mlir 2>&1 | FileCheck %s --check-prefix=NOLOSS
// NOLOSS: straitc: --lr configures the training step; it needs --loss
