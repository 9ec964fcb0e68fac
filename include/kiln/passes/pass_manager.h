// PassManager: runs a pipeline of passes over a Program and every region
// nested in it (seed 002 §3.3), verifying the IR after each pass so that a
// pass that breaks it is named. A pipeline is built from pass objects or
// from a string of registered pass names ("dce,cse,fold,simplify"). It can
// time each pass and print the IR before or after chosen passes.
#pragma once

#include <iosfwd>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/passes/pass.h"

namespace kiln {

struct PassManagerOptions {
  // Program::verify after each pass (and once before the first): a pass
  // leaving the IR invalid is a kiln::Error naming it. A pass that changed
  // nothing (the IR epoch did not move) is not verified again.
  bool verify_each = true;
  // Time each pass (timing_report()).
  bool timing = false;
  // Print the program before / after the passes named here ("*" = every
  // pass) to `print_stream` (std::cerr when null), under a header line
  // "// -----// IR before 'cse' //----- //".
  std::set<std::string, std::less<>> print_ir_before;
  std::set<std::string, std::less<>> print_ir_after;
  std::ostream* print_stream = nullptr;
};

// Per-pass wall time of the runs of a PassManager, in pipeline order.
struct PassTimingReport {
  struct Entry {
    std::string pass;
    double ms = 0;             // summed over runs
    std::size_t runs = 0;
    std::size_t ops_erased = 0;
    std::size_t values_replaced = 0;
  };
  std::vector<Entry> entries;
  double total_ms() const;
  // A table: one line per pass, its share of the total, then the total.
  void print(std::ostream& os) const;
  std::string to_string() const;
};

class PassManager {
 public:
  explicit PassManager(PassManagerOptions options = {});
  ~PassManager();
  PassManager(PassManager&&) noexcept;
  PassManager& operator=(PassManager&&) noexcept;

  // Appends a pass.
  PassManager& add(std::unique_ptr<Pass> pass);
  // Appends the passes of a pipeline string: registered names separated by
  // commas (spaces around a name are ignored). kiln::Error (InvalidArgument)
  // for an empty pipeline entry, (NotFound) for an unknown name, listing
  // the known ones; nothing is appended then.
  PassManager& add_pipeline(std::string_view pipeline);
  // A pass manager holding `pipeline`.
  static PassManager parse(std::string_view pipeline, PassManagerOptions options = {});

  std::size_t size() const { return passes_.size(); }
  std::vector<std::string> pass_names() const;
  PassManagerOptions& options() { return options_; }

  // Runs every pass, in order, on `program`. kiln::Error (InvalidArgument)
  // when the program is invalid before the first pass; (Internal) naming the
  // pass and carrying the verifier's message when a pass left it invalid;
  // an error a pass throws goes out with the pass's name prefixed.
  void run(Program& program);
  // The same with the caller's live-out values (fetch targets): read the
  // replacements from ctx.live_out() after.
  void run(Program& program, PassContext& ctx);

  const PassTimingReport& timing_report() const { return timing_; }

 private:
  void print_ir(const Program& program, std::string_view when, const Pass& pass) const;
  bool wants(const std::set<std::string, std::less<>>& names, const Pass& pass) const;

  PassManagerOptions options_;
  std::vector<std::unique_ptr<Pass>> passes_;
  PassTimingReport timing_;
};

// Splits a pipeline string into pass names, checked against the registry
// (the errors of add_pipeline).
std::vector<std::string> parse_pipeline(std::string_view pipeline);

}  // namespace kiln
