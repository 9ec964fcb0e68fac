// DependencyBuilder: the instruction DAG of seed 001 §3.3.1.1 — read-after-
// write, write-after-read and write-after-write edges over variables,
// implicit program order among Random, Communication and SideEffect
// instructions, and removal of transitive edges. Instead of the seed's n×n
// happens-before bit matrix (1.25 GB at 10⁵ ops) it answers only the
// reachability questions the reduction asks, column block by column block,
// within a fixed memory budget (docs/design/executor.md §3.3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kiln {

// Which implicit program-order chains an instruction joins.
enum OrderFlags : std::uint8_t {
  kOrderNone = 0,
  kOrderRandom = 1,
  kOrderCommunication = 2,
  kOrderSideEffect = 4,
};

class DependencyBuilder {
 public:
  // Instructions are numbered 0..n-1 in program order; variables 0..v-1.
  DependencyBuilder(std::uint32_t num_instructions, std::uint32_t num_variables);

  // Appends the next instruction (program order) with what it reads and
  // writes (an in-place op reads and writes the same variable); returns its
  // index. Call n times before build().
  std::uint32_t add_instruction(std::span<const std::uint32_t> reads,
                                std::span<const std::uint32_t> writes,
                                std::uint8_t order_flags = kOrderNone);

  // Builds the edges and removes transitive ones. `memory_budget` caps the
  // reachability bitsets (bytes).
  void build(std::size_t memory_budget = std::size_t(64) << 20);

  std::uint32_t size() const { return n_; }
  // Successors after reduction, ascending.
  std::span<const std::uint32_t> successors(std::uint32_t i) const {
    return {succ_.data() + succ_off_[i], succ_.data() + succ_off_[i + 1]};
  }
  // Number of predecessors after reduction (the static dependency count).
  std::uint32_t num_predecessors(std::uint32_t i) const { return dep_count_[i]; }
  std::size_t num_edges() const { return succ_.size(); }
  // Edges before reduction (for statistics and tests).
  std::size_t num_edges_before_reduction() const { return edges_before_; }

  // GC (seed 001 §3.3.2): of the instructions that use a variable (sorted,
  // ascending), those that do not happen-before another of them. May keep a
  // few extra (a superset is still correct: the variable is freed when all
  // listed users are done, and every dropped user precedes a listed one).
  std::vector<std::uint32_t> last_users(std::span<const std::uint32_t> users) const;

  // Exact reachability on the reduced graph by search (tests, diagnostics).
  bool reaches(std::uint32_t from, std::uint32_t to) const;

 private:
  void reduce(std::size_t memory_budget);
  std::vector<std::uint32_t> reduction_targets(std::vector<std::uint32_t>& col) const;
  void mark_redundant_edges(const std::vector<std::uint32_t>& targets, const std::vector<std::uint32_t>& col,
                            std::size_t memory_budget, std::vector<std::uint8_t>& redundant) const;
  void build_reduced_csr(const std::vector<std::uint8_t>& redundant);

  std::uint32_t n_, num_vars_;
  // Per instruction: [reads..., writes...] flat, with offsets.
  std::vector<std::uint32_t> access_off_, access_, num_reads_;
  std::vector<std::uint8_t> flags_;

  // Unreduced edges as (from, to), grouped by `to` ascending while built.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges_;
  // Unreduced successors (CSR, ascending), kept for last_users().
  std::vector<std::uint32_t> all_succ_off_, all_succ_;
  std::vector<std::uint32_t> indeg_all_;
  // Reduced CSR.
  std::vector<std::uint32_t> succ_off_, succ_;
  std::vector<std::uint32_t> dep_count_;
  std::size_t edges_before_ = 0;
  // Scratch for last_users' bounded searches.
  mutable std::vector<std::uint32_t> visit_stamp_;
  mutable std::uint32_t visit_gen_ = 0;
};

}  // namespace kiln
