// libFuzzer target for kiln's ONNX importer. Contract (DESIGN.md, "bad
// input never crashes"): import_model_from_bytes either returns an
// ImportedModel or throws kiln::Error. Anything else — another exception, a
// crash, a sanitizer report, a hang — is a bug. An imported model's
// programs are verified, and when it is small and bounded (no loops, every
// result of static dims and few elements) run once: the startup program,
// then the main one on zeros of the declared shapes; running may reject it
// with a kiln::Error too, never otherwise.
//
// No model folder is given, so external data is always an error and no
// file is read. libonnx and protobuf are not instrumented.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/onnx/import.h"
#include "kiln/support/error.h"

// Every sanitizer report in the (recovering) library is fatal: a finding.
extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }

namespace {

constexpr std::int64_t kMaxElements = 1 << 14;  // per result, when running

// Whether every op of `block` (and its regions) is safe to run here: no
// loop, results of static dims with at most kMaxElements elements.
bool bounded(const kiln::Block& block) {
  for (kiln::Operation* op = block.front(); op; op = op->next_in_block()) {
    if (op->isa<kiln::WhileOp>()) return false;
    for (std::uint32_t i = 0; i < op->num_results(); ++i) {
      const kiln::Type t = op->result_type(i);
      if (!kiln::is_shaped(t)) return false;
      std::int64_t n = 1;
      for (auto d : kiln::shaped_dims(t)) {
        if (d < 0 || d > kMaxElements) return false;
        n *= d;
        if (n > kMaxElements) return false;
      }
    }
    for (std::uint32_t r = 0; r < op->num_regions(); ++r)
      for (kiln::Block* b : op->region(r))
        if (!bounded(*b)) return false;
  }
  return true;
}

void import_and_run(std::string_view bytes) {
  kiln::onnx::ImportedModel m = kiln::onnx::import_model_from_bytes(bytes, "fuzz input");
  m.startup.verify();
  m.main.verify();
  if (!bounded(m.main.block()) || !bounded(m.startup.block())) return;
  kiln::FeedMap feed;
  for (kiln::Operation* op = m.main.block().front(); op; op = op->next_in_block())
    if (auto d = kiln::DataOp::dyn_cast(op))
      feed[d.attrs().name] = kiln::Tensor::zeros(kiln::Dims(d.attrs().shape), d.attrs().dtype);
  std::vector<kiln::FetchTarget> fetch(m.outputs.begin(), m.outputs.end());
  kiln::Executor exe;
  exe.run(m.startup);
  exe.run(m.main, feed, fetch);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    import_and_run(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const kiln::Error&) {
    // Rejected with a kiln::Error: the expected outcome for bad input.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnx_import_fuzz: a non-kiln exception: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "onnx_import_fuzz: a non-std exception\n");
    std::abort();
  }
  return 0;
}
