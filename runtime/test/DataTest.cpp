//===- DataTest.cpp - .npy parser and data loaders ------------------------===//
//
// The strict .npy reader (round trip, every rejection names the file, a
// mutation fuzz that must never crash), token windows with next-token labels,
// and npy batches with shape errors that name the input and the file.
//
//===----------------------------------------------------------------------===//
#include "DataLoader.h"
#include "Npy.h"
#include "TestUtil.h"

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <random>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::data;

namespace {

std::string tempPath(const std::string &name) {
  static const std::string dir = test::makeTempDir("strait-data"); // removed at exit
  return dir + "/" + name;
}

std::string npyBytes(const std::string &header, size_t payload) {
  std::string h = header;
  h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  return out + h + std::string(payload, '\0');
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

} // namespace

TEST(Npy, WriteThenReadRoundTrips) {
  std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  Tensor t{program::DTYPE_F32, {2, 3}, v.data()};
  std::string path = tempPath("rt.npy");
  ASSERT_TRUE(writeNpy(path, t).isOk());
  StatusOr<NpyArray> a = readNpy(path);
  ASSERT_TRUE(a.isOk()) << a.getStatus().toString();
  EXPECT_EQ(a->dtype, program::DTYPE_F32);
  EXPECT_EQ(a->shape, (Shape{2, 3}));
  ASSERT_EQ(a->bytes.size(), 24u);
  EXPECT_EQ(0, std::memcmp(a->bytes.data(), v.data(), 24));
  // Scalars and 1-D arrays ("(5,)") too.
  int64_t s = 42;
  ASSERT_TRUE(writeNpy(path, Tensor{program::DTYPE_I64, {}, &s}).isOk());
  a = readNpy(path);
  ASSERT_TRUE(a.isOk()) << a.getStatus().toString();
  EXPECT_TRUE(a->shape.empty());
  EXPECT_EQ(a->bytes.size(), 8u);
}

// A write that fails midway (here: the file size limit, as a full disk)
// leaves the previous file intact and no temporary file: writeNpy writes
// under a temporary name and renames (strait-run's --save-params,
// --dump-outputs and checkpoints write through it).
TEST(Npy, FailedWriteKeepsThePreviousFile) {
  std::string dir = test::makeTempDir("strait-npy-partial");
  std::string path = dir + "/x.npy";
  std::vector<float> old = {1, 2, 3};
  ASSERT_TRUE(writeNpy(path, Tensor{program::DTYPE_F32, {3}, old.data()}).isOk());
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) { // a limit of 4 KiB on files this process writes
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = {4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::vector<float> big(100000, 5.0f);
    Status s = writeNpy(path, Tensor{program::DTYPE_F32, {100000}, big.data()});
    ::_exit(!s.isOk() && s.getMessage().find(path) != std::string::npos ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "writeNpy did not fail with a message naming the file";
  StatusOr<NpyArray> a = readNpy(path);
  ASSERT_TRUE(a.isOk()) << a.getStatus().toString();
  ASSERT_EQ(a->shape, (Shape{3}));
  EXPECT_EQ(0, std::memcmp(a->bytes.data(), old.data(), 12));
  int files = 0;
  for (const auto &e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename(), "x.npy");
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(Npy, AcceptsNumpyStyleHeaders) {
  auto a = parseNpy(npyBytes("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", 24), "x.npy");
  ASSERT_TRUE(a.isOk()) << a.getStatus().toString();
  EXPECT_EQ(a->shape, (Shape{3}));
  a = parseNpy(npyBytes("{'shape': (2, 1, 2), 'fortran_order': False, 'descr': '|u1'}", 4), "x.npy");
  ASSERT_TRUE(a.isOk()) << a.getStatus().toString();
  EXPECT_EQ(a->dtype, program::DTYPE_U8);
}

TEST(Npy, RejectionsNameTheFile) {
  struct Case {
    std::string bytes, expect;
  } cases[] = {
      {"NOTNUMPY0000", "bad magic"},
      {npyBytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8), "unsupported .npy dtype '>f4'"},
      {npyBytes("{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }", 24), "unsupported .npy dtype"},
      {npyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8), "Fortran"},
      {npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 8), "truncated file"},
      {npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 8), "trailing bytes"},
      {npyBytes("{'descr': '<f4', 'shape': (2,), }", 8), "needs the keys"},
      {npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8), "unexpected or repeated key 'x'"},
      {npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 8), "non-negative"},
      {npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999, 99999999999999), }", 8), "too large"},
      {npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,) }junk", 8), "trailing characters"},
  };
  for (const auto &c : cases) {
    auto a = parseNpy(c.bytes, "bad.npy");
    ASSERT_FALSE(a.isOk()) << c.expect;
    std::string msg = a.getStatus().toString();
    EXPECT_NE(msg.find("bad.npy"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
  }
  auto missing = readNpy(tempPath("does-not-exist.npy"));
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.getStatus().toString().find("does-not-exist.npy"), std::string::npos);
}

TEST(Npy, MutationFuzzNeverCrashes) {
  std::string good = npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
  std::mt19937 rng(7);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = good;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 3) {
      case 0: s[rng() % s.size()] = static_cast<char>(rng()); break;
      case 1: s.resize(rng() % (s.size() + 1)); if (s.empty()) s = "x"; break;
      default: s.insert(rng() % s.size(), 1, "{}(),:' 0123456789<fi\n"[rng() % 22]); break;
      }
    }
    auto a = parseNpy(s, "fuzz.npy");
    if (a.isOk()) {
      ++accepted;
      EXPECT_EQ(a->bytes.size(), static_cast<size_t>(a->numel()) * dtypeSize(a->dtype));
    } else {
      EXPECT_NE(a.getStatus().toString().find("fuzz.npy"), std::string::npos);
    }
  }
  EXPECT_LT(accepted, 20000); // most mutations must be rejected
}

