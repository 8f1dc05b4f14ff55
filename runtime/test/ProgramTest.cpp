//===- ProgramTest.cpp - Program validation and file round trips ----------===//
//
// Every malformed program is rejected with a message naming the field.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

program::Program validProgram() {
  ProgramBuilder b(0, 2);
  uint32_t x = b.addValue("x", program::DTYPE_F32, {2, 3}, program::ROLE_INPUT);
  uint32_t y = b.addValue("y", program::DTYPE_F32, {2, 3}, program::ROLE_ACTIVATION);
  b.addKernel("Relu", {x}, {y});
  b.addRunStep();
  program::Step *s = b.get().add_steps();
  s->mutable_send()->set_value_id(y);
  s->mutable_send()->set_peer(1);
  return b.get();
}

std::string errorOf(const program::Program &p) {
  Status s = validateProgram(p);
  EXPECT_FALSE(s.isOk());
  return s.getMessage();
}

} // namespace

TEST(Program, ValidProgramPasses) {
  Status s = validateProgram(validProgram());
  EXPECT_TRUE(s.isOk()) << s.toString();
}

TEST(Program, RejectsUnknownVersion) {
  program::Program p = validProgram();
  p.set_format_version(static_cast<program::FormatVersion>(7));
  EXPECT_NE(errorOf(p).find("format_version: unsupported program format version 7"),
            std::string::npos);
  p.set_format_version(program::FORMAT_VERSION_UNSPECIFIED);
  EXPECT_NE(errorOf(p).find("format_version"), std::string::npos);
}

TEST(Program, RejectsDuplicateValueId) {
  program::Program p = validProgram();
  p.mutable_values(1)->set_id(0);
  EXPECT_NE(errorOf(p).find("values[1].id: duplicate value id 0"), std::string::npos);
}

TEST(Program, RejectsUnknownKernelOperand) {
  program::Program p = validProgram();
  p.mutable_kernels(0)->set_inputs(0, 17);
  EXPECT_NE(errorOf(p).find("kernels[0].inputs[0]: unknown value id 17"),
            std::string::npos);
}

TEST(Program, RejectsBadPeerAndMissingStepKind) {
  program::Program p = validProgram();
  p.mutable_steps(1)->mutable_send()->set_peer(0); // itself
  EXPECT_NE(errorOf(p).find("steps[1].send.peer: 0"), std::string::npos);
  p.mutable_steps(1)->clear_kind();
  EXPECT_NE(errorOf(p).find("steps[1]: step kind not set"), std::string::npos);
}

TEST(Program, RejectsBadShapesAndRoles) {
  program::Program p = validProgram();
  p.mutable_values(0)->set_shape(1, -3);
  EXPECT_NE(errorOf(p).find("values[0].shape[1]: negative dimension -3"),
            std::string::npos);
  p = validProgram();
  p.mutable_values(0)->set_role(program::ROLE_PARAMETER);
  EXPECT_NE(errorOf(p).find("values[0].parameter_name"), std::string::npos);
  p = validProgram();
  p.mutable_values(0)->set_dtype(program::DTYPE_UNSPECIFIED);
  EXPECT_NE(errorOf(p).find("values[0].dtype"), std::string::npos);
}

TEST(Program, RejectsAllReduceGroupWithoutOwnRank) {
  program::Program p = validProgram();
  auto *ar = p.add_steps()->mutable_all_reduce();
  ar->add_value_ids(1);
  ar->add_ranks(1);
  EXPECT_NE(errorOf(p).find("steps[2].all_reduce.ranks: does not contain this "
                            "program's rank 0"),
            std::string::npos);
  ar->clear_ranks();
  ar->add_ranks(1);
  ar->add_ranks(0);
  EXPECT_NE(errorOf(p).find("not sorted and distinct"), std::string::npos);
}

TEST(Program, RejectsArenaOverflow) {
  program::Program p = validProgram();
  p.mutable_memory_plan()->set_arena_bytes(16);
  p.mutable_values(1)->set_has_arena_offset(true);
  p.mutable_values(1)->set_arena_offset(0);
  EXPECT_NE(errorOf(p).find("values[1].arena_offset: value of 24 bytes"),
            std::string::npos);
}

