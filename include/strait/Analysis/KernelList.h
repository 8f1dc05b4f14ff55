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

/// A module whose function @main holds one copy of each distinct kernel of
/// `func` (IRCostGraph::kernelOps) in program order: its operands are
/// arguments of @main (constant operands are cloned with their values),
/// its location the kernel's signature (a NameLoc), so the exported
/// program names each kernel by its signature. Ops that refer to a
/// variable by symbol (gradient accumulation) are left out: the planner
/// keeps their roofline. `numKernels` gets the count listed.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
buildKernelModule(mlir::func::FuncOp func, unsigned *numKernels = nullptr);

} // namespace strait

#endif // STRAIT_ANALYSIS_KERNELLIST_H
