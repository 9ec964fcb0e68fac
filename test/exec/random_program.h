// Random DAG programs for the executor stress tests: add, mul,
// relu, in-place relu_, full, uniform_random (fixed seeds and the
// process-wide generator) over data ops, with a few fetched values; and a
// bit-exact tensor comparison. Shared by scheduling_stress_test.cc and
// stream_exec_test.cc.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/ir/builder.h"

namespace kiln_exec_test {

using namespace kiln;

inline constexpr std::int64_t kLen = 8;

struct RandomProgram {
  Program program;
  std::vector<std::string> feed_names;
  std::vector<Tensor> feeds;
  std::vector<FetchTarget> fetch;
  std::string text;  // for failure messages
};

inline void make_program(RandomProgram& rp, std::uint32_t seed) {
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

using kiln_test::same_bits;

}  // namespace kiln_exec_test
