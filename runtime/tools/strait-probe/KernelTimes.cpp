//===- KernelTimes.cpp - strait-probe --kernels: time a job's kernels -----===//

#include "KernelTimes.h"

#include "strait/runtime/Program.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

namespace strait::rt {
namespace {

bool isFloating(DType d) {
  return d == program::DTYPE_F32 || d == program::DTYPE_F16 || d == program::DTYPE_BF16 ||
         d == program::DTYPE_F64;
}

uint16_t toHalf(float f) { // |f| < 1, normal or flushed to zero
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = (x >> 16) & 0x8000;
  int e = int((x >> 23) & 0xff) - 127 + 15;
  return e <= 0 ? sign : uint16_t(sign | (e << 10) | ((x & 0x7fffff) >> 13));
}

/// Fills `t` (host-visible memory) with uniform values: floats in
/// [-0.5, 0.5) (with `state`: [0, 0.5)), integers in [0, bound) (with
/// `state`: [1, bound]).
void fillRandom(const Tensor &t, int64_t bound, uint32_t &seed, bool state) {
  auto next = [&] {
    seed = seed * 1664525u + 1013904223u;
    return seed >> 8;
  };
  int64_t n = t.numel();
  bound = std::max<int64_t>(1, bound);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t r = next();
    float f = float(r) / 16777216.0f - 0.5f;
    if (state)
      f = std::abs(f);
    switch (t.dtype) {
    case program::DTYPE_F32: t.as<float>()[i] = f; break;
    case program::DTYPE_F64: t.as<double>()[i] = f; break;
    case program::DTYPE_BF16: {
      uint32_t x;
      std::memcpy(&x, &f, 4);
      t.as<uint16_t>()[i] = uint16_t(x >> 16);
      break;
    }
    case program::DTYPE_F16: t.as<uint16_t>()[i] = toHalf(f); break;
    case program::DTYPE_I64: t.as<int64_t>()[i] = int64_t(r % uint64_t(bound)) + state; break;
    case program::DTYPE_I32: t.as<int32_t>()[i] = int32_t(r % uint64_t(bound)) + state; break;
    case program::DTYPE_BOOL:
    case program::DTYPE_U8: t.as<uint8_t>()[i] = uint8_t(r & 1); break;
    default: std::memset(static_cast<char *>(t.data) + i * dtypeSize(t.dtype), 0,
                         dtypeSize(t.dtype));
    }
  }
}

/// Optimizers read state that a real step keeps in range: second moments
/// and sums of squares are >= 0, the step count >= 1. On negative moments
/// AdamW's square root takes libm's errno path per element and ran 3-4x
/// slower than in the step (gpt2-tiny: 2.1 ms against 0.57 ms).
bool isOptimizer(const std::string &op) {
  return op == "AdamW" || op == "Adam" || op == "Adagrad" || op == "Momentum" || op == "SGD";
}

} // namespace

