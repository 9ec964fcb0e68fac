// kiln::Error: the one exception kiln throws. It carries a kind (as in
// absl/Paddle status codes) and a message naming the op, value, feed or file
// involved and what was expected.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kiln {

enum class ErrorKind {
  InvalidArgument,
  NotFound,
  AlreadyExists,
  OutOfRange,
  Unimplemented,
  Internal,
  PreconditionNotMet,
  DataLoss,
  Unavailable,
  Cancelled,
  DeadlineExceeded,
  // A rendezvous (or a step sharing one) was aborted because another part of
  // the step failed: not a cancellation asked for by the caller.
  Aborted,
};

std::string_view to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message);
  // A copy owns its text: std::runtime_error's copy shares a reference-
  // counted string whose count lives in libstdc++, where ThreadSanitizer
  // does not see it, so an error copied to another thread (a step's first
  // error, a done callback's record) would read as a race when either copy
  // goes. Errors are copied on failure paths only.
  Error(const Error& other);
  Error& operator=(const Error& other);
  ErrorKind kind() const noexcept { return kind_; }
  // The message without the "<Kind>: " prefix that what() carries.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorKind kind_;
  std::string message_;
};

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// make_error(ErrorKind::NotFound, "op '", name, "' is not registered")
template <typename... Args>
Error make_error(ErrorKind kind, const Args&... args) {
  return Error(kind, detail::str_cat(args...));
}

template <typename... Args>
[[noreturn]] void throw_error(ErrorKind kind, const Args&... args) {
  throw make_error(kind, args...);
}

inline std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument: return "InvalidArgument";
    case ErrorKind::NotFound: return "NotFound";
    case ErrorKind::AlreadyExists: return "AlreadyExists";
    case ErrorKind::OutOfRange: return "OutOfRange";
    case ErrorKind::Unimplemented: return "Unimplemented";
    case ErrorKind::Internal: return "Internal";
    case ErrorKind::PreconditionNotMet: return "PreconditionNotMet";
    case ErrorKind::DataLoss: return "DataLoss";
    case ErrorKind::Unavailable: return "Unavailable";
    case ErrorKind::Cancelled: return "Cancelled";
    case ErrorKind::DeadlineExceeded: return "DeadlineExceeded";
    case ErrorKind::Aborted: return "Aborted";
  }
  return "Unknown";
}

inline Error::Error(ErrorKind kind, const std::string& message)
    : std::runtime_error(std::string(to_string(kind)) + ": " + message),
      kind_(kind),
      message_(message) {}

inline Error::Error(const Error& other)
    : std::runtime_error(std::string(other.what())), kind_(other.kind_), message_(other.message_) {}

inline Error& Error::operator=(const Error& other) {
  if (this != &other) {
    std::runtime_error::operator=(std::runtime_error(std::string(other.what())));
    kind_ = other.kind_;
    message_ = other.message_;
  }
  return *this;
}

}  // namespace kiln
