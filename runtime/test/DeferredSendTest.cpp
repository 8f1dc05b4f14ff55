//===- DeferredSendTest.cpp - Sends that do not wait for the peer ---------===//
//
// 1F1B programs send without waiting for the peer's receive
// (Communicator::sendDeferred): their ranks order micro-batches differently,
// and Gloo's sends are rendezvous (the bytes move once the peer posted its
// receive), so two ranks that both send before they receive wait on each
// other. These tests show that they do with blocking sends, and that
// deferred ones complete, copy the payload (the value may change at once),
// keep codecs, and run from the executor's Send/Recv steps.
//
//===----------------------------------------------------------------------===//
#include "CommTestUtil.h"
#include "strait/runtime/Backend.h"
#include "strait/runtime/Codec.h"
#include "strait/runtime/Executor.h"

#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kElems = 1 << 20; // 4 MiB: well past any socket buffer

float pattern(int rank, int64_t i) { return static_cast<float>(rank * 1000 + i % 977) * 0.25f; }

void fill(OwnedTensor &t, int rank) {
  for (int64_t i = 0; i < t.tensor.numel(); ++i)
    t.as<float>()[i] = pattern(rank, i);
}

/// Whether t holds pattern(rank, .) exactly.
bool holds(const OwnedTensor &t, int rank) {
  for (int64_t i = 0; i < t.tensor.numel(); ++i)
    if (t.tensor.as<float>()[i] != pattern(rank, i))
      return false;
  return true;
}

} // namespace

// The premise: two ranks that both send first, blocking, wait on each other
// until the timeout (what a 1F1B pipeline would do with blocking sends).
TEST(DeferredSend, BlockingCrossingSendsWaitOnEachOther) {
  std::string dir = makeTempDir("strait-deferred");
  runGlooRanks(
      2, [&](int r) { return fileStoreOptions(dir, r, 2, 1500ms); },
      [](int rank, Communicator &comm) {
        OwnedTensor out(program::DTYPE_F32, {kElems});
        fill(out, rank);
        Status s = comm.send(out.tensor, 1 - rank, 5);
        EXPECT_FALSE(s.isOk()) << "rank " << rank << ": the crossing send completed";
        EXPECT_NE(s.toString().find("rank " + std::to_string(rank)), std::string::npos)
            << s.toString();
      },
      /*barrierAfter=*/false);
}

TEST(DeferredSend, CrossingDeferredSendsCompleteAndCopyThePayload) {
  std::string dir = makeTempDir("strait-deferred");
  runGlooRanks(2, [&](int r) { return fileStoreOptions(dir, r, 2, 20000ms); },
               [](int rank, Communicator &comm) {
                 OwnedTensor out(program::DTYPE_F32, {kElems}), in(program::DTYPE_F32, {kElems});
                 int peer = 1 - rank;
                 for (int round = 0; round < 2; ++round) { // flushSends leaves a clean state
                   fill(out, rank + 2 * round);
                   Status s = comm.sendDeferred(out.tensor, peer, 5, program::CodecParams(),
                                                nullptr);
                   ASSERT_TRUE(s.isOk()) << s.toString();
                   fill(out, 99); // the send copied the payload: this does not travel
                   s = comm.recvDeferred(in.tensor, peer, 5, program::CodecParams());
                   ASSERT_TRUE(s.isOk()) << s.toString();
                   s = comm.flushSends();
                   ASSERT_TRUE(s.isOk()) << s.toString();
                   EXPECT_TRUE(holds(in, peer + 2 * round)) << "rank " << rank << " round "
                                                            << round;
                 }
               });
}