namespace {

/// One kernel of the list, ready to run: its buffers, tensors and context.
struct Prepared {
  const program::Kernel *kernel = nullptr;
  std::string where;
  std::vector<Buffer> buffers;
  std::map<uint32_t, Tensor> tensors;
  std::vector<const Tensor *> ins;
  std::vector<Tensor *> outs;
  KernelFn fn;
  std::unique_ptr<KernelContext> ctx;
  size_t bytes = 0;
  std::vector<double> times;
};

StatusOr<std::unique_ptr<Prepared>>
prepare(const Backend &backend, const program::Kernel &k, const std::string &path,
        const std::map<uint32_t, const program::Value *> &values, uint32_t &seed) {
  auto p = std::make_unique<Prepared>();
  p->kernel = &k;
  p->where = "'" + path + "': kernel " + std::to_string(k.id()) + " (" + k.op() + " '" +
             k.name() + "')";
  if (k.name().empty())
    return invalidArgument(p->where + " has no signature (name)");
  int64_t bound = 0;
  auto tensorOf = [&](uint32_t id, bool input) -> StatusOr<Tensor *> {
    if (auto it = p->tensors.find(id); it != p->tensors.end())
      return &it->second;
    auto v = values.find(id);
    if (v == values.end())
      return invalidArgument(p->where + " uses undefined value " + std::to_string(id));
    Tensor t;
    t.dtype = v->second->dtype();
    t.shape.assign(v->second->shape().begin(), v->second->shape().end());
    STRAIT_ASSIGN_OR_RETURN(Buffer b, backend.allocate(std::max<size_t>(t.byteSize(), 64)));
    t.data = b.data();
    p->bytes += b.size();
    p->buffers.push_back(std::move(b));
    if (input && v->second->role() == program::ROLE_CONSTANT)
      STRAIT_RETURN_IF_ERROR(copyTensorData(v->second->constant(), t, v->second->name()));
    else if (input && isFloating(t.dtype) && bound == 0 && !t.shape.empty())
      bound = *std::min_element(t.shape.begin(), t.shape.end());
    return &(p->tensors[id] = t);
  };
  for (uint32_t id : k.inputs()) {
    if (id == kAbsentValue) {
      p->ins.push_back(nullptr);
      continue;
    }
    STRAIT_ASSIGN_OR_RETURN(Tensor * t, tensorOf(id, true));
    p->ins.push_back(t);
  }
  // Random data once the bound (the first floating input's smallest
  // dimension) is known.
  for (uint32_t id : k.inputs())
    if (id != kAbsentValue && values.at(id)->role() != program::ROLE_CONSTANT)
      fillRandom(p->tensors[id], bound, seed, isOptimizer(k.op()));
  for (uint32_t id : k.outputs()) {
    STRAIT_ASSIGN_OR_RETURN(Tensor * t, tensorOf(id, false));
    p->outs.push_back(t);
  }
  StatusOr<KernelFn> fn = backend.resolve(k);
  if (!fn.isOk())
    return Status(fn.getStatus().getCode(), p->where + ": " + fn.getStatus().getMessage());
  p->fn = std::move(*fn);
  p->ctx = std::make_unique<KernelContext>(k, p->ins, p->outs);
  return p;
}

/// Seconds of one call of `p`, finished on the device.
StatusOr<double> timeCall(const Backend &backend, Prepared &p) {
  auto t0 = std::chrono::steady_clock::now();
  Status s = p.fn(*p.ctx);
  if (s.isOk())
    s = backend.synchronize();
  if (!s.isOk())
    return Status(s.getCode(), p.where + ": " + s.getMessage());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

StatusOr<std::vector<KernelTime>> timeKernelList(const Backend &backend,
                                                 const std::string &path, double budget,
                                                 size_t groupBytes) {
  STRAIT_ASSIGN_OR_RETURN(program::Program list, loadProgram(path));
  if (list.producer() != kKernelListProducer)
    return invalidArgument("'" + path + "' is a program of '" + list.producer() +
                           "', not a kernel list: write one with `straitc MODEL --loss ... "
                           "--emit=kernels -o FILE`");
  std::map<uint32_t, const program::Value *> values;
  for (const program::Value &v : list.values())
    values[v.id()] = &v;
  std::vector<KernelTime> out;
  uint32_t seed = 12345;
  // Kernels are timed in rounds over groups of up to `groupBytes` of buffers, one
  // call of each kernel per round in list order (the step's order): as in
  // a step, a kernel finds the caches filled by the other kernels, not with
  // its own inputs from its previous call (timing each kernel in a loop of
  // its own measured gpt2-tiny's GEMMs up to 2x faster than in the step).
  int n = list.kernels_size();
  for (int first = 0; first < n;) {
    std::vector<std::unique_ptr<Prepared>> group;
    size_t bytes = 0;
    for (; first < n && (group.empty() || bytes < groupBytes); ++first) {
      STRAIT_ASSIGN_OR_RETURN(auto p, prepare(backend, list.kernels(first), path, values, seed));
      bytes += p->bytes;
      group.push_back(std::move(p));
    }
    for (auto &p : group) // warm-up
      STRAIT_RETURN_IF_ERROR(timeCall(backend, *p).getStatus());
    double total = 0;
    for (int round = 0; round < 50 && (round < 5 || total < budget * group.size()); ++round)
      for (auto &p : group) {
        STRAIT_ASSIGN_OR_RETURN(double s, timeCall(backend, *p));
        p->times.push_back(s);
        total += s;
      }
    for (auto &p : group) {
      std::vector<double> &t = p->times;
      std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
      out.push_back({p->kernel->name(), p->kernel->op(), std::max(t[t.size() / 2], 1e-9)});
    }
  }
  return out;
}

StatusOr<std::vector<KernelTime>> chargeFusedKernels(std::vector<KernelTime> timed,
                                                     const std::string &path) {
  // Member signature -> (sum of its charged times, occurrences), in order.
  std::vector<std::string> order;
  std::map<std::string, std::pair<double, int>> charged;
  std::vector<KernelTime> out;
  for (const KernelTime &k : timed) {
    size_t bar = k.signature.find('|');
    if (bar == std::string::npos) {
      out.push_back(k);
      continue;
    }
    std::string rest = k.signature.substr(bar + 1);
    while (!rest.empty()) {
      size_t next = rest.find('|');
      std::string entry = rest.substr(0, next);
      rest = next == std::string::npos ? "" : rest.substr(next + 1);
      size_t eq = entry.find('=');
      char *end = nullptr;
      double share = eq == std::string::npos ? -1 : std::strtod(entry.c_str() + eq + 1, &end);
      if (eq == 0 || eq == std::string::npos || !end || *end || !(share > 0) || share > 1)
        return invalidArgument("'" + path + "': fused kernel '" + k.signature.substr(0, bar) +
                               "' has a malformed member entry '" + entry +
                               "' (want SIGNATURE=SHARE, 0 < SHARE <= 1)");
      std::string member = entry.substr(0, eq);
      auto [it, inserted] = charged.try_emplace(member, 0.0, 0);
      if (inserted)
        order.push_back(member);
      it->second.first += k.seconds * share;
      ++it->second.second;
    }
  }
  // A member's charged time replaces its time alone: the job runs it fused.
  for (const std::string &m : order) {
    auto [sum, count] = charged[m];
    double t = std::max(sum / count, 1e-9);
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const KernelTime &k) { return k.signature == m; });
    if (it != out.end())
      it->seconds = t;
    else
      out.push_back({m, m.substr(0, m.find('.')), t});
  }
  return out;
}

} // namespace strait::rt
