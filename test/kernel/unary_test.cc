// Reference tests of the unary ops (relu, gelu, tanh, sigmoid, exp, log,
// sqrt, square, abs, neg, the trigonometric and hyperbolic functions, erf,
// floor, ceil, round, sign, scale), the in-place relu_ / sqrt_, and assign,
// cast and full: each kernel against plain loops over std:: math.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel/kernel_test_util.h"
#include "kiln/support/half.h"

using namespace kiln;
using kiln_test::run_op;

namespace {

template <typename OpT, typename T, typename F, typename... Args>
void check_unary(F f, double lo, double hi, double rtol, Args... args) {
  for (const Dims& d : {Dims{}, Dims{1}, Dims{7}, Dims{3, 5}, Dims{2, 3, 17}, Dims{0, 4}}) {
    INFO(OpT::name << " " << to_string(data_type_of<T>) << " [" << d.to_string() << "]");
    Tensor x;
    if constexpr (std::is_integral_v<T>) {
      std::vector<T> v;
      for (double u : kiln_test::filled<double>(d, lo, hi, 7).to_vector<double>())
        v.push_back(static_cast<T>(std::floor(u)));
      x = Tensor::from_vector<T>(d, v);
    } else {
      x = kiln_test::filled<T>(d, lo, hi, 7);
    }
    auto xv = x.to_vector<T>();
    std::vector<T> want;
    for (T v : xv) want.push_back(static_cast<T>(f(v)));
    auto r = run_op<OpT>({x}, args...);
    CHECK(r.out().dims() == d);
    CHECK_FALSE(r.out().shares_buffer_with(x));
    kiln_test::check_close<T>(r.out(), want, rtol, rtol);
    CHECK(x.to_vector<T>() == xv);  // the input is untouched
  }
}

template <typename OpT, typename F, typename... Args>
void check_float_unary(F f, double lo = -3, double hi = 3, Args... args) {
  check_unary<OpT, float>([&](float v) { return static_cast<float>(f(double{v})); }, lo, hi, 2e-6,
                          args...);
  check_unary<OpT, double>(f, lo, hi, 1e-14, args...);
}

template <typename OpT, typename F, typename... Args>
void check_int_unary(F f, Args... args) {
  check_unary<OpT, std::int32_t>([&](std::int32_t v) { return f(v); }, -50, 50, 0, args...);
  check_unary<OpT, std::int64_t>([&](std::int64_t v) { return f(v); }, -50, 50, 0, args...);
}

}  // namespace

TEST_CASE("relu, tanh, sigmoid, exp, log and sqrt match std math in f32 and f64", "[kernel]") {
  check_float_unary<ReluOp>([](double v) { return v > 0 ? v : 0.0; });
  check_int_unary<ReluOp>([](auto v) { return v > 0 ? v : decltype(v)(0); });
  check_float_unary<TanhOp>([](double v) { return std::tanh(v); });
  check_float_unary<SigmoidOp>([](double v) { return 1.0 / (1.0 + std::exp(-v)); }, -20, 20);
  check_float_unary<ExpOp>([](double v) { return std::exp(v); });
  check_float_unary<LogOp>([](double v) { return std::log(v); }, 0.01, 100);
  check_float_unary<SqrtOp>([](double v) { return std::sqrt(v); }, 0, 100);
}

TEST_CASE("square, abs and neg match plain loops for floats and integers", "[kernel]") {
  check_float_unary<SquareOp>([](double v) { return v * v; });
  check_int_unary<SquareOp>([](auto v) { return v * v; });
  check_float_unary<AbsOp>([](double v) { return std::fabs(v); });
  check_int_unary<AbsOp>([](auto v) { return v < 0 ? -v : v; });
  check_float_unary<NegOp>([](double v) { return -v; });
  check_int_unary<NegOp>([](auto v) { return -v; });
}

