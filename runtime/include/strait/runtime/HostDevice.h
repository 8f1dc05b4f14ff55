//===- HostDevice.h - Functions shared by host code and CUDA kernels -*- C++ -*-===//
//
// STRAIT_HD marks a function that both the host compiler and nvcc's device
// pass compile: index arithmetic and codec layouts that the CPU tests check
// and the kernels run.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_HOSTDEVICE_H
#define STRAIT_RUNTIME_HOSTDEVICE_H

#ifdef __CUDACC__
#define STRAIT_HD __host__ __device__
#else
#define STRAIT_HD
#endif

#endif // STRAIT_RUNTIME_HOSTDEVICE_H