// A deferred send through a codec delivers what a blocking one delivers:
// the same encoding, the same error feedback.
TEST(DeferredSend, CodecPayloadEqualsTheBlockingSends) {
  std::string dir = makeTempDir("strait-deferred");
  program::CodecParams int8;
  int8.set_codec(program::CODEC_INT8);
  int8.set_error_feedback(true);
  runGlooRanks(2, [&](int r) { return fileStoreOptions(dir, r, 2, 20000ms); },
               [&](int rank, Communicator &comm) {
                 OwnedTensor x(program::DTYPE_F32, {4096});
                 fill(x, 3);
                 if (rank == 0) {
                   ErrorFeedback blocking, deferred;
                   for (int i = 0; i < 2; ++i) { // the second round carries a residual
                     ASSERT_TRUE(comm.sendCoded(x.tensor, 1, 6, int8, &blocking).isOk());
                     ASSERT_TRUE(comm.sendDeferred(x.tensor, 1, 7, int8, &deferred).isOk());
                     ASSERT_TRUE(comm.flushSends().isOk());
                   }
                   return;
                 }
                 OwnedTensor a(program::DTYPE_F32, {4096}), b(program::DTYPE_F32, {4096});
                 for (int i = 0; i < 2; ++i) {
                   Status s = comm.recvCoded(a.tensor, 0, 6, int8);
                   ASSERT_TRUE(s.isOk()) << s.toString();
                   s = comm.recvDeferred(b.tensor, 0, 7, int8);
                   ASSERT_TRUE(s.isOk()) << s.toString();
                   EXPECT_TRUE(sameBytes(a.tensor, b.tensor)) << "round " << i;
                   EXPECT_FALSE(sameBytes(a.tensor, x.tensor)) << "int8 is lossy here";
                 }
               });
}

// The executor's Send/Recv steps with `deferred`: both ranks send first,
// over two iterations (run() ends by flushing the sends).
TEST(DeferredSend, ExecutorRunsCrossingDeferredSteps) {
  std::string dir = makeTempDir("strait-deferred");
  runGlooRanks(2, [&](int r) { return fileStoreOptions(dir, r, 2, 20000ms); },
               [](int rank, Communicator &comm) {
                 ProgramBuilder b(rank, 2);
                 uint32_t x = b.addValue("x", program::DTYPE_F32, {kElems}, program::ROLE_INPUT);
                 uint32_t mine =
                     b.addValue("mine", program::DTYPE_F32, {kElems}, program::ROLE_ACTIVATION);
                 uint32_t theirs =
                     b.addValue("theirs", program::DTYPE_F32, {kElems}, program::ROLE_ACTIVATION);
                 uint32_t out = b.addValue("out", program::DTYPE_F32, {kElems}, program::ROLE_OUTPUT);
                 b.addKernel("Neg", {x}, {mine});
                 b.addRunStep({b.get().kernels(0).id()});
                 auto *send = b.get().add_steps()->mutable_send();
                 send->set_value_id(mine);
                 send->set_peer(1 - rank);
                 send->set_channel(10 + rank);
                 send->set_deferred(true);
                 auto *recv = b.get().add_steps()->mutable_recv();
                 recv->set_value_id(theirs);
                 recv->set_peer(1 - rank);
                 recv->set_channel(11 - rank);
                 recv->set_deferred(true);
                 b.addKernel("Neg", {theirs}, {out});
                 b.addRunStep({b.get().kernels(1).id()});
                 BackendRegistry reg;
                 registerCpuBackend(reg);
                 auto exec = Executor::create(b.get(), reg, &comm);
                 ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
                 Tensor xt = *(*exec)->getValue(x), ot = *(*exec)->getValue(out);
                 for (int it = 0; it < 2; ++it) {
                   for (int64_t i = 0; i < kElems; ++i)
                     xt.as<float>()[i] = pattern(rank + 2 * it, i);
                   Status s = (*exec)->run();
                   ASSERT_TRUE(s.isOk()) << s.toString();
                   bool same = true;
                   for (int64_t i = 0; i < kElems && same; ++i)
                     same = ot.as<float>()[i] == pattern(1 - rank + 2 * it, i);
                   EXPECT_TRUE(same) << "rank " << rank << " iteration " << it;
                 }
               });
}
