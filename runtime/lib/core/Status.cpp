//===- Status.cpp - Error values of the Strait runtime --------------------===//
//
// Formatting of Status and its context.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Status.h"

#include <sstream>

namespace strait {
namespace rt {

const char *statusCodeName(StatusCode code) {
  switch (code) {
  case StatusCode::Ok:
    return "Ok";
  case StatusCode::InvalidArgument:
    return "InvalidArgument";
  case StatusCode::Unimplemented:
    return "Unimplemented";
  case StatusCode::NotFound:
    return "NotFound";
  case StatusCode::Internal:
    return "Internal";
  case StatusCode::Unavailable:
    return "Unavailable";
  case StatusCode::DeadlineExceeded:
    return "DeadlineExceeded";
  case StatusCode::IoError:
    return "IoError";
  }
  return "Unknown";
}

Status &Status::withRank(int rank) {
  if (context.rank < 0)
    context.rank = rank;
  return *this;
}
Status &Status::withDevice(const std::string &device) {
  if (context.device.empty())
    context.device = device;
  return *this;
}
Status &Status::withStep(int step) {
  if (context.step < 0)
    context.step = step;
  return *this;
}
Status &Status::withPeer(int peer) {
  if (context.peer < 0)
    context.peer = peer;
  return *this;
}
Status &Status::withKernel(const std::string &kernel) {
  if (context.kernel.empty())
    context.kernel = kernel;
  return *this;
}

std::string Status::toString() const {
  if (isOk())
    return "ok";
  std::ostringstream os;
  os << "error[" << statusCodeName(code) << "]";
  if (context.rank >= 0)
    os << " rank " << context.rank;
  if (!context.device.empty())
    os << " device " << context.device;
  if (context.step >= 0)
    os << " step " << context.step;
  if (context.peer >= 0)
    os << " peer " << context.peer;
  if (!context.kernel.empty())
    os << " kernel " << context.kernel;
  os << ": " << message;
  return os.str();
}

Status invalidArgument(std::string m) {
  return Status(StatusCode::InvalidArgument, std::move(m));
}
Status unimplemented(std::string m) {
  return Status(StatusCode::Unimplemented, std::move(m));
}
Status notFound(std::string m) {
  return Status(StatusCode::NotFound, std::move(m));
}
Status internalError(std::string m) {
  return Status(StatusCode::Internal, std::move(m));
}
Status unavailable(std::string m) {
  return Status(StatusCode::Unavailable, std::move(m));
}
Status deadlineExceeded(std::string m) {
  return Status(StatusCode::DeadlineExceeded, std::move(m));
}
Status ioError(std::string m) {
  return Status(StatusCode::IoError, std::move(m));
}

} // namespace rt
} // namespace strait
