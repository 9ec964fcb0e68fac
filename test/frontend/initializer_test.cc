// Parameter initializers: fans as Paddle computes them, and the
// statistics of each initializer's numbers for a big shape, run through the
// startup program.
#include <algorithm>
#include <cmath>

#include "frontend/frontend_test_util.h"
#include "kiln/kernel/random.h"

using namespace kiln;
using namespace kiln_frontend_test;

namespace {

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};

// Makes one [256, 512] f32 parameter with `init`, runs startup, reads it back.
std::vector<float> init_values(const init::Initializer& init,
                               std::vector<std::int64_t> shape = {256, 512}) {
  Program main_prog, startup;
  Value w;
  {
    ProgramGuard guard(main_prog, startup);
    w = create_parameter("w", shape, DataType::Float32, init);
  }
  Executor exe;
  exe.run(startup);
  return exe.run(main_prog, {}, {w})[0].to_vector<float>();
}

Stats stats(const std::vector<float>& v) {
  Stats s;
  double sum = 0, sq = 0;
  s.min = s.max = v.at(0);
  for (float x : v) {
    sum += x;
    s.min = std::min<double>(s.min, x);
    s.max = std::max<double>(s.max, x);
  }
  s.mean = sum / double(v.size());
  for (float x : v) sq += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(sq / double(v.size()));
  return s;
}

// 131072 samples: the standard error of the mean is std / 362; 6 of them.
void check_uniform(const std::vector<float>& v, double low, double high) {
  Stats s = stats(v);
  const double sd = (high - low) / std::sqrt(12.0);
  INFO("low " << low << " high " << high << " mean " << s.mean << " std " << s.std);
  CHECK(s.min >= low);
  CHECK(s.max <= high);
  CHECK(s.min < low + 0.01 * (high - low));
  CHECK(s.max > high - 0.01 * (high - low));
  CHECK(std::abs(s.mean - (low + high) / 2) < 6 * sd / 362);
  CHECK(std::abs(s.std - sd) < 0.01 * sd);
}

void check_normal(const std::vector<float>& v, double mean, double sd) {
  Stats s = stats(v);
  INFO("mean " << s.mean << " std " << s.std << " expected " << mean << ", " << sd);
  CHECK(std::abs(s.mean - mean) < 6 * sd / 362);
  CHECK(std::abs(s.std - sd) < 0.01 * sd);
  CHECK(s.max > mean + 3.5 * sd);  // a normal, not a bounded distribution
  CHECK(s.min < mean - 3.5 * sd);
}

}  // namespace

TEST_CASE("fans are computed from the shape as Paddle does", "[frontend]") {
  using init::compute_fans;
  CHECK(compute_fans({}) == std::pair<double, double>{1, 1});
  CHECK(compute_fans({5}) == std::pair<double, double>{5, 5});
  CHECK(compute_fans({3, 4}) == std::pair<double, double>{3, 4});  // Linear [in, out]
  CHECK(compute_fans({8, 4, 3, 3}) == std::pair<double, double>{4 * 9, 8 * 9});  // conv
}

TEST_CASE("Constant fills every element", "[frontend]") {
  CHECK(init_values(init::Constant(-1.5), {3, 2}) == std::vector<float>(6, -1.5f));
}

TEST_CASE("Uniform and Normal initializers have the asked bounds, mean and std", "[frontend]") {
  check_uniform(init_values(init::Uniform(-2.0, 3.0)), -2.0, 3.0);
  check_normal(init_values(init::Normal(1.0, 2.0)), 1.0, 2.0);
}

TEST_CASE("Xavier initializers scale with fan_in + fan_out", "[frontend]") {
  const double fan_sum = 256 + 512;
  check_uniform(init_values(init::XavierUniform()), -std::sqrt(6 / fan_sum), std::sqrt(6 / fan_sum));
  check_uniform(init_values(init::XavierUniform(2.0)), -2 * std::sqrt(6 / fan_sum),
                2 * std::sqrt(6 / fan_sum));
  check_normal(init_values(init::XavierNormal()), 0.0, std::sqrt(2 / fan_sum));
}

TEST_CASE("Kaiming initializers scale with fan_in (or fan_out) and the ReLU gain", "[frontend]") {
  const double b_in = std::sqrt(2.0) * std::sqrt(3.0 / 256), b_out = std::sqrt(2.0) * std::sqrt(3.0 / 512);
  check_uniform(init_values(init::KaimingUniform()), -b_in, b_in);
  check_uniform(init_values(init::KaimingUniform(0.0, init::FanMode::FanOut)), -b_out, b_out);
  // a = √5: PyTorch's Linear default, U(±1/√fan_in).
  check_uniform(init_values(init::KaimingUniform(std::sqrt(5.0))), -1 / 16.0, 1 / 16.0);
  check_normal(init_values(init::KaimingNormal()), 0.0, std::sqrt(2.0 / 256));
  check_normal(init_values(init::KaimingNormal(1.0, init::FanMode::FanOut)), 0.0,
               1.0 / std::sqrt(512.0));
}

TEST_CASE("random initializers repeat after set_random_seed and with a fixed seed", "[frontend]") {
  set_random_seed(7);
  auto a = init_values(init::Uniform(), {64});
  auto b = init_values(init::Uniform(), {64});
  set_random_seed(7);
  auto c = init_values(init::Uniform(), {64});
  CHECK(a == c);
  CHECK(a != b);
  CHECK(init_values(init::Normal(0, 1, 42), {64}) == init_values(init::Normal(0, 1, 42), {64}));
}

TEST_CASE("bad initializer arguments are errors naming the initializer", "[frontend]") {
  KILN_CHECK_ERROR(init::Uniform(2.0, 1.0), InvalidArgument, {"Uniform", "low"});
  KILN_CHECK_ERROR(init::Normal(0.0, -1.0), InvalidArgument, {"Normal", "std"});
  Program main_prog, startup;
  ProgramGuard guard(main_prog, startup);
  KILN_CHECK_ERROR(create_parameter("w", {0, 0}, DataType::Float32, init::XavierUniform()),
                       InvalidArgument, {"XavierUniform", "[0, 0]"});
  CHECK(startup.block().empty());
}