TEST(DataLoader, TokenWindowsAndNextTokenLabels) {
  std::vector<uint16_t> tokens(5000);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<uint16_t>(i * 3 % 65536);
  std::string path = tempPath("tokens.bin");
  writeFile(path, std::string(reinterpret_cast<char *>(tokens.data()), tokens.size() * 2));
  auto loader = openTokenFile(path, DataFormat::TokensU16, 1, 0);
  ASSERT_TRUE(loader.isOk()) << loader.getStatus().toString();
  std::vector<int64_t> ids(4 * 8), labels(4 * 8);
  Tensor in{program::DTYPE_I64, {4, 8}, ids.data()}, lab{program::DTYPE_I64, {4, 8}, labels.data()};
  ASSERT_TRUE((*loader)->fill(&in, "input_ids", &lab, "labels", 0).isOk());
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 8; ++t) {
      EXPECT_EQ(ids[b * 8 + t] % 3, 0);
      EXPECT_EQ(labels[b * 8 + t], ids[b * 8 + t] + 3); // the next token
      if (t > 0)
        EXPECT_EQ(ids[b * 8 + t], ids[b * 8 + t - 1] + 3); // a contiguous window
    }
  std::vector<int64_t> first = ids;
  ASSERT_TRUE((*loader)->fill(&in, "input_ids", &lab, "labels", 1).isOk());
  EXPECT_NE(first, ids); // a new batch per iteration
  // Another stream (replica) sees other windows, the same stream the same.
  auto other = openTokenFile(path, DataFormat::TokensU16, 1, 1);
  auto same = openTokenFile(path, DataFormat::TokensU16, 1, 0);
  ASSERT_TRUE(other.isOk() && same.isOk());
  std::vector<int64_t> o(32), sm(32);
  Tensor to{program::DTYPE_I64, {4, 8}, o.data()}, ts{program::DTYPE_I64, {4, 8}, sm.data()};
  ASSERT_TRUE((*other)->fill(&to, "input_ids", nullptr, "", 0).isOk());
  ASSERT_TRUE((*same)->fill(&ts, "input_ids", nullptr, "", 0).isOk());
  EXPECT_NE(o, first);
  EXPECT_EQ(sm, first);
  // Shape errors name the input and the file.
  std::vector<float> f(8);
  Tensor bad{program::DTYPE_F32, {2, 4}, f.data()};
  Status s = (*loader)->fill(&bad, "input_ids", nullptr, "", 0);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("'input_ids'"), std::string::npos) << s.toString();
  EXPECT_NE(s.toString().find(path), std::string::npos) << s.toString();
  std::vector<int64_t> big(2 * 6000);
  Tensor tooLong{program::DTYPE_I64, {2, 6000}, big.data()};
  s = (*loader)->fill(&tooLong, "input_ids", nullptr, "", 0);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("5000 tokens"), std::string::npos) << s.toString();
  // An odd byte count is not a uint16 token file.
  writeFile(path + ".odd", "abc");
  auto odd = openTokenFile(path + ".odd", DataFormat::TokensU16, 1, 0);
  ASSERT_FALSE(odd.isOk());
  EXPECT_NE(odd.getStatus().toString().find(".odd"), std::string::npos);
}

TEST(DataLoader, NpyImagesAndLabels) {
  std::vector<float> images(5 * 2 * 3);
  std::vector<int64_t> labels(5);
  for (int n = 0; n < 5; ++n) {
    labels[n] = 10 + n;
    for (int k = 0; k < 6; ++k)
      images[n * 6 + k] = static_cast<float>(n * 100 + k);
  }
  std::string ip = tempPath("images.npy"), lp = tempPath("labels.npy");
  ASSERT_TRUE(writeNpy(ip, Tensor{program::DTYPE_F32, {5, 2, 3}, images.data()}).isOk());
  ASSERT_TRUE(writeNpy(lp, Tensor{program::DTYPE_I64, {5}, labels.data()}).isOk());
  auto loader = openNpyArrays(ip, lp, 3, 0);
  ASSERT_TRUE(loader.isOk()) << loader.getStatus().toString();
  std::vector<float> x(4 * 6);
  std::vector<int32_t> y(4);
  Tensor tx{program::DTYPE_F32, {4, 2, 3}, x.data()}, ty{program::DTYPE_I32, {4}, y.data()};
  ASSERT_TRUE((*loader)->fill(&tx, "images", &ty, "labels", 0).isOk());
  for (int b = 0; b < 4; ++b) {
    int n = y[b] - 10;
    ASSERT_GE(n, 0);
    ASSERT_LT(n, 5);
    for (int k = 0; k < 6; ++k)
      EXPECT_EQ(x[b * 6 + k], static_cast<float>(n * 100 + k)); // image matches its label
  }
  Tensor wrong{program::DTYPE_F32, {4, 3, 2}, x.data()};
  Status s = (*loader)->fill(&wrong, "images", nullptr, "", 0);
  ASSERT_FALSE(s.isOk());
  std::string msg = s.toString();
  EXPECT_NE(msg.find("'images'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(ip), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected [4x2x3], got [4x3x2]"), std::string::npos) << msg;
  // Labels of another length than the samples are rejected at open.
  ASSERT_TRUE(writeNpy(lp, Tensor{program::DTYPE_I64, {4}, labels.data()}).isOk());
  auto mismatch = openNpyArrays(ip, lp, 3, 0);
  ASSERT_FALSE(mismatch.isOk());
  EXPECT_NE(mismatch.getStatus().toString().find(lp), std::string::npos);
}
