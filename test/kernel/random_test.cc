// Tests of the random kernels — uniform_random, gaussian_random, dropout:
// the same seed gives the same numbers and another seed other numbers; seed 0
// draws from the process-wide generator that set_random_seed resets; sample
// mean and variance are within tolerance; dropout's mask and scaling follow
// upscale_in_train; bad attributes are errors naming the op.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernel/kernel_test_util.h"
#include "kiln/kernel/random.h"

using namespace kiln;
using kiln_test::build_op;
using kiln_test::run_op;

namespace {

using I64s = std::vector<std::int64_t>;

template <typename T>
std::vector<T> uniform(const I64s& shape, double lo, double hi, std::int64_t seed,
                       DataType dt = data_type_of<T>) {
  return run_op<UniformRandomOp>({}, shape, lo, hi, seed, dt).out().template to_vector<T>();
}
template <typename T>
std::vector<T> gaussian(const I64s& shape, double mean, double std, std::int64_t seed,
                        DataType dt = data_type_of<T>) {
  return run_op<GaussianRandomOp>({}, shape, mean, std, seed, dt).out().template to_vector<T>();
}

template <typename T>
void mean_var(const std::vector<T>& v, double* mean, double* var) {
  double s = 0, s2 = 0;
  for (T x : v) s += x;
  *mean = s / v.size();
  for (T x : v) s2 += (x - *mean) * (x - *mean);
  *var = s2 / (v.size() - 1);
}

}  // namespace

TEST_CASE("random ops with one seed give the same numbers, with another seed other numbers", "[kernel]") {
  CHECK(uniform<float>({64}, -1, 1, 7) == uniform<float>({64}, -1, 1, 7));
  CHECK(uniform<float>({64}, -1, 1, 7) != uniform<float>({64}, -1, 1, 8));
  CHECK(uniform<double>({3, 5}, 0, 2, 99) == uniform<double>({3, 5}, 0, 2, 99));
  CHECK(gaussian<float>({65}, 0, 1, 7) == gaussian<float>({65}, 0, 1, 7));
  CHECK(gaussian<float>({65}, 0, 1, 7) != gaussian<float>({65}, 0, 1, 8));
  CHECK(gaussian<double>({4, 4}, 1, 2, -5) == gaussian<double>({4, 4}, 1, 2, -5));

  Tensor x = kiln_test::filled<float>({128}, 1, 2);
  auto a = run_op<DropoutOp>({x}, 0.5, false, std::int64_t{11});
  auto b = run_op<DropoutOp>({x}, 0.5, false, std::int64_t{11});
  auto c = run_op<DropoutOp>({x}, 0.5, false, std::int64_t{12});
  CHECK(a.out(1).to_vector<bool>() == b.out(1).to_vector<bool>());
  CHECK(a.out(0).to_vector<float>() == b.out(0).to_vector<float>());
  CHECK(a.out(1).to_vector<bool>() != c.out(1).to_vector<bool>());
}

TEST_CASE("random numbers are a function of the seed and the element index only", "[kernel]") {
  // Counter-based: a longer tensor starts with the shorter one's numbers,
  // whatever its shape, and the f64 kernel draws the same uniforms as f32.
  auto shortv = uniform<double>({10}, 0, 1, 42);
  auto longv = uniform<double>({4, 25}, 0, 1, 42);
  CHECK(std::vector<double>(longv.begin(), longv.begin() + 10) == shortv);
  auto g5 = gaussian<double>({5}, 0, 1, 3), g8 = gaussian<double>({8}, 0, 1, 3);
  CHECK(std::vector<double>(g8.begin(), g8.begin() + 5) == g5);
  auto f = uniform<float>({10}, 0, 1, 42);
  for (std::size_t i = 0; i < f.size(); ++i) CHECK(f[i] == Approx(shortv[i]).margin(1e-7));
  // The documented generator: element i of seed s is random_uniform01(random_key(s), i).
  CHECK(shortv[3] == random_uniform01(random_key(42), 3));
}

TEST_CASE("seed 0 draws new numbers each run, reproducibly after set_random_seed", "[kernel]") {
  set_random_seed(1234);
  auto u1 = uniform<float>({32}, 0, 1, 0);
  auto u2 = uniform<float>({32}, 0, 1, 0);
  auto g1 = gaussian<float>({32}, 0, 1, 0);
  CHECK(u1 != u2);
  set_random_seed(1234);
  CHECK(uniform<float>({32}, 0, 1, 0) == u1);
  CHECK(uniform<float>({32}, 0, 1, 0) == u2);
  CHECK(gaussian<float>({32}, 0, 1, 0) == g1);
  set_random_seed(4321);
  CHECK(uniform<float>({32}, 0, 1, 0) != u1);
  // A fixed seed does not advance the process-wide generator.
  set_random_seed(1234);
  (void)uniform<float>({32}, 0, 1, 5);
  CHECK(uniform<float>({32}, 0, 1, 0) == u1);
  set_random_seed(kDefaultRandomSeed);
}