TEST_CASE("the trigonometric and hyperbolic ops and erf match std math in f32 and f64", "[kernel][unary]") {
  check_float_unary<SinOp>([](double v) { return std::sin(v); });
  check_float_unary<CosOp>([](double v) { return std::cos(v); });
  check_float_unary<TanOp>([](double v) { return std::tan(v); }, -1.2, 1.2);
  check_float_unary<AsinOp>([](double v) { return std::asin(v); }, -1, 1);
  check_float_unary<AcosOp>([](double v) { return std::acos(v); }, -1, 1);
  check_float_unary<AtanOp>([](double v) { return std::atan(v); });
  check_float_unary<SinhOp>([](double v) { return std::sinh(v); });
  check_float_unary<CoshOp>([](double v) { return std::cosh(v); });
  check_float_unary<AsinhOp>([](double v) { return std::asinh(v); });
  check_float_unary<AcoshOp>([](double v) { return std::acosh(v); }, 1, 10);
  check_float_unary<AtanhOp>([](double v) { return std::atanh(v); }, -0.99, 0.99);
  check_float_unary<ErfOp>([](double v) { return std::erf(v); });
}

TEST_CASE("floor, ceil and round (half to even) round floats; sign gives -1, 0 or 1", "[kernel][unary]") {
  check_float_unary<FloorOp>([](double v) { return std::floor(v); });
  check_float_unary<CeilOp>([](double v) { return std::ceil(v); });
  auto r = run_op<RoundOp>({Tensor::from_vector<float>(Dims{6}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.6f})});
  CHECK(r.out().to_vector<float>() == std::vector<float>{0, 2, 2, -0, -2, 3});
  auto s = run_op<SignOp>({Tensor::from_vector<float>(
      Dims{4}, {-2.5f, 0.0f, 3.0f, std::numeric_limits<float>::quiet_NaN()})});
  const auto sv = s.out().to_vector<float>();
  CHECK(sv[0] == -1);
  CHECK(sv[1] == 0);
  CHECK(sv[2] == 1);
  CHECK(std::isnan(sv[3]));
  check_int_unary<SignOp>([](auto v) { return decltype(v)(v > 0 ? 1 : v < 0 ? -1 : 0); });
}

TEST_CASE("gelu uses erf by default and the tanh form when approximate", "[kernel]") {
  check_float_unary<GeluOp>([](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); },
                            -5, 5, false);
  check_float_unary<GeluOp>(
      [](double v) {
        return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      },
      -5, 5, true);
  // torch.nn.functional.gelu(1.0) and gelu(1.0, approximate='tanh').
  auto one = Tensor::from_vector<double>({1}, {1.0});
  CHECK(run_op<GeluOp>({one}).out().to_vector<double>()[0] == Approx(0.8413447460685429).epsilon(1e-14));
  CHECK(run_op<GeluOp>({one}, true).out().to_vector<double>()[0] ==
        Approx(0.8411919906082768).epsilon(1e-14));
}

TEST_CASE("f32 gelu and gelu_grad (vectorized erfc and exp) stay within 2e-6 of the f64 "
          "formulas far into both tails",
          "[kernel][unary]") {
  check_float_unary<GeluOp>([](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); },
                            -15, 15, false);
  auto x = kiln_test::filled<float>({4099}, -15, 15, 3);
  auto d = kiln_test::filled<float>({4099}, -2, 2, 4);
  auto r = run_op<GradOf<GeluOp>>({x, d}, false);
  auto xv = x.to_vector<float>(), dv = d.to_vector<float>();
  std::vector<float> want;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i];
    const double cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    want.push_back(static_cast<float>(dv[i] * (cdf + v * pdf)));
  }
  kiln_test::check_close<float>(r.out(), want, 2e-6, 2e-6);
}

TEST_CASE("f32 tanh and sigmoid (vectorized polynomials) stay within a few ulp of the f64 "
          "functions, tiny and huge arguments included",
          "[kernel][unary]") {
  auto x = kiln_test::filled<float>({4099}, -30, 30, 5);
  std::vector<float> xv = x.to_vector<float>();
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-7f, 3e-4f, 0.6249f, 0.625f, -0.6251f, 9.0f, -50.0f, 200.0f})
    xv.push_back(v);
  x = Tensor::from_vector<float>({static_cast<std::int64_t>(xv.size())}, xv);
  std::vector<float> tanh_want, sigmoid_want;
  for (float v : xv) {
    tanh_want.push_back(static_cast<float>(std::tanh(double(v))));
    sigmoid_want.push_back(static_cast<float>(1 / (1 + std::exp(-double(v)))));
  }
  kiln_test::check_close<float>(run_op<TanhOp>({x}).out(), tanh_want, 4e-7, 1e-30);
  kiln_test::check_close<float>(run_op<SigmoidOp>({x}).out(), sigmoid_want, 4e-7, 1e-30);
}

