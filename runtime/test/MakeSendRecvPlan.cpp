//===- MakeSendRecvPlan.cpp - A 2-rank plan that streams one tensor -------===//
//
// strait-test-sendrecv-plan DIR FLOATS: writes DIR/plan.pb and two programs:
// rank 0 sends a f32[FLOATS] parameter-free tensor (Relu of an input) to
// rank 1 on channel 1 every iteration; rank 1 receives it and outputs its
// sum as "loss". Used by wan-netns-smoke.sh to measure achieved throughput
// over a shaped link, without the compiler.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <cstdlib>
#include <iostream>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

int main(int argc, char **argv) {
  if (argc != 3) {
    std::cerr << "usage: strait-test-sendrecv-plan DIR FLOATS\n";
    return 2;
  }
  std::string dir = argv[1];
  int64_t n = std::atoll(argv[2]);
  if (n <= 0) {
    std::cerr << "strait-test-sendrecv-plan: FLOATS must be positive\n";
    return 2;
  }
  ProgramBuilder r0(0, 2);
  uint32_t x = r0.addValue("x", program::DTYPE_F32, {n}, program::ROLE_INPUT);
  uint32_t a0 = r0.addValue("act", program::DTYPE_F32, {n}, program::ROLE_ACTIVATION);
  r0.addKernel("Relu", {x}, {a0});
  r0.addRunStep();
  auto *send = r0.get().add_steps()->mutable_send();
  send->set_value_id(a0);
  send->set_peer(1);
  send->set_channel(1);

  ProgramBuilder r1(1, 2);
  uint32_t a1 = r1.addValue("act", program::DTYPE_F32, {n}, program::ROLE_ACTIVATION);
  uint32_t loss = r1.addValue("loss", program::DTYPE_F32, {}, program::ROLE_OUTPUT);
  auto *recv = r1.get().add_steps()->mutable_recv();
  recv->set_value_id(a1);
  recv->set_peer(0);
  recv->set_channel(1);
  setInt(r1.addKernel("ReduceSum", {a1}, {loss}), "keepdims", 0);
  r1.addRunStep();

  program::PlanManifest m;
  m.set_format_version(program::FORMAT_VERSION_1);
  m.set_world_size(2);
  m.set_rendezvous(program::RENDEZVOUS_FILE);
  m.set_rendezvous_address("rendezvous");
  for (int r = 0; r < 2; ++r) {
    auto *e = m.add_ranks();
    e->set_rank(r);
    e->set_device("cpu");
    e->set_address("127.0.0.1");
    e->set_program_file("rank" + std::to_string(r) + ".program.pb");
  }
  for (auto s : {writeMessage(r0.get(), dir + "/rank0.program.pb"),
                 writeMessage(r1.get(), dir + "/rank1.program.pb"),
                 writeMessage(m, dir + "/plan.pb")})
    if (!s.isOk()) {
      std::cerr << "strait-test-sendrecv-plan: " << s.toString() << "\n";
      return 1;
    }
  return 0;
}
