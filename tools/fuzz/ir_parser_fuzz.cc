// libFuzzer target for kiln's text IR parser. Contract (DESIGN.md, "bad input
// never crashes"): parse_program either returns a Program or throws
// kiln::Error. Anything else — another exception, a crash, a sanitizer
// report, a hang, a stack overflow on deep nesting — is a bug. A program it
// returns must also print back to text that parses to the same text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "kiln/ir/parser.h"
#include "kiln/support/error.h"

// The library is built with meson's b_sanitize=undefined, which recovers: a
// UB report inside it would print and carry on, and libFuzzer would not record
// it. Make every sanitizer report fatal so each one is a finding.
extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string printed;
  try {
    kiln::Program program = kiln::parse_program(text, "fuzz");
    printed = program.to_string();
  } catch (const kiln::Error&) {
    return 0;  // rejected with a kiln::Error: the expected outcome for bad input
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ir_parser_fuzz: parse_program threw a non-kiln exception: %s\n",
                 e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "ir_parser_fuzz: parse_program threw a non-std exception\n");
    std::abort();
  }
  // Accepted: print → parse → print must give the same text.
  try {
    std::string again = kiln::parse_program(printed, "printed").to_string();
    if (again != printed) {
      std::fprintf(stderr, "ir_parser_fuzz: the printed program reprints differently:\n%s\n---\n%s",
                   printed.c_str(), again.c_str());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ir_parser_fuzz: the printed program does not parse: %s\n%s", e.what(),
                 printed.c_str());
    std::abort();
  }
  return 0;
}
