// kiln::Error: the one exception kiln throws. It carries a kind (as in
// absl/Paddle status codes) and a message naming the op, value, feed or file
// involved and what was expected.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

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

// A message written piece by piece with operator<< into one
// std::ostringstream, as `(os << ... << pieces)` would: the same text byte for
// byte, the stream's state (flags, a failed write) carried from one piece to
// the next. The stream lives out of line (src/support/error.cc), so a header
// that builds messages does not read <sstream>, and each message costs its
// caller one call per piece.
class MessageWriter {
 public:
  MessageWriter();
  ~MessageWriter();
  MessageWriter(const MessageWriter&) = delete;
  MessageWriter& operator=(const MessageWriter&) = delete;

  void put(std::string_view text);
  void put(const char* text);
  void put(const std::string& text) { put(std::string_view(text)); }
  // An array goes as the pointer it decays to (a char array as text).
  template <typename T, std::size_t N>
  void put(const T (&array)[N]) {
    put(static_cast<const T*>(array));
  }
  // Any other piece: its operator<<, called through one function per type.
  // A function (a manipulator such as std::hex) goes as its pointer.
  template <typename T>
    requires(!std::is_array_v<T>)
  void put(const T& piece) {
    if constexpr (std::is_function_v<T>) {
      T* const f = piece;
      put_with(&f, [](std::ostream& os, const void* p) { os << *static_cast<T* const*>(p); });
    } else {
      put_with(&piece, [](std::ostream& os, const void* p) { os << *static_cast<const T*>(p); });
    }
  }

  std::string str() const;

 private:
  void put_with(const void* piece, void (*write)(std::ostream&, const void*));

  std::ostringstream* os_;
};

template <typename... Args>
std::string str_cat(const Args&... args) {
  MessageWriter writer;
  (writer.put(args), ...);
  return writer.str();
}

// Throws Error(kind, message): out of line, so that each throw_error
// instantiation holds the message's pieces and one call, not the throw.
[[noreturn]] void throw_message(ErrorKind kind, const std::string& message);

}  // namespace detail

// make_error(ErrorKind::NotFound, "op '", name, "' is not registered")
template <typename... Args>
Error make_error(ErrorKind kind, const Args&... args) {
  return Error(kind, detail::str_cat(args...));
}

template <typename... Args>
[[noreturn]] void throw_error(ErrorKind kind, const Args&... args) {
  detail::throw_message(kind, detail::str_cat(args...));
}

}  // namespace kiln
