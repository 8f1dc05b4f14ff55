//===- FusedJit.cpp - FusedElementwise compiled at load through NVRTC -----===//
//
// (In progress: filled in by the FusedElementwise JIT work.)
//
//===----------------------------------------------------------------------===//