TEST_CASE("uniform_random stays in [min, max) with the uniform mean and variance", "[kernel]") {
  const int n = 200000;
  for (auto [lo, hi] : {std::pair{-1.0, 1.0}, std::pair{2.0, 5.0}, std::pair{-0.01, 0.01}}) {
    INFO("[" << lo << ", " << hi << ")");
    auto v = uniform<float>({n}, lo, hi, 17);
    auto [mn, mx] = std::minmax_element(v.begin(), v.end());
    CHECK(*mn >= static_cast<float>(lo));
    CHECK(*mx < static_cast<float>(hi));
    double mean, var;
    mean_var(v, &mean, &var);
    double w = hi - lo;
    CHECK(mean == Approx((lo + hi) / 2).margin(0.01 * w));
    CHECK(var == Approx(w * w / 12).epsilon(0.02));
  }
  auto d = uniform<double>({n}, 0, 1, 23);
  double mean, var;
  mean_var(d, &mean, &var);
  CHECK(mean == Approx(0.5).margin(0.005));
  CHECK(var == Approx(1.0 / 12).epsilon(0.02));
  // min == max: every element is that value.
  CHECK(uniform<float>({4}, 3, 3, 1) == std::vector<float>(4, 3.0f));
}

TEST_CASE("gaussian_random has the requested mean and standard deviation", "[kernel]") {
  const int n = 200001;  // odd: the last element uses half a Box-Muller pair
  auto v = gaussian<float>({n}, 3.0, 2.0, 5);
  double mean, var;
  mean_var(v, &mean, &var);
  CHECK(mean == Approx(3.0).margin(0.02));
  CHECK(std::sqrt(var) == Approx(2.0).epsilon(0.01));
  // About 68.3 % within one std, 95.4 % within two.
  int in1 = 0, in2 = 0;
  for (float x : v) {
    in1 += std::abs(x - 3.0) < 2.0;
    in2 += std::abs(x - 3.0) < 4.0;
  }
  CHECK(in1 / double(n) == Approx(0.6827).margin(0.005));
  CHECK(in2 / double(n) == Approx(0.9545).margin(0.005));
  auto d = gaussian<double>({n}, -1.0, 0.5, 6);
  mean_var(d, &mean, &var);
  CHECK(mean == Approx(-1.0).margin(0.01));
  CHECK(std::sqrt(var) == Approx(0.5).epsilon(0.01));
  CHECK(gaussian<float>({3}, 1.5, 0.0, 1) == std::vector<float>(3, 1.5f));  // std 0
}

TEST_CASE("dropout zeroes dropped elements and scales kept ones by 1 / (1 - p)", "[kernel]") {
  const int n = 100000;
  for (double p : {0.1, 0.5, 0.9}) {
    INFO("p = " << p);
    Tensor x = kiln_test::filled<float>({n / 100, 100}, 0.5, 1.5, 3);
    auto run = run_op<DropoutOp>({x}, p, false, std::int64_t{77});
    const Tensor& out = run.out(0);
    const Tensor& mask = run.out(1);
    CHECK(mask.dtype() == DataType::Bool);
    CHECK(mask.dims() == x.dims());
    auto xv = x.to_vector<float>(), ov = out.to_vector<float>();
    auto mv = mask.to_vector<bool>();
    int kept = 0;
    bool ok = true;
    for (int i = 0; i < n; ++i) {
      float want = mv[i] ? xv[i] * static_cast<float>(1.0 / (1.0 - p)) : 0.0f;
      ok = ok && ov[i] == Approx(want).epsilon(1e-6);
      kept += mv[i];
    }
    CHECK(ok);
    CHECK(kept / double(n) == Approx(1 - p).margin(0.01));
    // The expectation is kept: mean(out) ≈ mean(x).
    double mo, mx, var;
    mean_var(ov, &mo, &var);
    mean_var(xv, &mx, &var);
    CHECK(mo == Approx(mx).epsilon(p < 0.8 ? 0.02 : 0.05));
  }
  Tensor xd = kiln_test::filled<double>({1000}, 1, 2);
  auto d = run_op<DropoutOp>({xd}, 0.25, false, std::int64_t{5});
  auto xv = xd.to_vector<double>(), ov = d.out(0).to_vector<double>();
  auto mv = d.out(1).to_vector<bool>();
  for (int i = 0; i < 1000; ++i) CHECK(ov[i] == Approx(mv[i] ? xv[i] / 0.75 : 0.0));
}

