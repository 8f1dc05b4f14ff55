//===- overlap_bench.cpp - Communication overlapped with compute ----------===//
//
// Two ranks (two processes over Gloo on loopback, one compute thread each)
// run the same programs with the executor's overlap off (every step on the
// calling thread, in order) and on (communication on the executor's
// thread), in the same run, and print the iteration times and their ratio:
//   dp-buckets:  data-parallel backward: B gradient buckets, each computed by
//                two MatMuls and all-reduced, then an update reading all;
//   pipeline:    stage 0 computes M micro-batch activations and sends each
//                to stage 1, which receives and computes.
// The link is emulated in the communicator: a transfer of b bytes first
// waits b * 8 / rate (the serialization time of a link of that rate; the
// loopback itself is much faster), so the ratio measures how much
// communication the executor hides behind compute.
// A rate of 0 runs over the loopback alone (no emulated link).
// Usage: strait-overlap-bench [--rates-mbit 100,300,1000,0] [--dim D] [--iters I]
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Communicator.h"
#include "strait/runtime/Executor.h"
#include "strait/runtime/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace strait;
using namespace strait::rt;

namespace {

double seconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Delays every transfer by its serialization time on a link of `rate`
/// bits/s before handing it to the real communicator.
class EmulatedLink : public Communicator {
public:
  EmulatedLink(Communicator &inner, double rate) : inner(inner), rate(rate) {}
  int getRank() const override { return inner.getRank(); }
  int getWorldSize() const override { return inner.getWorldSize(); }
  Status send(const Tensor &t, int peer, uint32_t channel) override {
    wait(t.byteSize());
    return inner.send(t, peer, channel);
  }
  Status recv(const Tensor &t, int peer, uint32_t channel) override {
    return inner.recv(t, peer, channel);
  }
  Status allReduceSum(const Tensor &t, uint32_t channel) override {
    return allReduceSumGroup(t, {}, channel);
  }
  Status allReduceSumGroup(const Tensor &t, const std::vector<int> &ranks,
                           uint32_t channel) override {
    size_t k = ranks.empty() ? getWorldSize() : ranks.size();
    wait(2 * (k - 1) * t.byteSize() / k); // what a ring sends per rank
    return ranks.empty() ? inner.allReduceSum(t, channel)
                         : inner.allReduceSumGroup(t, ranks, channel);
  }
  Status barrier() override { return inner.barrier(); }

private:
  void wait(size_t bytes) {
    if (rate > 0) // 0: loopback only, no emulated link
      std::this_thread::sleep_for(std::chrono::duration<double>(bytes * 8.0 / rate));
  }
  Communicator &inner;
  double rate;
};

struct Builder {
  program::Program p;
  Builder(int rank) {
    p.set_format_version(program::FORMAT_VERSION_1);
    p.set_rank(rank);
    p.set_world_size(2);
    p.set_device("cpu");
  }
  uint32_t value(const std::string &name, int64_t rows, int64_t cols,
                 program::ValueRole role) {
    auto *v = p.add_values();
    v->set_id(p.values_size() - 1);
    v->set_name(name);
    v->set_dtype(program::DTYPE_F32);
    v->add_shape(rows);
    v->add_shape(cols);
    v->set_role(role);
    return v->id();
  }
  uint32_t kernel(const std::string &op, std::vector<uint32_t> in, uint32_t out) {
    auto *k = p.add_kernels();
    k->set_id(p.kernels_size() - 1);
    k->set_op(op);
    k->set_opset(17);
    k->set_name(op + std::to_string(k->id()));
    for (uint32_t i : in)
      k->add_inputs(i);
    k->add_outputs(out);
    return k->id();
  }
  void run(std::vector<uint32_t> kernels) {
    auto *s = p.add_steps();
    s->set_id(p.steps_size() - 1);
    for (uint32_t k : kernels)
      s->mutable_run()->add_kernel_ids(k);
  }
  program::Step *step() {
    auto *s = p.add_steps();
    s->set_id(p.steps_size() - 1);
    return s;
  }
};

/// B buckets: h = x w_b, g_b = h w_b, all-reduce g_b; then u = sum of g_b.
program::Program dpBuckets(int rank, int64_t dim, int buckets) {
  Builder b(rank);
  uint32_t x = b.value("x", dim, dim, program::ROLE_INPUT);
  uint32_t u = b.value("u", dim, dim, program::ROLE_OUTPUT);
  std::vector<uint32_t> grads;
  for (int k = 0; k < buckets; ++k) {
    std::string s = std::to_string(k);
    uint32_t w = b.value("w" + s, dim, dim, program::ROLE_INPUT);
    uint32_t h = b.value("h" + s, dim, dim, program::ROLE_ACTIVATION);
    uint32_t g = b.value("g" + s, dim, dim, program::ROLE_GRADIENT);
    b.run({b.kernel("MatMul", {x, w}, h), b.kernel("MatMul", {h, w}, g)});
    auto *ar = b.step()->mutable_all_reduce();
    ar->add_value_ids(g);
    ar->set_reduce(program::REDUCE_MEAN);
    ar->set_channel(k);
    grads.push_back(g);
  }
  b.run({b.kernel("Sum", grads, u)});
  return b.p;
}

/// Stage 0: a_m = relu(x_m w) w for M micro-batches, each sent to stage 1;
/// stage 1: receives a_m and computes o_m = a_m w.
program::Program pipeline(int rank, int64_t dim, int microBatches) {
  Builder b(rank);
  uint32_t w = b.value("w", dim, dim, program::ROLE_INPUT);
  for (int m = 0; m < microBatches; ++m) {
    std::string s = std::to_string(m);
    uint32_t a = b.value("a" + s, dim, dim, program::ROLE_ACTIVATION);
    if (rank == 0) {
      uint32_t x = b.value("x" + s, dim, dim, program::ROLE_INPUT);
      uint32_t h = b.value("h" + s, dim, dim, program::ROLE_ACTIVATION);
      uint32_t r = b.value("r" + s, dim, dim, program::ROLE_ACTIVATION);
      b.run({b.kernel("MatMul", {x, w}, h), b.kernel("Relu", {h}, r),
             b.kernel("MatMul", {r, w}, a)});
      auto *send = b.step()->mutable_send();
      send->set_value_id(a);
      send->set_peer(1);
      send->set_channel(100 + m);
    } else {
      uint32_t o = b.value("o" + s, dim, dim, program::ROLE_OUTPUT);
      auto *recv = b.step()->mutable_recv();
      recv->set_value_id(a);
      recv->set_peer(0);
      recv->set_channel(100 + m);
      b.run({b.kernel("MatMul", {a, w}, o)});
    }
  }
  return b.p;
}

/// Median iteration time of the slowest rank.
double measure(const program::Program &prog, Communicator &link, Communicator &plain,
               bool overlap, int iters) {
  BackendRegistry reg;
  registerCpuBackend(reg);
  auto exec = Executor::create(prog, reg, &link);
  if (!exec.isOk()) {
    std::fprintf(stderr, "%s\n", exec.getStatus().toString().c_str());
    std::exit(1);
  }
  (*exec)->setOverlapCommunication(overlap);
  std::mt19937 gen(plain.getRank());
  std::uniform_real_distribution<float> d(-0.05f, 0.05f);
  for (const auto &v : prog.values())
    if (v.role() == program::ROLE_INPUT) {
      Tensor t = *(*exec)->getValue(v.id());
      for (int64_t i = 0; i < t.numel(); ++i)
        t.as<float>()[i] = d(gen);
    }
  std::vector<double> times;
  for (int it = 0; it <= iters; ++it) {
    if (!plain.barrier().isOk())
      std::exit(1);
    double s = seconds();
    Status st = (*exec)->run();
    if (!st.isOk()) {
      std::fprintf(stderr, "%s\n", st.toString().c_str());
      std::exit(1);
    }
    if (it) // the first iteration warms up
      times.push_back(seconds() - s);
  }
  std::sort(times.begin(), times.end());
  float both[2] = {0, 0};
  both[plain.getRank()] = static_cast<float>(times[times.size() / 2]);
  Tensor t{program::DTYPE_F32, {2}, both};
  if (!plain.allReduceSum(t, 999).isOk())
    std::exit(1);
  return std::max(both[0], both[1]);
}

int runRank(int rank, const std::string &store, const std::vector<double> &rates,
            int64_t dim, int iters) {
  setNumThreads(1);
  GlooOptions o;
  o.rank = rank;
  o.worldSize = 2;
  o.storePath = store;
  o.timeout = std::chrono::milliseconds(60000);
  auto comm = createGlooCommunicator(o);
  if (!comm.isOk()) {
    std::fprintf(stderr, "%s\n", comm.getStatus().toString().c_str());
    return 1;
  }
  struct Scenario {
    const char *name;
    program::Program prog;
  };
  std::vector<Scenario> scenarios = {{"dp-buckets (8 buckets)", dpBuckets(rank, dim, 8)},
                                     {"pipeline (8 micro-batches)", pipeline(rank, dim, 8)}};
  if (rank == 0)
    std::printf("2 ranks (processes), 1 thread each, dim %lld (%lld KiB per transfer), "
                "median of %d iterations of the slowest rank\n"
                "| scenario | link | sequential ms | overlapped ms | speed-up |\n"
                "|---|---|---|---|---|\n",
                (long long)dim, (long long)(dim * dim * 4 / 1024), iters);
  for (const auto &s : scenarios)
    for (double rate : rates) {
      EmulatedLink link(**comm, rate * 1e6);
      double seq = measure(s.prog, link, **comm, false, iters);
      double ovl = measure(s.prog, link, **comm, true, iters);
      std::string linkText = rate > 0 ? std::to_string(int(rate)) + " Mbit/s" : "loopback";
      if (rank == 0)
        std::printf("| %s | %s | %.1f | %.1f | %.2fx |\n", s.name, linkText.c_str(),
                    seq * 1e3, ovl * 1e3, seq / ovl);
    }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::string rates = "100,300,1000,0";
  int64_t dim = 256;
  int iters = 5, rank = -1;
  std::string store;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--rates-mbit")
      rates = argv[i + 1];
    else if (a == "--dim")
      dim = std::atoll(argv[i + 1]);
    else if (a == "--iters")
      iters = std::atoi(argv[i + 1]);
    else if (a == "--rank")
      rank = std::atoi(argv[i + 1]);
    else if (a == "--store")
      store = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: %s [--rates-mbit R,R,..] [--dim D] [--iters I]\n", argv[0]);
      return 2;
    }
  }
  std::vector<double> rateList;
  for (size_t pos = 0; pos <= rates.size();) {
    size_t comma = rates.find(',', pos);
    if (comma == std::string::npos)
      comma = rates.size();
    rateList.push_back(std::atof(rates.substr(pos, comma - pos).c_str()));
    pos = comma + 1;
  }
  if (rank >= 0)
    return runRank(rank, store, rateList, dim, iters);
  // Parent: a fresh file-store folder, then one process per rank.
  char tmpl[] = "/tmp/strait-overlap-XXXXXX";
  if (!::mkdtemp(tmpl))
    return 1;
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      std::string rs = std::to_string(r), rt = rates,
                  ds = std::to_string(dim), is = std::to_string(iters);
      ::execl("/proc/self/exe", argv[0], "--rank", rs.c_str(), "--store", tmpl,
              "--rates-mbit", rt.c_str(), "--dim", ds.c_str(), "--iters", is.c_str(),
              (char *)nullptr);
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status))
      rc = 1;
  }
  std::string cleanup = std::string("rm -rf ") + tmpl;
  if (std::system(cleanup.c_str()) != 0)
    rc = 1;
  return rc;
}
