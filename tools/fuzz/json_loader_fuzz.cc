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