TEST_CASE("f32 sigmoid of arguments below -87 is the smallest normal value it reaches, never a "
          "denormal",
          "[kernel][unary]") {
  // A denormal result would slow every multiply that reads it (SiLU's x · sigmoid(x)).
  Tensor x = Tensor::from_vector<float>({4}, {-87.5f, -100.f, -1e6f, -std::numeric_limits<float>::infinity()});
  for (float y : run_op<SigmoidOp>({x}).out().to_vector<float>()) {
    CHECK(y >= std::numeric_limits<float>::min());
    CHECK(y < 2e-38f);
  }
}

TEST_CASE("f32 sigmoid gives a value the same bits wherever it sits in a tensor, in a full vector or "
          "the tail, and keeps NaN",
          "[kernel][unary]") {
  const std::vector<float> v = kiln_test::filled<float>({48}, -20, 20, 3).to_vector<float>();
  const auto sigmoid_of = [](std::vector<float> xs) {
    const auto n = static_cast<std::int64_t>(xs.size());
    return run_op<SigmoidOp>({Tensor::from_vector<float>({n}, std::move(xs))}).out().to_vector<float>();
  };
  const std::vector<float> whole = sigmoid_of(v);
  for (std::size_t start : {0, 1, 5, 15, 16, 31})
    for (std::size_t len : {1, 5, 15, 16, 17}) {
      INFO("elements " << start << " to " << start + len);
      const std::vector<float> part = sigmoid_of({v.begin() + start, v.begin() + start + len});
      for (std::size_t i = 0; i < len; ++i)
        CHECK(std::bit_cast<std::uint32_t>(part[i]) == std::bit_cast<std::uint32_t>(whole[start + i]));
    }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> with_nan = sigmoid_of({nan, 1.0f, nan});
  CHECK(std::isnan(with_nan[0]));
  CHECK(std::fabs(with_nan[1] - 0.7310585786) < 1e-6);
  CHECK(std::isnan(with_nan[2]));
}

TEST_CASE("scale applies bias after or before scaling, as Paddle", "[kernel]") {
  check_float_unary<ScaleOp>([](double v) { return 2.5 * v + 1.5; }, -3, 3, 2.5, 1.5, true);
  check_float_unary<ScaleOp>([](double v) { return 2.5 * (v + 1.5); }, -3, 3, 2.5, 1.5, false);
  check_int_unary<ScaleOp>([](auto v) { return 3 * v + 2; }, 3.0, 2.0, true);
  check_int_unary<ScaleOp>([](auto v) { return 3 * (v + 2); }, 3.0, 2.0, false);
  // Defaults: scale 1, bias 0.
  auto x = Tensor::from_vector<float>({2}, {1.5f, -2.f});
  CHECK(run_op<ScaleOp>({x}).out().to_vector<float>() == std::vector<float>{1.5f, -2.f});
}

TEST_CASE("float-only unary ops reject integer operands naming the op", "[kernel]") {
  using kiln_test::build_op;
  Program p;
  KILN_CHECK_ERROR((build_op<ExpOp>(p, {{DataType::Int32, {2}}})), InvalidArgument,
                     {"kiln.exp", "i32"});
  KILN_CHECK_ERROR((build_op<GeluOp>(p, {{DataType::Int64, {2}}})), InvalidArgument,
                     {"kiln.gelu", "i64"});
  KILN_CHECK_ERROR((build_op<Sqrt_Op>(p, {{DataType::Int64, {2}}})), InvalidArgument,
                     {"kiln.sqrt_", "i64"});
  // An integer op with no integer kernel for the dtype: the registry names it.
  Operation* op = build_op<SquareOp>(p, {{DataType::Int8, {2}}});
  KILN_CHECK_ERROR(KernelRegistry::instance().get(*op, PlaceKind::Cpu, DataType::Int8),
                     Unimplemented, {"kiln.square", "i8"});
}

