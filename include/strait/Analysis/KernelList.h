//===- KernelList.h - The distinct kernels of a training step ---*- C++ -*-===//
//
// vTrain's method for the planner's cost model: the compiler lists every
// distinct kernel of the graph the planner costs (op type, shapes, dtype,
// attributes: one kernelSignature each), the runtime's probe times each on
// the device (`strait-probe --kernels`) and the profile's `kernel_times`
// replace the roofline for those ops (docs/planner.md, section 3).
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_ANALYSIS_KERNELLIST_H
#define STRAIT_ANALYSIS_KERNELLIST_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

namespace strait {

/// Sets `graph.kernel` (a discardable string attribute) on every op of
/// `func` to its kernelSignature, before graph-fuse-elementwise, which
/// records the members' signatures on each fused op (`graph.fused_kernels`).
void tagKernelSignatures(mlir::func::FuncOp func);

/// A module whose function @main holds one copy of each distinct kernel of
/// `func` (IRCostGraph::kernelOps) in program order: its operands are
/// arguments of @main (constant operands are cloned with their values),
/// its location the kernel's signature (a NameLoc), so the exported
/// program names each kernel by its signature. Ops that refer to a
/// variable by symbol (gradient accumulation) are left out: the planner
/// keeps their roofline.
///
/// With `fused` (a copy of `func` tagged by tagKernelSignatures, then run
/// through graph-fuse-elementwise, as the job's runtime program is), each
/// distinct graph.FusedElementwise follows, named
/// "<its signature>|<member signature>=<share>|...": one entry per member
/// op, its share of the fused kernel's time in proportion to the bytes the
/// cost model gives it. strait-probe charges the measured time of the
/// fused kernel to its members that way, so the planner, which costs the
/// unfused ops, sums to the time of the kernel the runtime runs.
/// `numKernels` gets the count listed.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
buildKernelModule(mlir::func::FuncOp func, unsigned *numKernels = nullptr,
                  mlir::func::FuncOp fused = {});

} // namespace strait

#endif // STRAIT_ANALYSIS_KERNELLIST_H
