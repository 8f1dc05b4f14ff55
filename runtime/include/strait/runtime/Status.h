//===- Status.h - Error values of the Strait runtime -----------*- C++ -*-===//
//
// Status and StatusOr<T>: every fallible runtime call returns one. A Status
// carries a code, a message and where known the rank, device, step and peer
// it happened at, so that a log line from one of many processes is
// self-explanatory.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_STATUS_H
#define STRAIT_RUNTIME_STATUS_H

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace strait {
namespace rt {

enum class StatusCode {
  Ok = 0,
  InvalidArgument,  // malformed program, bad attribute, shape mismatch
  Unimplemented,    // op / dtype / codec not supported by this backend
  NotFound,         // file, parameter or value missing
  Internal,         // a bug in the runtime
  Unavailable,      // peer unreachable, rendezvous failed
  DeadlineExceeded, // timeout
  IoError,          // file system
};

const char *statusCodeName(StatusCode code);

/// Where an error happened. Unknown fields stay at -1 / empty.
struct ErrorContext {
  int rank = -1;
  std::string device;
  int step = -1;
  int peer = -1;
  std::string kernel; // "MatMul 'node_3'"
};

class Status {
public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code(code), message(std::move(message)) {}

  static Status ok() { return Status(); }

  bool isOk() const { return code == StatusCode::Ok; }
  explicit operator bool() const { return isOk(); }
  StatusCode getCode() const { return code; }
  const std::string &getMessage() const { return message; }
  const ErrorContext &getContext() const { return context; }

  /// Fills the context fields that are still unknown; fields already set
  /// by an inner frame win. Returns *this for chaining.
  Status &withRank(int rank);
  Status &withDevice(const std::string &device);
  Status &withStep(int step);
  Status &withPeer(int peer);
  Status &withKernel(const std::string &kernel);

  /// "error[InvalidArgument] rank 1 device cpu step 3 kernel MatMul 'mm0':
  /// <message>"
  std::string toString() const;

private:
  StatusCode code = StatusCode::Ok;
  std::string message;
  ErrorContext context;
};

Status invalidArgument(std::string message);
Status unimplemented(std::string message);
Status notFound(std::string message);
Status internalError(std::string message);
Status unavailable(std::string message);
Status deadlineExceeded(std::string message);
Status ioError(std::string message);

/// Either a value or a non-OK Status.
template <typename T> class StatusOr {
public:
  StatusOr(Status status) : status(std::move(status)) {
    assert(!this->status.isOk() && "StatusOr built from an OK status");
  }
  StatusOr(T value) : value(std::move(value)) {}

  bool isOk() const { return status.isOk(); }
  const Status &getStatus() const { return status; }
  Status takeStatus() { return std::move(status); }

  T &operator*() { return *value; }
  const T &operator*() const { return *value; }
  T *operator->() { return &*value; }
  const T *operator->() const { return &*value; }
  T takeValue() { return std::move(*value); }

private:
  Status status;
  std::optional<T> value;
};

} // namespace rt
} // namespace strait

#define STRAIT_CONCAT_IMPL(a, b) a##b
#define STRAIT_CONCAT(a, b) STRAIT_CONCAT_IMPL(a, b)

#define STRAIT_RETURN_IF_ERROR(expr)                                           \
  do {                                                                         \
    ::strait::rt::Status straitStatus_ = (expr);                               \
    if (!straitStatus_.isOk())                                                 \
      return straitStatus_;                                                    \
  } while (0)

#define STRAIT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                           \
  auto tmp = (expr);                                                           \
  if (!tmp.isOk())                                                             \
    return tmp.takeStatus();                                                   \
  lhs = tmp.takeValue()

#define STRAIT_ASSIGN_OR_RETURN(lhs, expr)                                     \
  STRAIT_ASSIGN_OR_RETURN_IMPL(STRAIT_CONCAT(straitOr_, __LINE__), lhs, expr)

#endif // STRAIT_RUNTIME_STATUS_H