TEST_CASE("sqrt_ and relu_ write their operand's buffer in place", "[kernel]") {
  auto x = Tensor::from_vector<float>({2, 2}, {4.f, 9.f, 0.25f, 16.f});
  auto r = run_op<Sqrt_Op>({x});
  CHECK(r.outputs[0] == r.inputs[0]);  // one variable
  CHECK(r.out().shares_buffer_with(x));
  CHECK(x.to_vector<float>() == std::vector<float>{2.f, 3.f, 0.5f, 4.f});
  auto y = Tensor::from_vector<double>({3}, {-1.0, 2.0, -0.5});
  auto r2 = run_op<Relu_Op>({y});
  CHECK(r2.out().shares_buffer_with(y));
  CHECK(y.to_vector<double>() == std::vector<double>{0.0, 2.0, 0.0});
  // Traits and alias map, for the executor.
  CHECK(r.op->has_trait<Inplace>());
  CHECK_FALSE(r.op->has_trait<ReadOnly>());
  CHECK(r.op->info().impl()->inplace_map ==
        std::vector<std::pair<std::uint32_t, std::uint32_t>>{{0, 0}});
  // Given a separate output variable (no aliasing), the kernel still works.
  auto z = Tensor::from_vector<float>({2}, {4.f, 25.f});
  auto k = kiln_test::run_kernel({z}, [](Builder& b, const std::vector<Value>& v) {
    return b.create<SqrtOp>(v[0]).operation();
  });
  CHECK(k.out().to_vector<float>() == std::vector<float>{2.f, 5.f});
  CHECK(z.to_vector<float>() == std::vector<float>{4.f, 25.f});
}

TEST_CASE("sqrt_ on a vtensor is rejected: it writes its operand", "[kernel]") {
  auto v = VTensorType::get(DataType::Float32, {2});
  KILN_CHECK_ERROR(Sqrt_Op::infer_meta({v}, {}), InvalidArgument, {"kiln.sqrt_", "vtensor"});
  auto t = Sqrt_Op::infer_meta({TensorType::get(DataType::Float32, {2})}, {});
  CHECK(t[0] == Type(TensorType::get(DataType::Float32, {2})));
}

TEST_CASE("assign copies any dtype into a new buffer", "[kernel]") {
  auto f = kiln_test::filled<float>({3, 4});
  auto r = run_op<AssignOp>({f});
  CHECK(r.out().to_vector<float>() == f.to_vector<float>());
  CHECK_FALSE(r.out().shares_buffer_with(f));
  auto i = Tensor::from_vector<std::int64_t>({2}, {1, -7});
  CHECK(run_op<AssignOp>({i}).out().to_vector<std::int64_t>() == std::vector<std::int64_t>{1, -7});
  auto b = Tensor::from_vector<bool>({3}, {true, false, true});
  CHECK(run_op<AssignOp>({b}).out().to_vector<bool>() == std::vector<bool>{true, false, true});
  auto e = Tensor::empty({0, 2}, DataType::Float64);
  CHECK(run_op<AssignOp>({e}).out().dims() == Dims{0, 2});
}

TEST_CASE("cast converts between f32, f64, i8, i32, i64 and bool", "[kernel]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto f = Tensor::from_vector<float>({7}, {1.9f, -1.9f, 0.f, nan, inf, -inf, 3e9f});
  CHECK(run_op<CastOp>({f}, DataType::Int32).out().to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{1, -1, 0, 0, INT32_MAX, INT32_MIN, INT32_MAX});
  CHECK(run_op<CastOp>({f}, DataType::Int8).out().to_vector<std::int8_t>() ==
        std::vector<std::int8_t>{1, -1, 0, 0, 127, -128, 127});
  CHECK(run_op<CastOp>({f}, DataType::Bool).out().to_vector<bool>() ==
        std::vector<bool>{true, true, false, true, true, true, true});
  auto d = run_op<CastOp>({f}, DataType::Float64).out().to_vector<double>();
  CHECK(d[0] == double{1.9f});
  CHECK(std::isnan(d[3]));
  auto i = Tensor::from_vector<std::int64_t>({3}, {-5, 0, 1LL << 40});
  CHECK(run_op<CastOp>({i}, DataType::Float64).out().to_vector<double>() ==
        std::vector<double>{-5.0, 0.0, double(1LL << 40)});
  CHECK(run_op<CastOp>({i}, DataType::Int32).out().to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{-5, 0, 0});  // two's-complement truncation
  auto b = Tensor::from_vector<bool>({2}, {true, false});
  CHECK(run_op<CastOp>({b}, DataType::Float32).out().to_vector<float>() == std::vector<float>{1.f, 0.f});
  auto same = run_op<CastOp>({f}, DataType::Float32);
  CHECK_FALSE(same.out().shares_buffer_with(f));
  CHECK(same.out().to_vector<float>()[0] == 1.9f);
  using kiln_test::build_op;
  Program p;
  KILN_CHECK_ERROR((build_op<CastOp>(p, {{DataType::Float32, {2}}}, DataType::Undefined)),
                     InvalidArgument, {"kiln.cast", "undefined"});
  Operation* op = build_op<CastOp>(p, {{DataType::Int32, {-1, 2}}}, DataType::Float64);
  CHECK(op->result_type(0) == Type(TensorType::get(DataType::Float64, {-1, 2})));
}

