// kiln::Error: the one exception kiln throws, with a kind and a message.
#include "kiln/support/error.h"

#include <cstdint>
#include <iomanip>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "catch.hpp"

using kiln::Error;
using kiln::ErrorKind;

TEST_CASE("an error carries its kind and its message", "[support][error]") {
  Error e(ErrorKind::NotFound, "op 'kiln.matmul' is not registered");
  CHECK(e.kind() == ErrorKind::NotFound);
  CHECK(e.message() == "op 'kiln.matmul' is not registered");
}

TEST_CASE("what() starts with the kind's name then the message", "[support][error]") {
  Error e(ErrorKind::InvalidArgument, "feed 'x' has shape [3] but the program expects [16, 16]");
  CHECK(std::string(e.what()) ==
        "InvalidArgument: feed 'x' has shape [3] but the program expects [16, 16]");
}

TEST_CASE("make_error concatenates strings and numbers into the message", "[support][error]") {
  Error e = kiln::make_error(ErrorKind::OutOfRange, "operand ", 3, " of op '", "kiln.add",
                             "' does not exist (it has ", 2, ")");
  CHECK(e.kind() == ErrorKind::OutOfRange);
  CHECK(e.message() == "operand 3 of op 'kiln.add' does not exist (it has 2)");
}

namespace {

struct Streamable {
  int v;
};
std::ostream& operator<<(std::ostream& os, const Streamable& s) { return os << "S<" << s.v << ">"; }

// What `(os << ... << pieces)` on one std::ostringstream gives: str_cat's
// reference.
template <typename... Args>
std::string streamed(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace

TEST_CASE("str_cat writes each piece as operator<< on one stream would", "[support][error]") {
  using kiln::detail::str_cat;
  const std::string s = "text";
  const std::string_view sv = "view";
  const char* cs = "chars";
  char buf[8] = "ab\0cd";  // a char array stops at its first NUL, as a const char* does
  CHECK(str_cat("a", s, sv, cs, buf, 'c') == streamed("a", s, sv, cs, buf, 'c'));
  CHECK(str_cat("a", s, sv, cs, buf, 'c') == "atextviewcharsabc");
  const std::int8_t i8 = 65;
  const std::uint8_t u8 = 66;
  CHECK(str_cat(i8, u8, short{-3}, 7u, -8L, 9ULL, true, false) ==
        streamed(i8, u8, short{-3}, 7u, -8L, 9ULL, true, false));
  CHECK(str_cat(0.1, 1e10, 1.0 / 3, 2.5f, -0.0, 1e-7) == streamed(0.1, 1e10, 1.0 / 3, 2.5f, -0.0, 1e-7));
  CHECK(str_cat(0.1, 1e10, 2.5f) == "0.11e+102.5");
  CHECK(str_cat("[", Streamable{4}, "]") == "[S<4>]");
  CHECK(str_cat(nullptr, static_cast<const void*>(nullptr)) ==
        streamed(nullptr, static_cast<const void*>(nullptr)));
  const int ints[2] = {1, 2};  // any other array: its address, as the stream writes it
  CHECK(str_cat(ints) == streamed(ints));
  CHECK(str_cat() == "");
}

TEST_CASE("str_cat carries the stream's state from piece to piece", "[support][error]") {
  using kiln::detail::str_cat;
  CHECK(str_cat(std::hex, 255, " ", 16) == "ff 10");
  CHECK(str_cat(std::setw(4), 7, "|", std::setprecision(3), 3.14159) == "   7|3.14");
  // A null const char* fails the stream: nothing after it is written.
  const char* null_text = nullptr;
  CHECK(str_cat("a", null_text, "b", 1) == streamed("a", null_text, "b", 1));
  CHECK(str_cat("a", null_text, "b", 1) == "a");
}

TEST_CASE("throw_error throws a kiln::Error that is also a std::runtime_error",
          "[support][error]") {
  CHECK_THROWS_AS(kiln::throw_error(ErrorKind::Internal, "boom"), Error);
  CHECK_THROWS_AS(kiln::throw_error(ErrorKind::Internal, "boom"), std::runtime_error);
  CHECK_THROWS_WITH(kiln::throw_error(ErrorKind::DataLoss, "weights file '", "w.bin",
                                      "' is truncated"),
                    "DataLoss: weights file 'w.bin' is truncated");
  try {
    kiln::throw_error(ErrorKind::Cancelled, "run ", 7, " was cancelled");
    FAIL("throw_error returned");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Cancelled);
    CHECK(e.message() == "run 7 was cancelled");
  }
}

TEST_CASE("every error kind has its own name", "[support][error]") {
  const ErrorKind kinds[] = {ErrorKind::InvalidArgument,    ErrorKind::NotFound,
                             ErrorKind::AlreadyExists,      ErrorKind::OutOfRange,
                             ErrorKind::Unimplemented,      ErrorKind::Internal,
                             ErrorKind::PreconditionNotMet, ErrorKind::DataLoss,
                             ErrorKind::Unavailable,        ErrorKind::Cancelled,
                             ErrorKind::DeadlineExceeded,   ErrorKind::Aborted};
  std::set<std::string> names;
  for (ErrorKind k : kinds) {
    auto name = std::string(kiln::to_string(k));
    CHECK(name != "Unknown");
    CHECK_FALSE(name.empty());
    names.insert(name);
  }
  CHECK(names.size() == std::size(kinds));
  CHECK(kiln::to_string(ErrorKind::PreconditionNotMet) == "PreconditionNotMet");
}

TEST_CASE("an empty message still names the kind", "[support][error]") {
  Error e(ErrorKind::Unimplemented, "");
  CHECK(e.message().empty());
  CHECK(std::string(e.what()) == "Unimplemented: ");
}

TEST_CASE("a copied error owns its text: copies made for other threads share no memory with the original",
          "[support][error]") {
  const Error original(ErrorKind::Aborted, "the rendezvous was aborted");
  const Error copied(original);
  Error assigned(ErrorKind::Internal, "x");
  assigned = original;
  for (const Error* e : {&copied, static_cast<const Error*>(&assigned)}) {
    CHECK(std::string(e->what()) == original.what());
    CHECK(e->kind() == ErrorKind::Aborted);
    CHECK(e->message() == original.message());
    CHECK(static_cast<const void*>(e->what()) != static_cast<const void*>(original.what()));
  }
}
