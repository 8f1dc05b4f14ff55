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
// Mutations are structure-aware (LLVMFuzzerCustomMutator): the input is
// parsed, one field somewhere in the message tree gets an interesting value
// (0, -1, 2^31, 2^32, 2^63 - 1, a neighbour, another element's value), or an
// element of a repeated field is removed or duplicated, and the message is
// serialized again; one in four mutations is libFuzzer's own byte mutation.
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

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

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


namespace {
namespace gp = google::protobuf;

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
};

int64_t interesting(Rng &r, int64_t old) {
  static const int64_t kValues[] = {0, 1, -1, 2, 3, 7, 8, 64, 255, 256, 1024, 65535, 65536,
                                    INT32_MAX, INT32_MIN, int64_t(1) << 31, int64_t(1) << 32,
                                    int64_t(1) << 40, int64_t(1) << 48, INT64_MAX, INT64_MIN};
  switch (r.below(3)) {
  case 0:
    return kValues[r.below(sizeof(kValues) / sizeof(*kValues))];
  case 1:
    return old + static_cast<int64_t>(r.below(5)) - 2;
  default:
    return static_cast<int64_t>(r.next() >> r.below(64));
  }
}

/// All messages of the tree, for picking one uniformly.
void collect(gp::Message *m, std::vector<gp::Message *> &out) {
  out.push_back(m);
  const gp::Reflection *ref = m->GetReflection();
  std::vector<const gp::FieldDescriptor *> fields;
  ref->ListFields(*m, &fields);
  for (const gp::FieldDescriptor *f : fields) {
    if (f->cpp_type() != gp::FieldDescriptor::CPPTYPE_MESSAGE)
      continue;
    if (f->is_repeated())
      for (int i = 0; i < ref->FieldSize(*m, f); ++i)
        collect(ref->MutableRepeatedMessage(m, f, i), out);
    else
      collect(ref->MutableMessage(m, f), out);
  }
}

void mutateField(gp::Message *m, Rng &r) {
  const gp::Descriptor *d = m->GetDescriptor();
  const gp::Reflection *ref = m->GetReflection();
  if (d->field_count() == 0)
    return;
  const gp::FieldDescriptor *f = d->field(static_cast<int>(r.below(d->field_count())));
  using F = gp::FieldDescriptor;
  if (f->is_repeated()) {
    int n = ref->FieldSize(*m, f);
    if (f->is_map() || f->cpp_type() == F::CPPTYPE_MESSAGE) {
      if (n > 0 && r.below(2))
        ref->RemoveLast(m, f);
      else if (n > 0)
        ref->AddMessage(m, f)->CopyFrom(ref->GetRepeatedMessage(*m, f, static_cast<int>(r.below(n))));
      return;
    }
    if (n > 0 && r.below(4) == 0) {
      ref->RemoveLast(m, f);
      return;
    }
    int i = n > 0 && r.below(4) ? static_cast<int>(r.below(n)) : -1;
    switch (f->cpp_type()) {
    case F::CPPTYPE_INT64:
      i < 0 ? ref->AddInt64(m, f, interesting(r, 0))
            : ref->SetRepeatedInt64(m, f, i, interesting(r, ref->GetRepeatedInt64(*m, f, i)));
      break;
    case F::CPPTYPE_UINT64:
      i < 0 ? ref->AddUInt64(m, f, interesting(r, 0))
            : ref->SetRepeatedUInt64(m, f, i, interesting(r, ref->GetRepeatedUInt64(*m, f, i)));
      break;
    case F::CPPTYPE_INT32:
      i < 0 ? ref->AddInt32(m, f, static_cast<int32_t>(interesting(r, 0)))
            : ref->SetRepeatedInt32(m, f, i, static_cast<int32_t>(interesting(r, ref->GetRepeatedInt32(*m, f, i))));
      break;
    case F::CPPTYPE_UINT32:
      i < 0 ? ref->AddUInt32(m, f, static_cast<uint32_t>(interesting(r, 0)))
            : ref->SetRepeatedUInt32(m, f, i, static_cast<uint32_t>(interesting(r, ref->GetRepeatedUInt32(*m, f, i))));
      break;
    case F::CPPTYPE_FLOAT:
      i < 0 ? ref->AddFloat(m, f, static_cast<float>(interesting(r, 0)))
            : ref->SetRepeatedFloat(m, f, i, static_cast<float>(interesting(r, 0)) / 7.0f);
      break;
    default:
      break;
    }
    return;
  }
  switch (f->cpp_type()) {
  case F::CPPTYPE_INT64: ref->SetInt64(m, f, interesting(r, ref->GetInt64(*m, f))); break;
  case F::CPPTYPE_UINT64: ref->SetUInt64(m, f, interesting(r, ref->GetUInt64(*m, f))); break;
  case F::CPPTYPE_INT32: ref->SetInt32(m, f, static_cast<int32_t>(interesting(r, ref->GetInt32(*m, f)))); break;
  case F::CPPTYPE_UINT32: ref->SetUInt32(m, f, static_cast<uint32_t>(interesting(r, ref->GetUInt32(*m, f)))); break;
  case F::CPPTYPE_BOOL: ref->SetBool(m, f, !ref->GetBool(*m, f)); break;
  case F::CPPTYPE_FLOAT: ref->SetFloat(m, f, r.below(2) ? 0.5f * r.below(5) : -1.0f); break;
  case F::CPPTYPE_DOUBLE: ref->SetDouble(m, f, r.below(2) ? 0.5 * r.below(5) : -1.0); break;
  case F::CPPTYPE_ENUM: ref->SetEnumValue(m, f, static_cast<int>(r.below(24)) - 1); break;
  case F::CPPTYPE_STRING:
    if (r.below(2))
      ref->SetString(m, f, "");
    break;
  case F::CPPTYPE_MESSAGE:
    if (r.below(4) == 0)
      ref->ClearField(m, f);
    else
      ref->MutableMessage(m, f);
    break;
  default:
    break;
  }
}
} // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize,
                                          unsigned int seed) {
  Rng r{seed * 0x9e3779b97f4a7c15ull + 1};
#if STRAIT_FUZZ_SHARDS
  program::ParameterShardFile message;
#else
  program::Program message;
#endif
  if (r.below(4) == 0 || !message.ParseFromArray(data, static_cast<int>(size)))
    return LLVMFuzzerMutate(data, size, maxSize);
  int rounds = 1 + static_cast<int>(r.below(3));
  for (int i = 0; i < rounds; ++i) {
    std::vector<gp::Message *> all;
    collect(&message, all);
    mutateField(all[r.below(all.size())], r);
  }
  std::string out;
  if (!message.SerializeToString(&out) || out.size() > maxSize)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

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
