//===- ThreadPool.h - Data-parallel loops for CPU kernels -------*- C++ -*-===//
//
// parallelFor splits [0, n) into chunks of at least `grain` iterations over a
// process-wide pool of worker threads. Small loops run inline.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_THREADPOOL_H
#define STRAIT_RUNTIME_THREADPOOL_H

#include <cstdint>
#include <functional>

namespace strait {
namespace rt {

/// Number of worker threads (default: hardware concurrency).
int getNumThreads();
/// Sets the worker count; takes effect for loops started afterwards.
void setNumThreads(int n);

void parallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)> &body);

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_THREADPOOL_H
