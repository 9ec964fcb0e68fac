// Warnings: a settable, process-wide handler; the default writes
// "kiln warning: …" to stderr.
#include "kiln/support/warning.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"

TEST_CASE("a warning reaches the installed handler, and an empty handler restores the default",
          "[support][warning]") {
  std::vector<std::string> got;
  kiln::WarningHandler previous =
      kiln::set_warning_handler([&](std::string_view m) { got.emplace_back(m); });
  kiln::warn("weights file 'a.weights' holds 1 tensor that the program does not have");
  kiln::WarningHandler mine = kiln::set_warning_handler(previous);
  REQUIRE(got.size() == 1);
  CHECK(got[0] == "weights file 'a.weights' holds 1 tensor that the program does not have");
  REQUIRE(mine);  // the handler replaced is handed back
  mine("again");
  CHECK(got.size() == 2);

  // The default: one line on stderr. Capture fd 2 in a temporary file.
  char path[] = "/tmp/kiln_warning_test_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  kiln::WarningHandler before = kiln::set_warning_handler({});
  kiln::warn("something to hear about");
  kiln::set_warning_handler(before);
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path);
  CHECK(text.str() == "kiln warning: something to hear about\n");
}
