// libFuzzer target for kiln's JSON program loader. Contract (DESIGN.md,
// "bad input never crashes"): load_program_json either returns a Program or
// throws kiln::Error. Anything else — another exception, a crash, a sanitizer
// report, a hang — is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "kiln/io/json.h"
#include "kiln/support/error.h"

// The library is built with meson's b_sanitize=undefined, which recovers: a
// UB report inside it would print and carry on, and libFuzzer would not record
// it. Make every sanitizer report fatal so each one is a finding.
extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    kiln::Program program = kiln::load_program_json(text);
    (void)program;
  } catch (const kiln::Error&) {
    // Rejected with a kiln::Error: the expected outcome for bad input.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "json_loader_fuzz: load_program_json threw a non-kiln exception: %s\n",
                 e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "json_loader_fuzz: load_program_json threw a non-std exception\n");
    std::abort();
  }
  return 0;
}