TEST_CASE("dropout is the identity with an all-true mask when is_test or p = 0", "[kernel]") {
  Tensor x = kiln_test::filled<float>({7, 9});
  for (auto [p, is_test] : {std::pair{0.5, true}, std::pair{0.0, false}, std::pair{0.0, true}}) {
    auto run = run_op<DropoutOp>({x}, p, is_test, std::int64_t{0});
    CHECK(run.out(0).to_vector<float>() == x.to_vector<float>());
    CHECK_FALSE(run.out(0).shares_buffer_with(x));  // a copy: out is a value of its own
    CHECK(run.out(1).to_vector<bool>() == std::vector<bool>(63, true));
  }
}

TEST_CASE("random ops reject bad attributes, naming the op", "[kernel]") {
  Program p;
  Builder b(p);
  KILN_CHECK_ERROR(b.create<UniformRandomOp>(I64s{2}, 1.0, -1.0), InvalidArgument,
                     {"kiln.uniform_random", "min <= max"});
  KILN_CHECK_ERROR(b.create<UniformRandomOp>(I64s{2}, 0.0, 1.0, 0, DataType::Int32), InvalidArgument,
                     {"kiln.uniform_random", "floating"});
  KILN_CHECK_ERROR(b.create<GaussianRandomOp>(I64s{2}, 0.0, -1.0), InvalidArgument,
                     {"kiln.gaussian_random", "std"});
  KILN_CHECK_ERROR(b.create<GaussianRandomOp>(I64s{2}, NAN, 1.0), InvalidArgument,
                     {"kiln.gaussian_random", "mean"});
  KILN_CHECK_ERROR(b.create<GaussianRandomOp>(I64s{2}, 0.0, 1.0, 0, DataType::Int64),
                     InvalidArgument, {"kiln.gaussian_random", "floating"});
  KILN_CHECK_ERROR(b.create<GaussianRandomOp>(I64s{-3}), InvalidArgument,
                     {"kiln.gaussian_random", "-3"});
  for (double bad : {1.0, -0.1, 1.5, double(NAN)}) {
    KILN_CHECK_ERROR(build_op<DropoutOp>(p, {{DataType::Float32, {4}}}, bad), InvalidArgument,
                       {"kiln.dropout", "[0, 1)"});
  }
  KILN_CHECK_ERROR(build_op<DropoutOp>(p, {{DataType::Int64, {4}}}, 0.5), InvalidArgument,
                     {"kiln.dropout", "floating"});
  // A shape left unknown cannot run.
  auto unknown = [](Builder& bb, const std::vector<Value>&) {
    return bb.create<UniformRandomOp>(I64s{-1, 2}).operation();
  };
  KILN_CHECK_ERROR(kiln_test::run_kernel({}, unknown), InvalidArgument,
                     {"kiln.uniform_random", "shape"});
}

TEST_CASE("random ops and dropout carry the Random trait; dropout is also ReadOnly", "[kernel]") {
  Program p;
  Builder b(p);
  CHECK(b.create<UniformRandomOp>(I64s{2})->has_trait<Random>());
  CHECK(b.create<GaussianRandomOp>(I64s{2})->has_trait<Random>());
  Operation* d = build_op<DropoutOp>(p, {{DataType::Float32, {4}}}, 0.5);
  CHECK(d->has_trait<Random>());
  CHECK(d->has_trait<ReadOnly>());
  CHECK(d->num_results() == 2);
  CHECK(d->result_type(1) == Type(TensorType::get(DataType::Bool, {4})));
}

TEST_CASE("the generator's log and sincos stay within a few ulp of libm's", "[kernel]") {
  // random_normal_pair uses portable_log / portable_sincos_2pi (the same bits
  // on a CUDA device): check them against glibc over the generator's own u.
  double worst_log = 0, worst_trig = 0;
  for (std::uint64_t i = 0; i < 200000; ++i) {
    const double u = static_cast<double>((random_bits(42, i) >> 11) + 1) * 0x1.0p-53;  // (0, 1]
    const double want = std::log(u);
    if (want != 0) worst_log = std::max(worst_log, std::abs(portable_log(u) - want) / -want);
    const double v = u - 0x1.0p-53;  // [0, 1)
    double s, c;
    portable_sincos_2pi(v, s, c);
    const long double a = 2 * 3.141592653589793238462643383279503L * v;
    worst_trig = std::max({worst_trig, static_cast<double>(std::abs(s - std::sin(a))),
                           static_cast<double>(std::abs(c - std::cos(a)))});
  }
  CHECK(worst_log < 4e-16);   // under 2 ulp
  CHECK(worst_trig < 4e-16);  // |sin|, |cos| <= 1: under 2 ulp of 1
  CHECK(portable_log(1.0) == 0);
  CHECK(portable_log(0x1.0p-53) == Approx(-53 * std::log(2.0)).epsilon(1e-15));
  double s, c;
  portable_sincos_2pi(0.0, s, c);
  CHECK((s == 0 && c == 1));
  portable_sincos_2pi(0.25, s, c);
  CHECK((s == 1 && c == 0));
}