// Found by fuzz/program_fuzzer.cpp (docs/fuzzing.md, runtime bugs 1-2): an
// arena offset near 2^64 wrapped the bounds check (the value then lay before
// the arena), and shapes whose element or byte count overflows 64 bits were
// accepted (a buffer of the wrapped size, kernels writing past it).
TEST(Program, RejectsArenaOffsetThatWraps) {
  program::Program p = validProgram();
  p.mutable_memory_plan()->set_arena_bytes(64);
  p.mutable_values(1)->set_has_arena_offset(true);
  p.mutable_values(1)->set_arena_offset(~uint64_t(0) - 63); // a multiple of 64
  EXPECT_NE(errorOf(p).find("values[1].arena_offset: value of 24 bytes at offset "
                            "18446744073709551552 exceeds memory_plan.arena_bytes 64"),
            std::string::npos);
}

TEST(Program, RejectsShapesWhoseSizeOverflows) {
  program::Program p = validProgram();
  auto *shape = p.mutable_values(0)->mutable_shape();
  shape->Clear();
  shape->Add(int64_t(1) << 32);
  shape->Add(int64_t(1) << 32);
  shape->Add(4); // 2^66 elements: the product wrapped to 0
  EXPECT_NE(errorOf(p).find("values[0].shape: [4294967296x4294967296x4] has more than 2^48 "
                            "elements"),
            std::string::npos);
  shape->Clear();
  shape->Add(int64_t(1) << 24);
  shape->Add(int64_t(1) << 24);
  shape->Add(0); // empty: fine
  p.mutable_values(1)->mutable_shape()->Clear();
  p.mutable_values(1)->mutable_shape()->Add(0);
  EXPECT_TRUE(validateProgram(p).isOk()) << validateProgram(p).toString();
  // Each value below 2^48 elements, together more than 2^56 bytes.
  p = validProgram();
  for (int i = 0; i < 2; ++i) {
    p.mutable_values(i)->mutable_shape()->Clear();
    p.mutable_values(i)->mutable_shape()->Add(int64_t(1) << 47);
    p.mutable_values(i)->mutable_shape()->Add(2);
  }
  p.mutable_values(0)->set_dtype(program::DTYPE_F64); // 2^51 bytes each
  for (int i = 0; i < 64; ++i) {
    program::Value *v = p.add_values();
    *v = p.values(0);
    v->set_id(100 + i);
  }
  EXPECT_NE(errorOf(p).find("the program's values take more than 2^56 bytes together"),
            std::string::npos);
  p = validProgram();
  p.mutable_memory_plan()->set_arena_bytes(~uint64_t(0));
  EXPECT_NE(errorOf(p).find("memory_plan.arena_bytes: 18446744073709551615 is more than 2^56"),
            std::string::npos);
}

// Every program that fuzz/program_fuzzer found a crash with, replayed: rejected
// with a message, or loaded and run without a crash (the fuzzer's ASan build
// sees the memory errors; this one the aborts and faults).
TEST(Program, FuzzRegressionsAreRejected) {
  std::string dir = STRAIT_FUZZ_REGRESSIONS "/program";
  int files = 0;
  for (const char *name : {"arena-offset-wraps.pb", "activation-shape-overflows.pb",
                           "input-shape-overflows.pb", "parameter-bytes-wrap.pb"}) {
    StatusOr<program::Program> p = loadProgram(dir + "/" + name);
    ASSERT_FALSE(p.isOk()) << name;
    EXPECT_NE(p.getStatus().getMessage().find(name), std::string::npos) << p.getStatus().toString();
    EXPECT_TRUE(p.getStatus().getMessage().find("arena_offset") != std::string::npos ||
                p.getStatus().getMessage().find("2^48 elements") != std::string::npos)
        << p.getStatus().toString();
    ++files;
  }
  EXPECT_EQ(files, 4);
}

