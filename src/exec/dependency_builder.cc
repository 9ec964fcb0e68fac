#include "kiln/exec/dependency_builder.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "kiln/support/error.h"

namespace kiln {

namespace {
constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
}

DependencyBuilder::DependencyBuilder(std::uint32_t num_instructions, std::uint32_t num_variables)
    : n_(num_instructions), num_vars_(num_variables) {
  access_off_.reserve(num_instructions + 1);
  access_off_.push_back(0);
  num_reads_.reserve(num_instructions);
  flags_.reserve(num_instructions);
}

std::uint32_t DependencyBuilder::add_instruction(std::span<const std::uint32_t> reads,
                                                 std::span<const std::uint32_t> writes,
                                                 std::uint8_t order_flags) {
  auto i = static_cast<std::uint32_t>(num_reads_.size());
  if (i >= n_)
    throw_error(ErrorKind::OutOfRange, "dependency builder sized for ", n_,
                " instructions got one more");
  for (auto v : reads)
    if (v >= num_vars_)
      throw_error(ErrorKind::OutOfRange, "instruction ", i, " reads variable ", v, " of ", num_vars_);
  for (auto v : writes)
    if (v >= num_vars_)
      throw_error(ErrorKind::OutOfRange, "instruction ", i, " writes variable ", v, " of ", num_vars_);
  access_.insert(access_.end(), reads.begin(), reads.end());
  access_.insert(access_.end(), writes.begin(), writes.end());
  access_off_.push_back(static_cast<std::uint32_t>(access_.size()));
  num_reads_.push_back(static_cast<std::uint32_t>(reads.size()));
  flags_.push_back(order_flags);
  return i;
}

void DependencyBuilder::build(std::size_t memory_budget) {
  if (num_reads_.size() != n_)
    throw_error(ErrorKind::PreconditionNotMet, "dependency builder expected ", n_,
                " instructions, got ", num_reads_.size());
  // ---- edges: RAW, WAR, WAW over variables, then implicit order chains ----
  std::vector<std::uint32_t> last_writer(num_vars_, kNone);
  // Readers of each variable since its last write, as a linked list in one array.
  std::vector<std::uint32_t> reader_head(num_vars_, kNone);
  std::vector<std::uint32_t> reader_node, reader_next;
  std::vector<std::uint32_t> stamp(n_, kNone);  // stamp[from] == to: edge already added
  std::uint32_t last_in_chain[3] = {kNone, kNone, kNone};
  edges_.clear();
  edges_.reserve(access_.size() + n_);
  auto add_edge = [&](std::uint32_t from, std::uint32_t to) {
    if (from == kNone || from == to || stamp[from] == to) return;
    stamp[from] = to;
    edges_.emplace_back(from, to);
  };
  for (std::uint32_t i = 0; i < n_; ++i) {
    const std::uint32_t* a = access_.data() + access_off_[i];
    const std::uint32_t nr = num_reads_[i];
    const std::uint32_t nw = access_off_[i + 1] - access_off_[i] - nr;
    for (std::uint32_t k = 0; k < nr; ++k) add_edge(last_writer[a[k]], i);  // RAW
    for (std::uint32_t k = 0; k < nw; ++k) {
      std::uint32_t v = a[nr + k];
      for (std::uint32_t r = reader_head[v]; r != kNone; r = reader_next[r])
        add_edge(reader_node[r], i);  // WAR
      add_edge(last_writer[v], i);    // WAW (removed later when a reader sits between)
    }
    for (int c = 0; c < 3; ++c)
      if (flags_[i] & (1u << c)) {
        add_edge(last_in_chain[c], i);
        last_in_chain[c] = i;
      }
    for (std::uint32_t k = 0; k < nr; ++k) {
      std::uint32_t v = a[k];
      bool also_written = false;
      for (std::uint32_t w = 0; w < nw; ++w) also_written |= a[nr + w] == v;
      if (also_written) continue;
      reader_node.push_back(i);
      reader_next.push_back(reader_head[v]);
      reader_head[v] = static_cast<std::uint32_t>(reader_node.size() - 1);
    }
    for (std::uint32_t k = 0; k < nw; ++k) {
      last_writer[a[nr + k]] = i;
      reader_head[a[nr + k]] = kNone;
    }
  }
  edges_before_ = edges_.size();

  // ---- unreduced CSR (successors ascending: edges are grouped by `to`) ----
  all_succ_off_.assign(n_ + 1, 0);
  indeg_all_.assign(n_, 0);
  for (auto [f, t] : edges_) {
    ++all_succ_off_[f + 1];
    ++indeg_all_[t];
  }
  for (std::uint32_t i = 0; i < n_; ++i) all_succ_off_[i + 1] += all_succ_off_[i];
  all_succ_.resize(edges_.size());
  {
    std::vector<std::uint32_t> fill(all_succ_off_.begin(), all_succ_off_.end() - 1);
    for (auto [f, t] : edges_) all_succ_[fill[f]++] = t;  // `to` ascending within each list
  }
  edges_.clear();
  edges_.shrink_to_fit();
  reduce(memory_budget);
}

// Edge u→w is redundant iff another successor v of u reaches w. Only edges
// with outdeg(u) ≥ 2, w ≠ min succ(u) and indeg(w) ≥ 2 can be; their heads
// w are the "targets". For each block of target columns, a sweep in reverse
// program order computes, per node, the set of block targets it reaches.
void DependencyBuilder::reduce(std::size_t memory_budget) {
  std::vector<std::uint32_t> col(n_, kNone);
  const std::vector<std::uint32_t> targets = reduction_targets(col);
  std::vector<std::uint8_t> redundant(all_succ_.size(), 0);
  if (!targets.empty()) mark_redundant_edges(targets, col, memory_budget, redundant);
  build_reduced_csr(redundant);
}

// The heads w of edges u→w that may be redundant (outdeg(u) ≥ 2, w not u's
// smallest successor, indeg(w) ≥ 2), ascending; col[w] = w's index among them.
std::vector<std::uint32_t> DependencyBuilder::reduction_targets(std::vector<std::uint32_t>& col) const {
  const std::uint32_t n = n_;
  std::vector<std::uint32_t> targets;
  std::vector<std::uint8_t> is_target(n, 0);
  for (std::uint32_t u = 0; u < n; ++u) {
    std::uint32_t b = all_succ_off_[u], e = all_succ_off_[u + 1];
    if (e - b < 2) continue;
    for (std::uint32_t k = b + 1; k < e; ++k)
      if (indeg_all_[all_succ_[k]] >= 2) is_target[all_succ_[k]] = 1;
  }
  for (std::uint32_t w = 0; w < n; ++w)
    if (is_target[w]) {
      col[w] = static_cast<std::uint32_t>(targets.size());
      targets.push_back(w);
    }
  return targets;
}

// Block by block of target columns (within the memory budget), the reverse
// sweep computing which block targets each node reaches, and the reduction
// at each node with several successors.
void DependencyBuilder::mark_redundant_edges(const std::vector<std::uint32_t>& targets,
                                             const std::vector<std::uint32_t>& col,
                                             std::size_t memory_budget,
                                             std::vector<std::uint8_t>& redundant) const {
  const std::uint32_t n = n_;
  // Smallest predecessor of each target bounds how far down a block's sweep goes.
  std::vector<std::uint32_t> min_pred(n, kNone);
  for (std::uint32_t u = n; u-- > 0;)
    for (std::uint32_t k = all_succ_off_[u]; k < all_succ_off_[u + 1]; ++k)
      min_pred[all_succ_[k]] = u;
  const std::size_t total_words = (targets.size() + 63) / 64;
  std::size_t words = std::max<std::size_t>(1, memory_budget / (8 * std::size_t(n)));
  words = std::min(words, total_words);
  std::vector<std::uint64_t> mask;
  std::vector<std::uint8_t> nz(n, 0);
  std::vector<std::uint64_t> acc(words);
  for (std::size_t c0 = 0; c0 < targets.size(); c0 += words * 64) {
    const std::size_t c1 = std::min(targets.size(), c0 + words * 64);
    const std::size_t W = (c1 - c0 + 63) / 64;
    const std::uint32_t hi = targets[c1 - 1];
    std::uint32_t lo = hi;
    for (std::size_t c = c0; c < c1; ++c) lo = std::min(lo, min_pred[targets[c]]);
    mask.assign(std::size_t(hi - lo + 1) * W, 0);
    std::fill(nz.begin() + lo, nz.begin() + hi + 1, 0);
    auto in_block = [&](std::uint32_t w) { return col[w] != kNone && col[w] >= c0 && col[w] < c1; };
    for (std::uint32_t v = hi + 1; v-- > lo;) {
      std::uint64_t* mv = mask.data() + std::size_t(v - lo) * W;
      const std::uint32_t b = all_succ_off_[v], e = all_succ_off_[v + 1];
      bool any = false;
      for (std::uint32_t k = b; k < e; ++k) {
        std::uint32_t s = all_succ_[k];
        if (s > hi) break;  // ascending: nothing further can reach the block
        if (in_block(s)) {
          std::size_t bit = col[s] - c0;
          mv[bit / 64] |= std::uint64_t(1) << (bit % 64);
          any = true;
        }
        if (nz[s]) {
          const std::uint64_t* ms = mask.data() + std::size_t(s - lo) * W;
          for (std::size_t w = 0; w < W; ++w) mv[w] |= ms[w];
          any = true;
        }
      }
      nz[v] = any;
      if (e - b < 2 || !any) continue;
      // Reduction at v: w is redundant if another successor reaches it.
      std::fill(acc.begin(), acc.begin() + W, 0);
      bool acc_any = false;
      for (std::uint32_t k = b; k < e; ++k) {
        std::uint32_t s = all_succ_[k];
        if (s > hi) break;
        if (!nz[s]) continue;
        const std::uint64_t* ms = mask.data() + std::size_t(s - lo) * W;
        for (std::size_t w = 0; w < W; ++w) acc[w] |= ms[w];
        acc_any = true;
      }
      if (!acc_any) continue;
      for (std::uint32_t k = b; k < e; ++k) {
        std::uint32_t s = all_succ_[k];
        if (s > hi) break;
        if (!in_block(s)) continue;
        std::size_t bit = col[s] - c0;
        if (acc[bit / 64] >> (bit % 64) & 1u) redundant[k] = 1;
      }
    }
  }
}

// The successor lists without the redundant edges, and the dependency counts.
void DependencyBuilder::build_reduced_csr(const std::vector<std::uint8_t>& redundant) {
  const std::uint32_t n = n_;
  succ_off_.assign(n + 1, 0);
  dep_count_.assign(n, 0);
  succ_.clear();
  succ_.reserve(all_succ_.size());
  for (std::uint32_t u = 0; u < n; ++u) {
    for (std::uint32_t k = all_succ_off_[u]; k < all_succ_off_[u + 1]; ++k)
      if (!redundant[k]) {
        succ_.push_back(all_succ_[k]);
        ++dep_count_[all_succ_[k]];
      }
    succ_off_[u + 1] = static_cast<std::uint32_t>(succ_.size());
  }
}

bool DependencyBuilder::reaches(std::uint32_t from, std::uint32_t to) const {
  if (from >= to) return false;
  std::vector<std::uint8_t> seen(to - from + 1, 0);
  std::vector<std::uint32_t> stack{from};
  while (!stack.empty()) {
    std::uint32_t v = stack.back();
    stack.pop_back();
    for (std::uint32_t s : successors(v)) {
      if (s == to) return true;
      if (s < to && !seen[s - from]) {
        seen[s - from] = 1;
        stack.push_back(s);
      }
    }
  }
  return false;
}

std::vector<std::uint32_t> DependencyBuilder::last_users(std::span<const std::uint32_t> users) const {
  std::vector<std::uint32_t> out;
  if (users.empty()) return out;
  const std::uint32_t last = users.back();
  auto is_user = [&](std::uint32_t x) { return std::binary_search(users.begin(), users.end(), x); };
  for (std::size_t k = 0; k + 1 < users.size(); ++k) {
    std::uint32_t u = users[k];
    if (u == users[k + 1]) continue;  // duplicate
    bool precedes = false;
    for (std::uint32_t j = all_succ_off_[u]; j < all_succ_off_[u + 1] && !precedes; ++j) {
      std::uint32_t s = all_succ_[j];
      if (s > last) break;
      precedes = is_user(s);
    }
    if (!precedes) out.push_back(u);
  }
  // Few candidates left: check each against the later users by a search
  // bounded to a few dozen nodes (a search that runs long keeps the
  // candidate — still correct, it only costs a counter decrement).
  if (!out.empty() && out.size() <= 16) {
    if (visit_stamp_.size() != n_) visit_stamp_.assign(n_, 0);
    std::vector<std::uint32_t> kept;
    std::vector<std::uint32_t> stack;
    for (std::uint32_t u : out) {
      const std::uint32_t gen = ++visit_gen_;
      bool precedes = false;
      stack.assign(1, u);
      int budget = 64;
      while (!stack.empty() && !precedes && budget > 0) {
        std::uint32_t v = stack.back();
        stack.pop_back();
        for (std::uint32_t s : successors(v)) {
          if (s > last || --budget <= 0) break;
          if (is_user(s)) {
            precedes = true;
            break;
          }
          if (visit_stamp_[s] != gen) {
            visit_stamp_[s] = gen;
            stack.push_back(s);
          }
        }
      }
      if (!precedes) kept.push_back(u);
    }
    out.swap(kept);
  }
  out.push_back(last);
  return out;
}

}  // namespace kiln
