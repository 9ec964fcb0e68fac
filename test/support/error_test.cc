// kiln::Error: the one exception kiln throws, with a kind and a message.
#include "kiln/support/error.h"

#include <set>
#include <stdexcept>
#include <string>

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