TEST_CASE("cast saturates floats into unsigned integers and wraps integers into narrower ones",
          "[kernel]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto f = Tensor::from_vector<float>({6}, {1.9f, -1.9f, 300.f, nan, 65535.5f, 255.f});
  CHECK(run_op<CastOp>({f}, DataType::UInt8).out().to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{1, 0, 255, 0, 255, 255});
  CHECK(run_op<CastOp>({f}, DataType::UInt16).out().to_vector<std::uint16_t>() ==
        std::vector<std::uint16_t>{1, 0, 300, 0, 65535, 255});
  auto big = Tensor::from_vector<double>({3}, {4294967295.0, 4294967296.0, 1.8446744073709552e19});
  CHECK(run_op<CastOp>({big}, DataType::UInt32).out().to_vector<std::uint32_t>() ==
        std::vector<std::uint32_t>{4294967295u, 4294967295u, 4294967295u});
  CHECK(run_op<CastOp>({big}, DataType::UInt64).out().to_vector<std::uint64_t>() ==
        std::vector<std::uint64_t>{4294967295u, 4294967296u, UINT64_MAX});
  auto i = Tensor::from_vector<std::int32_t>({4}, {257, -1, 40000, -32769});
  CHECK(run_op<CastOp>({i}, DataType::UInt8).out().to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{1, 255, 64, 255});
  CHECK(run_op<CastOp>({i}, DataType::Int16).out().to_vector<std::int16_t>() ==
        std::vector<std::int16_t>{257, -1, -25536, 32767});
  auto u = Tensor::from_vector<std::uint64_t>({2}, {UINT64_MAX, 7});
  CHECK(run_op<CastOp>({u}, DataType::Float64).out().to_vector<double>() ==
        std::vector<double>{1.8446744073709552e19, 7.0});
  CHECK(run_op<CastOp>({u}, DataType::Bool).out().to_vector<bool>() == std::vector<bool>{true, true});
}

TEST_CASE("cast rounds to f16 and bf16 to nearest even and reads them back exactly", "[kernel]") {
  auto f = Tensor::from_vector<float>({5}, {1.0f, 0.1f, -65504.f, 1e6f, 3.14159f});
  Tensor h = run_op<CastOp>({f}, DataType::Float16).out();
  CHECK(h.dtype() == DataType::Float16);
  const auto* bits = static_cast<const std::uint16_t*>(h.raw_data());
  CHECK(std::vector<std::uint16_t>(bits, bits + 5) ==
        std::vector<std::uint16_t>{0x3c00, 0x2e66, 0xfbff, 0x7c00, 0x4248});
  auto back = run_op<CastOp>({h}, DataType::Float32).out().to_vector<float>();
  CHECK(back[0] == 1.0f);
  CHECK(back[1] == Approx(0.1f).epsilon(1e-3));
  CHECK(back[2] == -65504.f);
  CHECK(std::isinf(back[3]));
  CHECK(run_op<CastOp>({h}, DataType::Int32).out().to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{1, 0, -65504, INT32_MAX, 3});
  auto d = Tensor::from_vector<double>({1}, {1.0 + 0x1p-11 + 0x1p-40});  // just above a tie
  const Tensor hd = run_op<CastOp>({d}, DataType::Float16).out();
  CHECK(*static_cast<const std::uint16_t*>(hd.raw_data()) == 0x3c01);  // rounded once, from f64
  Tensor b = run_op<CastOp>({f}, DataType::BFloat16).out();
  const auto* bb = static_cast<const std::uint16_t*>(b.raw_data());
  CHECK(bb[0] == 0x3f80);
  CHECK(run_op<CastOp>({b}, DataType::Float64).out().to_vector<double>()[4] == 3.140625);
  auto u8 = Tensor::from_vector<std::uint8_t>({2}, {200, 3});
  Tensor hu = run_op<CastOp>({u8}, DataType::Float16).out();
  CHECK(run_op<CastOp>({hu}, DataType::UInt8).out().to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{200, 3});
}

