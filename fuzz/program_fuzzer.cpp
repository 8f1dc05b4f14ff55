//===- program_fuzzer.cpp - libFuzzer target: device programs -------------===//
//
// A device program (rankN.program.pb) comes from a file strait-run reads:
// every value id, shape, dtype, arena offset, kernel attribute, step, peer,
// channel and codec field may be corrupted or hostile. The input is a
// serialized strait.program.Program. It must be rejected with a Status by
// parseProgram / Executor::create, or load: its parameters are initialized
// from a shard file of zeros (Executor::loadParameters) and every step runs
// once on the CPU backend with a communicator that completes every transfer
// at once (sends encode their payload with the step's codec, receives decode
// one). ASan reports any index, shape or offset the checks let through.
//
// Sizes: a program whose values the checks accepted must have sizes that fit
// in 64 bits (abort otherwise: a finding); one that needs more than 64 MiB
// is skipped (a legitimate big program, not a bug of the checks).
//
// With -DSTRAIT_FUZZ_SHARDS=1 the input is a ParameterShardFile instead,
// loaded into the program named by $STRAIT_FUZZ_PROGRAM (default: the
// digits seed of fuzz/corpus/program). Built by fuzz/build-program.sh.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Backend.h"
#include "strait/runtime/Codec.h"
#include "strait/runtime/Communicator.h"
#include "strait/runtime/Executor.h"
#include "strait/runtime/Program.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace strait;
using namespace strait::rt;

namespace {

constexpr uint64_t kMaxBytes = 64ull << 20;

/// Completes every transfer at once: receives read zeros (through a coded
/// payload when the step has a codec), sends encode and drop.
class InstantCommunicator : public Communicator {
public:
  InstantCommunicator(int rank, int world) : rank(rank), world(world) {}
  int getRank() const override { return rank; }
  int getWorldSize() const override { return world; }
  Status send(const Tensor &, int, uint32_t) override { return Status::ok(); }
  Status recv(const Tensor &t, int, uint32_t) override {
    std::memset(t.data, 0, t.byteSize());
    return Status::ok();
  }
  Status allReduceSum(const Tensor &, uint32_t) override { return Status::ok(); }
  Status allReduceSumGroup(const Tensor &, const std::vector<int> &, uint32_t) override {
    return Status::ok();
  }
  Status barrier() override { return Status::ok(); }
  Status sendCoded(const Tensor &t, int, uint32_t, const program::CodecParams &codec,
                   ErrorFeedback *feedback) override {
    std::vector<uint8_t> payload;
    if (feedback)
      return feedback->encode(codec, t.as<float>(), t.numel(), payload);
    return encode(codec, t.as<float>(), t.numel(), payload);
  }
  Status recvCoded(const Tensor &t, int, uint32_t, const program::CodecParams &codec) override {
    std::vector<float> zeros(t.numel());
    std::vector<uint8_t> payload;
    STRAIT_RETURN_IF_ERROR(encode(codec, zeros.data(), t.numel(), payload));
    return decode(payload.data(), payload.size(), t.as<float>(), t.numel());
  }
  Status sendDeferred(const Tensor &t, int peer, uint32_t channel,
                      const program::CodecParams &codec, ErrorFeedback *feedback) override {
    return sendCoded(t, peer, channel, codec, feedback);
  }
  Status allReduce(const Tensor &t, uint32_t, const AllReduceOptions &options) override {
    if (options.codec.codec() == program::CODEC_NONE)
      return Status::ok();
    std::vector<uint8_t> payload;
    if (options.feedback)
      STRAIT_RETURN_IF_ERROR(
          options.feedback->encode(options.codec, t.as<float>(), t.numel(), payload));
    else
      STRAIT_RETURN_IF_ERROR(encode(options.codec, t.as<float>(), t.numel(), payload));
    return decode(payload.data(), payload.size(), t.as<float>(), t.numel());
  }

private:
  int rank, world;
};

/// Bytes of the program's values and arena, or false when the checks let a
/// size through that does not fit in 64 bits.
bool programBytes(const program::Program &p, uint64_t &total) {
  total = p.memory_plan().arena_bytes();
  for (const auto &v : p.values()) {
    uint64_t n = 1;
    for (int64_t d : v.shape())
      if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
        return false;
    uint64_t bytes;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(dtypeSize(v.dtype())), &bytes) ||
        __builtin_add_overflow(total, bytes, &total))
      return false;
  }
  return true;
}

const BackendRegistry &registry() {
  static BackendRegistry *r = [] {
    auto *reg = new BackendRegistry;
    registerCpuBackend(*reg);
    return reg;
  }();
  return *r;
}

program::ParameterShardFile zeroShards(const program::Program &p) {
  program::ParameterShardFile f;
  f.set_format_version(program::FORMAT_VERSION_1);
  f.set_rank(p.rank());
  for (const auto &v : p.values())
    if (v.role() == program::ROLE_PARAMETER) {
      program::ParameterEntry *e = f.add_parameters();
      e->set_name(v.parameter_name());
      e->set_init(program::ParameterEntry::INIT_ZEROS);
    }
  return f;
}

void runProgram(program::Program p, const program::ParameterShardFile *shards) {
  if (!validateProgram(p).isOk())
    return;
  uint64_t total;
  if (!programBytes(p, total)) {
    std::fprintf(stderr, "validateProgram accepted a program whose sizes overflow\n");
    std::abort();
  }
  if (total > kMaxBytes)
    return;
  InstantCommunicator comm(p.rank(), p.world_size());
  program::ParameterShardFile zeros;
  if (!shards) {
    zeros = zeroShards(p);
    shards = &zeros;
  }
  StatusOr<std::unique_ptr<Executor>> exec = Executor::create(std::move(p), registry(), &comm);
  if (!exec.isOk())
    return;
  if (!(*exec)->loadParameters(*shards).isOk())
    return;
  (void)(*exec)->run();
}

#if STRAIT_FUZZ_SHARDS
const program::Program &shardProgram() {
  static program::Program *p = [] {
    const char *env = std::getenv("STRAIT_FUZZ_PROGRAM");
    std::string path = env ? env : "fuzz/corpus/program/digits-rank0.program.pb";
    StatusOr<program::Program> loaded = loadProgram(path);
    if (!loaded.isOk()) {
      std::fprintf(stderr, "shard fuzzer: %s (set STRAIT_FUZZ_PROGRAM)\n",
                   loaded.getStatus().toString().c_str());
      std::exit(2);
    }
    return new program::Program(loaded.takeValue());
  }();
  return *p;
}
#endif

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
#if STRAIT_FUZZ_SHARDS
  program::ParameterShardFile shards;
  if (!shards.ParseFromString(bytes))
    return 0;
  runProgram(shardProgram(), &shards);
#else
  program::Program p;
  if (!p.ParseFromString(bytes))
    return 0;
  runProgram(std::move(p), nullptr);
#endif
  return 0;
}
