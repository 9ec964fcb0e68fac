// DependencyBuilder on its own (seed 001 §3.3.1.1, docs/design/executor.md §3):
// the RAW / WAR / WAW cases, transitive-edge removal, implicit order chains,
// random DAGs against a brute-force closure/reduction oracle, and last_users.
#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "kiln/exec/dependency_builder.h"
#include "kiln/support/error.h"

using namespace kiln;

namespace {

using Edges = std::set<std::pair<std::uint32_t, std::uint32_t>>;

struct Access {
  std::vector<std::uint32_t> reads, writes;
  std::uint8_t flags = kOrderNone;
};

DependencyBuilder build(const std::vector<Access>& ops, std::uint32_t num_vars,
                        std::size_t budget = std::size_t(64) << 20) {
  DependencyBuilder d(static_cast<std::uint32_t>(ops.size()), num_vars);
  for (const auto& a : ops) d.add_instruction(a.reads, a.writes, a.flags);
  d.build(budget);
  return d;
}

Edges edges_of(const DependencyBuilder& d) {
  Edges e;
  for (std::uint32_t i = 0; i < d.size(); ++i)
    for (auto s : d.successors(i)) e.emplace(i, s);
  return e;
}

// ---- brute-force oracle ----
// i < j must be ordered when they touch one variable and one of them writes
// it, or when both join the same implicit order chain.
bool conflict(const Access& a, const Access& b) {
  auto has = [](const std::vector<std::uint32_t>& v, std::uint32_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  for (auto x : a.writes)
    if (has(b.reads, x) || has(b.writes, x)) return true;
  for (auto x : a.reads)
    if (has(b.writes, x)) return true;
  return (a.flags & b.flags) != 0;
}

// closure[i][j]: i must happen before j (transitively).
std::vector<std::vector<bool>> closure_of(const std::vector<Access>& ops) {
  const std::size_t n = ops.size();
  std::vector<std::vector<bool>> c(n, std::vector<bool>(n, false));
  for (std::size_t i = n; i-- > 0;)
    for (std::size_t j = i + 1; j < n; ++j)
      if (conflict(ops[i], ops[j])) {
        c[i][j] = true;
        for (std::size_t k = j + 1; k < n; ++k)
          if (c[j][k]) c[i][k] = true;
      }
  return c;
}

// The transitive reduction of a DAG given by its closure (unique).
Edges reduction_of(const std::vector<std::vector<bool>>& c) {
  const std::size_t n = c.size();
  Edges e;
  for (std::uint32_t u = 0; u < n; ++u)
    for (std::uint32_t w = u + 1; w < n; ++w) {
      if (!c[u][w]) continue;
      bool via = false;
      for (std::uint32_t v = u + 1; v < w && !via; ++v) via = c[u][v] && c[v][w];
      if (!via) e.emplace(u, w);
    }
  return e;
}

std::vector<Access> random_ops(std::mt19937& rng, std::uint32_t n, std::uint32_t vars) {
  std::vector<Access> ops(n);
  std::uniform_int_distribution<std::uint32_t> var(0, vars - 1);
  std::uniform_int_distribution<int> cnt(0, 3), pct(0, 99);
  for (auto& a : ops) {
    int nr = cnt(rng), nw = cnt(rng) % 3;
    for (int k = 0; k < nr; ++k) a.reads.push_back(var(rng));
    for (int k = 0; k < nw; ++k) a.writes.push_back(var(rng));
    if (pct(rng) < 15 && !a.reads.empty()) a.writes.push_back(a.reads[0]);  // in place
    if (pct(rng) < 8) a.flags |= kOrderRandom;
    if (pct(rng) < 4) a.flags |= kOrderSideEffect;
    if (pct(rng) < 3) a.flags |= kOrderCommunication;
  }
  return ops;
}

}  // namespace

TEST_CASE("a read after a write orders the writer before the reader (RAW)", "[exec]") {
  // A: X = …   B: … = f(X)
  auto d = build({{{}, {0}}, {{0}, {1}}}, 2);
  CHECK(edges_of(d) == Edges{{0, 1}});
  CHECK(d.num_predecessors(0) == 0);
  CHECK(d.num_predecessors(1) == 1);
}

TEST_CASE("a write after a read orders the reader before the writer (WAR)", "[exec]") {
  // p = parameter w (variable 0, never written here); A: y = f(p); B: w = z.
  auto d = build({{{0}, {1}}, {{}, {2}}, {{2}, {0}}}, 3);
  CHECK(d.reaches(0, 2));
  CHECK(edges_of(d) == Edges{{0, 2}, {1, 2}});

  // With an in-place writer: W: X = …; A: … = f(X); B: X = g_(X).
  // W→A (RAW), A→B (WAR); W→B (RAW + WAW) is implied by W→A→B and removed.
  auto d2 = build({{{}, {0}}, {{0}, {1}}, {{0}, {0}}}, 2);
  CHECK(d2.num_edges_before_reduction() == 3);
  CHECK(edges_of(d2) == Edges{{0, 1}, {1, 2}});
  CHECK(d2.num_predecessors(2) == 1);
}

TEST_CASE("a write after a write orders the writers, through the readers between them (WAW)",
          "[exec]") {
  // B1: w = a; R1, R2 read w; B2: w = b.
  auto d = build({{{}, {0}}, {{0}, {1}}, {{0}, {2}}, {{}, {0}}}, 3);
  CHECK(edges_of(d) == Edges{{0, 1}, {0, 2}, {1, 3}, {2, 3}});
  CHECK(d.reaches(0, 3));
  CHECK(d.num_predecessors(3) == 2);

  // No reader in between: the writers are ordered directly.
  auto d2 = build({{{}, {0}}, {{}, {0}}}, 1);
  CHECK(edges_of(d2) == Edges{{0, 1}});
}

TEST_CASE("two readers of one variable are not ordered", "[exec]") {
  auto d = build({{{}, {0}}, {{0}, {1}}, {{0}, {2}}}, 3);
  CHECK(edges_of(d) == Edges{{0, 1}, {0, 2}});
  CHECK_FALSE(d.reaches(1, 2));
}

TEST_CASE("transitive edges are removed: a→b→c plus a→c keeps a→b and b→c", "[exec]") {
  // a writes x and y; b reads x, writes z; c reads y and z.
  auto d = build({{{}, {0, 1}}, {{0}, {2}}, {{1, 2}, {3}}}, 4);
  CHECK(d.num_edges_before_reduction() == 3);
  CHECK(edges_of(d) == Edges{{0, 1}, {1, 2}});
  CHECK(d.num_predecessors(2) == 1);
  CHECK(d.reaches(0, 2));
}

TEST_CASE("duplicate operands give one edge", "[exec]") {
  auto d = build({{{}, {0}}, {{0, 0, 0}, {1, 1}}}, 2);
  CHECK(d.num_edges_before_reduction() == 1);
  CHECK(edges_of(d) == Edges{{0, 1}});
}

TEST_CASE("Random ops with no data relation are chained in program order", "[exec]") {
  // r1, x, r2, y, r3: three random ops, each writing its own variable.
  auto d = build({{{}, {0}, kOrderRandom},
                  {{}, {1}},
                  {{}, {2}, kOrderRandom},
                  {{}, {3}},
                  {{}, {4}, kOrderRandom}},
                 5);
  CHECK(edges_of(d) == Edges{{0, 2}, {2, 4}});
}

TEST_CASE("Communication and SideEffect ops form their own chains; an op in two joins both",
          "[exec]") {
  // c1, s1, c2+s2, s3, c3
  auto d = build({{{}, {0}, kOrderCommunication},
                  {{}, {1}, kOrderSideEffect},
                  {{}, {2}, std::uint8_t(kOrderCommunication | kOrderSideEffect)},
                  {{}, {3}, kOrderSideEffect},
                  {{}, {4}, kOrderCommunication}},
                 5);
  CHECK(edges_of(d) == Edges{{0, 2}, {1, 2}, {2, 3}, {2, 4}});
  // No edge between different chains' members that share no chain.
  auto d2 = build({{{}, {0}, kOrderRandom}, {{}, {1}, kOrderSideEffect}, {{}, {2}, kOrderCommunication}}, 3);
  CHECK(d2.num_edges() == 0);
}

TEST_CASE("the side-effect chain keeps order across unrelated data", "[exec]") {
  std::vector<Access> ops;
  for (std::uint32_t i = 0; i < 10; ++i) ops.push_back({{}, {i}, kOrderSideEffect});
  auto d = build(ops, 10);
  Edges want;
  for (std::uint32_t i = 0; i + 1 < 10; ++i) want.emplace(i, i + 1);
  CHECK(edges_of(d) == want);
}

TEST_CASE("random DAGs: reduced edges equal the brute-force transitive reduction", "[exec]") {
  std::mt19937 rng(20240601);
  int checked = 0;
  for (int seed = 0; seed < 300; ++seed) {
    std::uniform_int_distribution<std::uint32_t> size(1, 200), nvars(1, 60);
    const std::uint32_t n = size(rng), vars = nvars(rng);
    auto ops = random_ops(rng, n, vars);
    // A small budget forces many column blocks; a large one a single block.
    const std::size_t budget = seed % 3 == 0 ? 1 : seed % 3 == 1 ? 8 * n * 2 : std::size_t(64) << 20;
    auto d = build(ops, vars, budget);
    auto c = closure_of(ops);
    auto want = reduction_of(c);
    auto got = edges_of(d);
    INFO("seed " << seed << ", n " << n << ", vars " << vars << ", budget " << budget);
    REQUIRE(got == want);
    // Closure unchanged: reaches() on the reduced graph == the oracle.
    for (std::uint32_t i = 0; i < n; i += 7)
      for (std::uint32_t j = i + 1; j < n; j += 3) REQUIRE(d.reaches(i, j) == c[i][j]);
    // Static dependency counts are the reduced in-degrees.
    std::vector<std::uint32_t> indeg(n, 0);
    for (auto [u, w] : got) ++indeg[w];
    for (std::uint32_t i = 0; i < n; ++i) REQUIRE(d.num_predecessors(i) == indeg[i]);
    // Edges go forward; successor lists ascending.
    for (std::uint32_t i = 0; i < n; ++i) {
      auto s = d.successors(i);
      REQUIRE(std::is_sorted(s.begin(), s.end()));
      for (auto x : s) REQUIRE(x > i);
    }
    ++checked;
  }
  CHECK(checked == 300);
}

TEST_CASE("dense random DAGs (every op touches few shared variables) match the oracle", "[exec]") {
  // Few variables and many ops: long WAR/WAW chains, high fan-in/out.
  std::mt19937 rng(7);
  for (int seed = 0; seed < 100; ++seed) {
    std::uniform_int_distribution<std::uint32_t> size(2, 150);
    const std::uint32_t n = size(rng), vars = 1 + seed % 5;
    auto ops = random_ops(rng, n, vars);
    auto d = build(ops, vars, seed % 2 ? 1 : std::size_t(64) << 20);
    INFO("seed " << seed << ", n " << n);
    REQUIRE(edges_of(d) == reduction_of(closure_of(ops)));
  }
}

TEST_CASE("last_users keeps the users that precede no other user", "[exec]") {
  SECTION("a chain: only the last") {
    // 0 writes x; 1 reads x writes y; 2 reads x and y.
    auto d = build({{{}, {0}}, {{0}, {1}}, {{0, 1}, {2}}}, 3);
    CHECK(d.last_users(std::vector<std::uint32_t>{0, 1, 2}) == std::vector<std::uint32_t>{2});
  }
  SECTION("two unordered readers: both") {
    auto d = build({{{}, {0}}, {{0}, {1}}, {{0}, {2}}}, 3);
    CHECK(d.last_users(std::vector<std::uint32_t>{0, 1, 2}) == std::vector<std::uint32_t>{1, 2});
  }
  SECTION("a writer that nobody reads: itself") {
    auto d = build({{{}, {0}}, {{}, {1}}}, 2);
    CHECK(d.last_users(std::vector<std::uint32_t>{0}) == std::vector<std::uint32_t>{0});
    CHECK(d.last_users(std::vector<std::uint32_t>{}).empty());
  }
  SECTION("an indirect path drops a user") {
    // 0 writes x; 1 reads x writes y; 2 reads y writes z; 3 reads x and z.
    // Users of x: {0, 1, 3}; 1 ⇝ 3 through 2.
    auto d = build({{{}, {0}}, {{0}, {1}}, {{1}, {2}}, {{0, 2}, {3}}}, 4);
    CHECK(d.last_users(std::vector<std::uint32_t>{0, 1, 3}) == std::vector<std::uint32_t>{3});
  }
}

TEST_CASE("last_users on random DAGs: a sound superset of the minimal users", "[exec]") {
  std::mt19937 rng(99);
  std::size_t exact = 0, total = 0;
  for (int seed = 0; seed < 200; ++seed) {
    std::uniform_int_distribution<std::uint32_t> size(1, 120), nvars(1, 30);
    const std::uint32_t n = size(rng), vars = nvars(rng);
    auto ops = random_ops(rng, n, vars);
    auto d = build(ops, vars);
    auto c = closure_of(ops);
    for (std::uint32_t x = 0; x < vars; ++x) {
      std::vector<std::uint32_t> users;
      for (std::uint32_t i = 0; i < n; ++i) {
        const auto& a = ops[i];
        if (std::count(a.reads.begin(), a.reads.end(), x) || std::count(a.writes.begin(), a.writes.end(), x))
          users.push_back(i);
      }
      auto got = d.last_users(users);
      std::vector<std::uint32_t> minimal;
      for (auto u : users) {
        bool before_other = false;
        for (auto v : users) before_other |= (v != u && c[u][v]);
        if (!before_other) minimal.push_back(u);
      }
      INFO("seed " << seed << " variable " << x);
      REQUIRE(std::is_sorted(got.begin(), got.end()));
      for (auto u : minimal) REQUIRE(std::binary_search(got.begin(), got.end(), u));
      for (auto u : got) REQUIRE(std::binary_search(users.begin(), users.end(), u));
      // Every dropped user happens before a kept one.
      for (auto u : users)
        if (!std::binary_search(got.begin(), got.end(), u)) {
          bool covered = false;
          for (auto k : got) covered |= c[u][k];
          REQUIRE(covered);
        }
      ++total;
      exact += got == minimal;
    }
  }
  // The bounded search may keep extra users, but on graphs this small it
  // should almost always find the minimal set.
  CHECK(exact * 100 >= total * 95);
}

TEST_CASE("the dependency builder rejects bad input", "[exec]") {
  DependencyBuilder d(1, 2);
  std::vector<std::uint32_t> bad{2}, none;
  CHECK_THROWS_AS(d.add_instruction(bad, none), Error);
  CHECK_THROWS_AS(d.build(), Error);  // one instruction missing
  d.add_instruction(none, none);
  CHECK_THROWS_AS(d.add_instruction(none, none), Error);  // one too many
  d.build();
  CHECK(d.num_edges() == 0);
}

TEST_CASE("a long chain needs no reachability sweep and keeps every edge", "[exec]") {
  const std::uint32_t n = 100000;
  DependencyBuilder d(n, n);
  std::vector<std::uint32_t> r, w;
  for (std::uint32_t i = 0; i < n; ++i) {
    r.assign(i ? 1 : 0, i - 1);
    w.assign(1, i);
    d.add_instruction(r, w);
  }
  d.build();
  CHECK(d.num_edges() == n - 1);
  for (std::uint32_t i = 0; i + 1 < n; i += 997) {
    REQUIRE(d.successors(i).size() == 1);
    REQUIRE(d.successors(i)[0] == i + 1);
  }
}
