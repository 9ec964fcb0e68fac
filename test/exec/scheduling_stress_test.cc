// Scheduling stress (issue 3 §6): ≥ 10⁴ random DAG programs — add, mul,
// relu, in-place relu_, full, uniform_random (fixed seeds and the
// process-wide generator), data ops — run at 1, 2 and 4 threads; every
// fetched value must be bit-identical to sequential mode, and stay so after
// later runs (a fetched tensor must not change under the caller).
//
// Program count: 10⁴ by default; 1000 under ThreadSanitizer (the TSan build
// runs every [exec] test, this one included, ~20× slower); the environment
// variable KILN_EXEC_STRESS_PROGRAMS overrides both.
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "exec/exec_test_util.h"
#include "kiln/kernel/random.h"

using namespace kiln;
using namespace kiln_exec_test;

namespace {

#if defined(__SANITIZE_THREAD__)
constexpr int kDefaultPrograms = 1000;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr int kDefaultPrograms = 1000;
#else
constexpr int kDefaultPrograms = 10000;
#endif
#else
constexpr int kDefaultPrograms = 10000;
#endif

int program_count() {
  if (const char* env = std::getenv("KILN_EXEC_STRESS_PROGRAMS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return kDefaultPrograms;
}

constexpr std::int64_t kLen = 8;

struct RandomProgram {
  Program program;
  std::vector<std::string> feed_names;
  std::vector<Tensor> feeds;
  std::vector<FetchTarget> fetch;
  std::string text;  // for failure messages
};

void make_program(RandomProgram& rp, std::uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  Builder b(rp.program);
  std::vector<Value> vals;
  const int num_data = pick(3);
  for (int d = 0; d < num_data; ++d) {
    std::string name = "d" + std::to_string(d);
    vals.push_back(b.create<DataOp>(name, std::vector<std::int64_t>{kLen}).result());
    rp.feed_names.push_back(name);
    std::vector<float> v(kLen);
    for (auto& x : v) x = std::uniform_real_distribution<float>(-2.f, 2.f)(rng);
    rp.feeds.push_back(Tensor::from_vector<float>(Dims({kLen}), v));
  }
  const int num_ops = 5 + pick(36);  // 5..40
  for (int i = 0; i < num_ops; ++i) {
    const int kind = vals.empty() ? pick(2) : pick(8);
    switch (kind) {
      case 0:
        vals.push_back(b.create<FullOp>(std::vector<std::int64_t>{kLen}, double(pick(7) - 3) * 0.5).result());
        break;
      case 1: {
        // Mostly fixed seeds; some draw from the process-wide generator.
        std::int64_t s = pick(4) == 0 ? 0 : 1 + pick(1000);
        vals.push_back(b.create<UniformRandomOp>(std::vector<std::int64_t>{kLen}, -1.0, 1.0, s).result());
        break;
      }
      case 2:
      case 3:
        vals.push_back(b.create<AddOp>(vals[pick(int(vals.size()))], vals[pick(int(vals.size()))]).result());
        break;
      case 4:
      case 5:
        vals.push_back(b.create<MulOp>(vals[pick(int(vals.size()))], vals[pick(int(vals.size()))]).result());
        break;
      case 6:
        vals.push_back(b.create<ReluOp>(vals[pick(int(vals.size()))]).result());
        break;
      default:
        vals.push_back(b.create<Relu_Op>(vals[pick(int(vals.size()))]).result());
        break;
    }
  }
  const int num_fetch = 1 + pick(4);
  for (int f = 0; f < num_fetch; ++f) rp.fetch.push_back(vals[pick(int(vals.size()))]);
  // Sometimes fetch a feed by name too.
  if (num_data && pick(4) == 0) rp.fetch.push_back(rp.feed_names[0]);
  rp.text = rp.program.to_string();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.dims() != b.dims()) return false;
  return a.bytes() == b.bytes() && std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

std::vector<Tensor> run_once(InterpreterCore& core, const RandomProgram& rp) {
  set_random_seed(0x5eed);
  return core.run(rp.feeds);
}

}  // namespace

TEST_CASE("stress: random DAG programs at 1, 2 and 4 threads are bit-identical to sequential",
          "[exec][stress]") {
  const int programs = program_count();
  auto q2 = std::make_shared<WorkQueue>(1);
  auto q4 = std::make_shared<WorkQueue>(3);
  Scope scope;
  int checked = 0;
  for (int n = 0; n < programs; ++n) {
    RandomProgram rp;
    make_program(rp, static_cast<std::uint32_t>(n) * 7919u + 17u);
    ExecutionConfig seq;
    seq.sequential = true;
    seq.num_threads = 1;
    InterpreterCore ref_core(rp.program, scope, rp.feed_names, rp.fetch, seq);
    const auto first = run_once(ref_core, rp);
    REQUIRE(first.size() == rp.fetch.size());
    std::vector<Tensor> ref;  // deep copies: the reference must not move either
    for (const auto& t : first) ref.push_back(t.clone());
    // Held across the later runs: must not change under us.
    std::vector<std::vector<Tensor>> held;
    for (unsigned threads : {1u, 2u, 4u}) {
      ExecutionConfig cfg;
      cfg.num_threads = threads;
      auto q = threads == 2 ? q2 : threads == 4 ? q4 : nullptr;
      InterpreterCore core(rp.program, scope, rp.feed_names, rp.fetch, cfg, q);
      for (int run = 0; run < 2; ++run) {
        auto got = run_once(core, rp);
        REQUIRE(got.size() == ref.size());
        for (std::size_t k = 0; k < ref.size(); ++k) {
          if (!same_bits(got[k], ref[k])) {
            INFO("program " << n << " threads " << threads << " run " << run << " fetch " << k << "\n"
                            << rp.text << "\nwant " << ref[k].to_string() << "\ngot " << got[k].to_string());
            FAIL("fetched value differs from sequential mode");
          }
        }
        held.push_back(std::move(got));
      }
    }
    // The sequential core again, after the others ran: same values, and the
    // tensors fetched earlier are unchanged.
    const auto again = run_once(ref_core, rp);
    for (std::size_t k = 0; k < ref.size(); ++k) REQUIRE(same_bits(again[k], ref[k]));
    held.push_back(first);
    for (const auto& h : held)
      for (std::size_t k = 0; k < ref.size(); ++k) {
        if (!same_bits(h[k], ref[k])) {
          INFO("program " << n << " fetch " << k << "\n" << rp.text);
          FAIL("a fetched tensor changed after later runs");
        }
      }
    ++checked;
  }
  CHECK(checked == programs);
}
