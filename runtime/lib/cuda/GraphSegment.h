//===- GraphSegment.h - Capture-and-replay policy of a segment ---*- C++ -*-===//
//
// The policy of CudaGraph.cpp's segments without any CUDA call, so that it
// is tested on the CPU (ExecutorTest.cpp, GraphSegmentPolicy) with a
// scripted Api:
//   run 1        launch directly (warm-up)
//   run 2        begin capture, launch (recorded), end + instantiate, replay
//   later runs   replay
// A capture that fails (begin, a launch error inside it, end/instantiate)
// launches directly right away (nothing recorded has run). It disables the
// segment's graph for good unless the Api says the failure is retryable (the
// scratch block had to grow), in which case the next run captures again.
// Disabled Api (graphs off, syncEachKernel): always direct.
//
// Api: bool enabled(); bool begin(std::string &why); bool end(std::string
// &why) (ends the capture and instantiates; also called after a failed
// launch, to close the capture); Status replay(); bool takeRetryable();
// void warn(const std::string &why); CudaGraphStats &stats().
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CUDA_GRAPHSEGMENT_H
#define STRAIT_RUNTIME_LIB_CUDA_GRAPHSEGMENT_H

#include "strait/runtime/Backend.h"
#include "strait/runtime/Cuda.h"

#include <string>
#include <utility>

namespace strait {
namespace rt {
namespace cuda {

template <typename Api> class GraphSegment : public KernelSegment {
public:
  explicit GraphSegment(Api api) : api(std::move(api)) {}

  Status run(const std::function<Status()> &launch) override {
    if (disabled || !api.enabled())
      return direct(launch);
    if (ready) {
      api.stats().replays++;
      return api.replay();
    }
    if (runs++ == 0) // warm-up
      return direct(launch);
    std::string why;
    if (!api.begin(why))
      return fallBack(launch, "begin capture: " + why);
    Status s = launch();
    bool ended = api.end(why);
    if (s.isOk() && ended) {
      ready = true;
      api.stats().captured++;
      api.stats().replays++;
      return api.replay();
    }
    return fallBack(launch, s.isOk() ? why : s.getMessage());
  }

  Api &getApi() { return api; }

private:
  Status direct(const std::function<Status()> &launch) {
    api.stats().direct++;
    return launch();
  }

  /// Nothing of a failed capture ran: launch the kernels directly.
  Status fallBack(const std::function<Status()> &launch, const std::string &why) {
    if (api.takeRetryable()) {
      runs = 1; // the direct launch below grows the scratch: capture next run
    } else {
      disabled = true;
      api.stats().disabled++;
      api.warn(why);
    }
    return direct(launch);
  }

  Api api;
  int runs = 0;
  bool ready = false, disabled = false;
};

} // namespace cuda
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CUDA_GRAPHSEGMENT_H
