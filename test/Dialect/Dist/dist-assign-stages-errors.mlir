// RUN: strait-opt %s --dist-assign-stages='boundaries=5' -verify-diagnostics
// RUN: not strait-opt %s --dist-assign-stages='cluster=%inputs/dist-2cpu.yaml num-stages=3' 2>&1 | FileCheck %s --check-prefix=STAGES
// RUN: not strait-opt %s --dist-assign-stages='cluster=%inputs/no-such-file.yaml' 2>&1 | FileCheck %s --check-prefix=FILE
// RUN: not strait-opt %s --dist-assign-stages='boundaries=1 replicas=1' 2>&1 | FileCheck %s --check-prefix=REPL

// Bad plans are diagnostics on @main: a boundary beyond the cost nodes, more
// forced stages than blocks or devices, a missing cluster file, a replica
// list of the wrong length.
// STAGES: error: cannot plan @main: num-stages=3 exceeds
// FILE: error: cannot plan @main: {{.*}}no-such-file.yaml
// REPL: error: cannot plan @main: replicas lists 1 stages, boundaries give 2
// expected-error@+1 {{cannot plan @main: boundaries must increase within 1..1 (the function has 2 cost nodes); got 5}}
func.func @main(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %a = graph.Relu %x : tensor<2x4xf32>
  %b = graph.Relu %a : tensor<2x4xf32>
  return %b : tensor<2x4xf32>
}
