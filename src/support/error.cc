// kiln::Error's constructors, the names of the error kinds, and the stream
// that str_cat writes messages into.
#include "kiln/support/error.h"

#include <sstream>

namespace kiln {

std::string_view to_string(ErrorKind kind) {
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

Error::Error(ErrorKind kind, const std::string& message)
    : std::runtime_error(std::string(to_string(kind)) + ": " + message),
      kind_(kind),
      message_(message) {}

Error::Error(const Error& other)
    : std::runtime_error(std::string(other.what())), kind_(other.kind_), message_(other.message_) {}

Error& Error::operator=(const Error& other) {
  if (this != &other) {
    std::runtime_error::operator=(std::runtime_error(std::string(other.what())));
    kind_ = other.kind_;
    message_ = other.message_;
  }
  return *this;
}

Error::~Error() = default;

namespace detail {

MessageWriter::MessageWriter() : os_(new std::ostringstream) {}

MessageWriter::~MessageWriter() { delete os_; }

void MessageWriter::put(std::string_view text) { *os_ << text; }

void MessageWriter::put(const char* text) { *os_ << text; }

void MessageWriter::put_with(const void* piece, void (*write)(std::ostream&, const void*)) {
  write(*os_, piece);
}

std::string MessageWriter::str() const { return os_->str(); }

void throw_message(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

}  // namespace detail

}  // namespace kiln