TEST(Program, FileRoundTripAndGarbage) {
  std::string path = testing::TempDir() + "/strait_program_test.pb";
  program::Program p = validProgram();
  ASSERT_TRUE(writeMessage(p, path).isOk());
  StatusOr<program::Program> loaded = loadProgram(path);
  ASSERT_TRUE(loaded.isOk()) << loaded.getStatus().toString();
  EXPECT_EQ(loaded->values_size(), 2);
  EXPECT_EQ(loaded->steps(1).send().peer(), 1);

  { std::ofstream(path, std::ios::trunc) << "\xff\xff\xff not a program"; }
  StatusOr<program::Program> bad = loadProgram(path);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.getStatus().getMessage().find("not a valid program"), std::string::npos);
  StatusOr<program::Program> missing = loadProgram(path + ".missing");
  EXPECT_EQ(missing.getStatus().getCode(), StatusCode::IoError);
  std::remove(path.c_str());
}

TEST(Program, ManifestValidation) {
  program::PlanManifest m;
  m.set_format_version(program::FORMAT_VERSION_1);
  m.set_world_size(2);
  for (int r = 0; r < 2; ++r) {
    auto *e = m.add_ranks();
    e->set_rank(r);
    e->set_program_file("rank" + std::to_string(r) + ".pb");
  }
  EXPECT_TRUE(validateManifest(m).isOk());
  m.mutable_ranks(1)->set_rank(0);
  EXPECT_NE(validateManifest(m).getMessage().find("ranks[1].rank"), std::string::npos);
}

TEST(Program, InitSchemesAreSeededAndDocumented) {
  OwnedTensor a(program::DTYPE_F32, {1000}), b(program::DTYPE_F32, {1000});
  program::ParameterEntry e;
  e.set_name("w");
  e.set_init(program::ParameterEntry::INIT_NORMAL);
  e.set_init_scale(0.02f);
  e.set_seed(42);
  ASSERT_TRUE(initializeParameter(e, a.tensor).isOk());
  ASSERT_TRUE(initializeParameter(e, b.tensor).isOk());
  double sq = 0;
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(a.as<float>()[i], b.as<float>()[i]);
    sq += a.as<float>()[i] * a.as<float>()[i];
  }
  EXPECT_NEAR(std::sqrt(sq / 1000), 0.02, 0.003);
  e.set_init(program::ParameterEntry::INIT_NONE);
  EXPECT_FALSE(initializeParameter(e, a.tensor).isOk());
}

TEST(Program, KeepDecodedAndRepeatPayloadNeedALossyCodecAndAnEarlierSend) {
  program::Program p = validProgram();
  program::Send *first = p.mutable_steps(1)->mutable_send();
  first->set_keep_decoded(true);
  EXPECT_NE(errorOf(p).find("steps[1].send.keep_decoded needs a fixed lossy codec (not "
                            "CODEC_NONE)"),
            std::string::npos);
  first->mutable_codec()->set_codec(program::CODEC_AQSGD_INT2);
  EXPECT_NE(errorOf(p).find("(not CODEC_AQSGD_INT2)"), std::string::npos);
  first->mutable_codec()->set_codec(program::CODEC_INT8);
  first->mutable_codec()->set_error_feedback(true);
  EXPECT_TRUE(validateProgram(p).isOk());
  // A second send repeating its payload (without a residual of its own).
  program::Send *again = p.add_steps()->mutable_send();
  *again = *first;
  again->set_keep_decoded(false);
  again->set_repeat_payload(true);
  again->mutable_codec()->set_error_feedback(false);
  Status s = validateProgram(p);
  EXPECT_TRUE(s.isOk()) << s.toString();
  again->set_keep_decoded(true);
  EXPECT_NE(errorOf(p).find("steps[2].send: keep_decoded and repeat_payload exclude each other"),
            std::string::npos);
  again->set_keep_decoded(false);
  again->mutable_codec()->set_codec(program::CODEC_INT4);
  EXPECT_NE(errorOf(p).find("steps[2].send.repeat_payload: the codec differs from that of "
                            "steps[1], whose payload it repeats"),
            std::string::npos);
  again->mutable_codec()->set_codec(program::CODEC_INT8);
  first->set_keep_decoded(false);
  EXPECT_NE(errorOf(p).find("steps[2].send.repeat_payload: no earlier keep_decoded send of "
                            "value 1"),
            std::string::npos);
}
