//===- ThreadPool.cpp - Data-parallel loops for CPU kernels ---------------===//
//
// A fixed pool of workers fed one parallelFor at a time. The calling thread
// takes a share of the chunks too, so a pool of N workers uses N+1 threads.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace strait {
namespace rt {

namespace {

class Pool {
public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i)
      threads.emplace_back([this] { workerLoop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    for (auto &t : threads)
      t.join();
  }
  int size() const { return static_cast<int>(threads.size()); }

  void run(int64_t n, int64_t chunk,
           const std::function<void(int64_t, int64_t)> &body) {
    std::lock_guard<std::mutex> runLock(runMutex); // one loop at a time
    {
      std::lock_guard<std::mutex> lock(mutex);
      job = &body;
      total = n;
      chunkSize = chunk;
      next = 0;
      pending = static_cast<int>(threads.size());
      ++generation;
    }
    wake.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, [this] { return pending == 0; });
    job = nullptr;
  }

private:
  void drain() {
    for (;;) {
      int64_t begin = next.fetch_add(chunkSize);
      if (begin >= total)
        return;
      (*job)(begin, std::min(total, begin + chunkSize));
    }
  }
  void workerLoop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping)
          return;
        seen = generation;
      }
      drain();
      std::lock_guard<std::mutex> lock(mutex);
      if (--pending == 0)
        done.notify_one();
    }
  }

  std::vector<std::thread> threads;
  std::mutex mutex, runMutex;
  std::condition_variable wake, done;
  const std::function<void(int64_t, int64_t)> *job = nullptr;
  std::atomic<int64_t> next{0};
  int64_t total = 0, chunkSize = 1;
  int pending = 0;
  uint64_t generation = 0;
  bool stopping = false;
};

std::mutex poolMutex;
std::unique_ptr<Pool> pool;
int requestedThreads = 0;
thread_local bool insideLoop = false;

Pool &getPool() {
  std::lock_guard<std::mutex> lock(poolMutex);
  int want = requestedThreads > 0
                 ? requestedThreads
                 : std::max(1u, std::thread::hardware_concurrency());
  if (!pool || pool->size() != want - 1)
    pool = std::make_unique<Pool>(want - 1);
  return *pool;
}

} // namespace

int getNumThreads() {
  return requestedThreads > 0
             ? requestedThreads
             : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void setNumThreads(int n) {
  std::lock_guard<std::mutex> lock(poolMutex);
  requestedThreads = n;
}

void parallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)> &body) {
  if (n <= 0)
    return;
  int threads = getNumThreads();
  if (insideLoop || threads <= 1 || n <= grain) {
    body(0, n);
    return;
  }
  int64_t chunk = std::max<int64_t>(grain, (n + threads * 4 - 1) / (threads * 4));
  insideLoop = true;
  getPool().run(n, chunk, [&](int64_t b, int64_t e) {
    bool saved = insideLoop;
    insideLoop = true;
    body(b, e);
    insideLoop = saved;
  });
  insideLoop = false;
}

} // namespace rt
} // namespace strait
