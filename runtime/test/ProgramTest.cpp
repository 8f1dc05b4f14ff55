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
