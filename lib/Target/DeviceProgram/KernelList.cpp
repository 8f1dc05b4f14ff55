//===- KernelList.cpp - The kernel list strait-probe times ----------------===//

#include "strait/Target/DeviceProgram/Export.h"

#include "ProgramBytes.h"
#include "strait_program.pb.h"

using namespace mlir;
using namespace strait;

LogicalResult strait::writeKernelList(func::FuncOp kernels, llvm::StringRef path,
                                      llvm::StringRef device) {
  program::Program prog;
  if (failed(exportProgram(kernels, /*rank=*/0, /*worldSize=*/1, device, prog)))
    return failure();
  prog.set_producer(kKernelListProducer.str());
  if (!program::writeDeterministic(prog, path.str()))
    return emitError(kernels.getLoc()) << "cannot write the kernel list '" << path << "'";
  return success();
}
