//===- CostOpInterface.td - Workload estimator interface ---*- tablegen -*-===//

#ifndef STRAIT_INTERFACES_COSTOPINTERFACE_TD
#define STRAIT_INTERFACES_COSTOPINTERFACE_TD

include "mlir/IR/OpBase.td"

def CostOpInterface : OpInterface<"CostOpInterface"> {
  let description = [{
    The workload of one op for the planner: forward and backward FLOPs and
    the kind of kernel (which decides the device efficiency it gets). Bytes
    read and written default to the sizes of the operands and results. Device
    numbers never live here: they are in the cluster model.
  }];
  let cppNamespace = "::strait";
  let methods = [
    InterfaceMethod<"Forward FLOPs (default: one per result element).",
      "double", "getForwardFlops", (ins), [{}], [{
        return ::strait::detail::elementsOf($_op->getResultTypes());
      }]>,
    InterfaceMethod<[{Backward FLOPs; negative means "estimate from the
      forward cost" (the planner uses 2x for ops with weights, 1x otherwise).}],
      "double", "getBackwardFlops", (ins), [{}], [{ return -1.0; }]>,
    InterfaceMethod<"Bytes read (default: all operands).",
      "double", "getBytesRead", (ins), [{}], [{
        return ::strait::detail::bytesOf($_op->getOperandTypes());
      }]>,
    InterfaceMethod<"Bytes written (default: all results).",
      "double", "getBytesWritten", (ins), [{}], [{
        return ::strait::detail::bytesOf($_op->getResultTypes());
      }]>,
    InterfaceMethod<"The kernel class, for per-class device efficiency.",
      "::strait::KernelClass", "getKernelClass", (ins), [{}], [{
        return ::strait::KernelClass::Elementwise;
      }]>,
  ];
}

#endif // STRAIT_INTERFACES_COSTOPINTERFACE_TD
