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
  ~Error() override;
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

}  // namespace kiln
