//===- StatusTest.cpp - Status and StatusOr -------------------------------===//
#include "strait/runtime/Status.h"

#include <gtest/gtest.h>

using namespace strait::rt;

TEST(Status, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.isOk());
  EXPECT_EQ(s.toString(), "ok");
}

TEST(Status, ContextNamesRankDeviceStepPeerKernel) {
  Status s = unavailable("connection reset");
  s.withRank(2).withDevice("cpu").withStep(7).withPeer(3).withKernel("MatMul 'mm'");
  EXPECT_EQ(s.toString(), "error[Unavailable] rank 2 device cpu step 7 peer 3 "
                          "kernel MatMul 'mm': connection reset");
}

TEST(Status, InnerContextWins) {
  Status s = invalidArgument("x");
  s.withStep(1).withStep(5).withRank(0).withRank(9);
  EXPECT_EQ(s.getContext().step, 1);
  EXPECT_EQ(s.getContext().rank, 0);
}

StatusOr<int> half(int x) {
  if (x % 2)
    return invalidArgument("odd");
  return x / 2;
}

Status quarter(int x, int &out) {
  STRAIT_ASSIGN_OR_RETURN(int h, half(x));
  STRAIT_ASSIGN_OR_RETURN(out, half(h));
  return Status::ok();
}

TEST(Status, AssignOrReturnPropagates) {
  int out = 0;
  EXPECT_TRUE(quarter(8, out).isOk());
  EXPECT_EQ(out, 2);
  Status s = quarter(6, out);
  EXPECT_EQ(s.getCode(), StatusCode::InvalidArgument);
  EXPECT_EQ(s.getMessage(), "odd");
}