TEST_CASE("cast between f32 and bf16 keeps every bit pattern's rounding, NaNs quiet, over a tensor long enough "
          "to split across threads",
          "[kernel]") {
  // Every sign and exponent, mantissas near the rounding ties, NaNs, infinities and denormals.
  std::vector<float> v;
  for (std::uint32_t top = 0; top < 512; ++top)
    for (std::uint32_t low : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0x18000u, 0xffffu, 0x12345u, 0x7fffffu})
      v.push_back(std::bit_cast<float>((top << 23) | (low & 0x7fffffu)));
  const std::int64_t n = static_cast<std::int64_t>(v.size()) * 64;
  std::vector<float> all;
  for (int r = 0; r < 64; ++r) all.insert(all.end(), v.begin(), v.end());
  const Tensor f = Tensor::from_vector<float>({n}, all);
  const Tensor b = run_op<CastOp>({f}, DataType::BFloat16).out();
  const auto* bits = static_cast<const std::uint16_t*>(b.raw_data());
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < n; ++i) wrong += bits[i] != float_to_bfloat16(all[i]);
  CHECK(wrong == 0);
  const std::vector<float> back = run_op<CastOp>({b}, DataType::Float32).out().to_vector<float>();
  std::int64_t changed = 0;
  for (std::int64_t i = 0; i < n; ++i)
    changed += std::bit_cast<std::uint32_t>(back[i]) != std::bit_cast<std::uint32_t>(bfloat16_to_float(bits[i]));
  CHECK(changed == 0);
}

TEST_CASE("full fills every supported dtype and rejects values the dtype cannot hold", "[kernel]") {
  auto run_full = [](std::vector<std::int64_t> shape, double v, DataType dt) {
    return run_op<FullOp>({}, shape, v, dt);
  };
  CHECK(run_full({2, 3}, 1.5, DataType::Float32).out().to_vector<float>() == std::vector<float>(6, 1.5f));
  CHECK(run_full({4}, -2.25, DataType::Float64).out().to_vector<double>() == std::vector<double>(4, -2.25));
  CHECK(run_full({3}, 7, DataType::Int32).out().to_vector<std::int32_t>() == std::vector<std::int32_t>(3, 7));
  CHECK(run_full({3}, -9e15, DataType::Int64).out().to_vector<std::int64_t>() ==
        std::vector<std::int64_t>(3, -9000000000000000LL));
  CHECK(run_full({2}, -128, DataType::Int8).out().to_vector<std::int8_t>() == std::vector<std::int8_t>(2, -128));
  CHECK(run_full({2}, 1, DataType::Bool).out().to_vector<bool>() == std::vector<bool>(2, true));
  CHECK(run_full({}, 3, DataType::Float32).out().dims() == Dims{});
  CHECK(run_full({0, 5}, 3, DataType::Float32).out().numel() == 0);
  KILN_CHECK_ERROR(run_full({2}, 200, DataType::Int8), InvalidArgument, {"kiln.full", "200", "i8"});
  KILN_CHECK_ERROR(run_full({2}, std::nan(""), DataType::Int32), InvalidArgument, {"kiln.full"});
  KILN_CHECK_ERROR(run_full({-1, 2}, 1, DataType::Float32), InvalidArgument,
                     {"kiln.full", "[-1, 2]"});
}
