// Reference tests of the broadcasting binary ops and add_n: each kernel
// against plain loops written here, over same-shape, scalar, row, column and
// general broadcasts, in f32 / f64 / i32 / i64 (and the other integer
// widths, f16 and bf16); mod and fmod by sign; the shifts;
// plus bad-input errors.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel/kernel_test_util.h"

using namespace kiln;
using kiln_test::run_op;

namespace {

// out[idx] = f(x[idx mod x], y[idx mod y]) by numpy rules, the slow way.
template <typename T, typename F>
std::vector<T> ref_broadcast(const Tensor& x, const Tensor& y, F f, std::vector<std::int64_t>* dims) {
  auto xd = x.dims().to_vector(), yd = y.dims().to_vector();
  std::size_t n = std::max(xd.size(), yd.size());
  xd.insert(xd.begin(), n - xd.size(), 1);
  yd.insert(yd.begin(), n - yd.size(), 1);
  std::vector<std::int64_t> od(n);
  for (std::size_t i = 0; i < n; ++i) od[i] = xd[i] == 1 ? yd[i] : xd[i];
  std::int64_t total = 1;
  for (auto d : od) total *= d;
  auto xv = x.to_vector<T>(), yv = y.to_vector<T>();
  std::vector<T> out(static_cast<std::size_t>(total));
  for (std::int64_t o = 0; o < total; ++o) {
    std::int64_t rem = o, xi = 0, yi = 0, xs = 1, ys = 1;
    for (std::size_t k = n; k-- > 0;) {
      std::int64_t idx = rem % od[k];
      rem /= od[k];
      xi += (xd[k] == 1 ? 0 : idx) * xs;
      yi += (yd[k] == 1 ? 0 : idx) * ys;
      xs *= xd[k];
      ys *= yd[k];
    }
    out[o] = f(xv[xi], yv[yi]);
  }
  if (dims) *dims = od;
  return out;
}

template <typename T>
Tensor make(const Dims& dims, std::uint32_t seed, double lo = -4, double hi = 4) {
  if constexpr (std::is_integral_v<T>) {
    auto t = kiln_test::filled<double>(dims, lo, hi, seed);
    std::vector<T> v;
    for (double d : t.to_vector<double>()) v.push_back(static_cast<T>(std::floor(d)));
    return Tensor::from_vector<T>(dims, v);
  } else {
    return kiln_test::filled<T>(dims, lo, hi, seed);
  }
}

const std::vector<std::pair<Dims, Dims>> kShapes = {
    {{3, 4}, {3, 4}},          // same shape
    {{3, 4}, {}},              // rank-0 scalar
    {{3, 4}, {1}},             // one-element
    {{}, {2, 5}},              // scalar on the left
    {{3, 4}, {4}},             // row broadcast
    {{3, 4}, {3, 1}},          // column broadcast
    {{4}, {3, 4}},             // row on the left
    {{3, 1, 5}, {1, 4, 1}},    // both broadcast
    {{2, 3, 4, 5}, {3, 1, 5}}, // higher rank, middle broadcast
    {{2, 1, 4, 1}, {2, 3, 1, 6}},
    {{1, 1, 7}, {7}},
    {{0, 3}, {3}},             // empty
    {{37, 65}, {37, 65}},      // longer than a vector
};

template <typename OpT, typename T, typename F>
void check_binary(F f, double lo = -4, double hi = 4) {
  std::uint32_t seed = 1;
  for (const auto& [xd, yd] : kShapes) {
    INFO("op " << OpT::name << " " << to_string(data_type_of<T>) << " [" << xd.to_string()
               << "] with [" << yd.to_string() << "]");
    Tensor x = make<T>(xd, seed++, lo, hi), y = make<T>(yd, seed++, lo, hi);
    std::vector<std::int64_t> od;
    auto want = ref_broadcast<T>(x, y, f, &od);
    auto run = run_op<OpT>({x, y});
    CHECK(run.out().dims().to_vector() == od);
    kiln_test::check_close<T>(run.out(), want);
  }
}

template <typename OpT, typename F>
void check_all_dtypes(F f) {
  check_binary<OpT, float>(f);
  check_binary<OpT, double>(f);
  check_binary<OpT, std::int32_t>(f);
  check_binary<OpT, std::int64_t>(f);
}

}  // namespace

TEST_CASE("add, sub and mul broadcast like numpy in every dtype", "[kernel]") {
  check_all_dtypes<AddOp>([](auto a, auto b) { return a + b; });
  check_all_dtypes<SubOp>([](auto a, auto b) { return a - b; });
  check_all_dtypes<MulOp>([](auto a, auto b) { return a * b; });
}

TEST_CASE("div divides floats and truncates integers", "[kernel]") {
  auto fdiv = [](auto a, auto b) { return a / b; };
  check_binary<DivOp, float>(fdiv, 0.5, 4);
  check_binary<DivOp, double>(fdiv, -4, -0.5);
  check_binary<DivOp, std::int32_t>(fdiv, 1, 9);
  check_binary<DivOp, std::int64_t>(fdiv, 1, 9);
  auto r = run_op<DivOp>({Tensor::from_vector<std::int32_t>({4}, {7, -7, 7, -7}),
                          Tensor::from_vector<std::int32_t>({4}, {2, 2, -2, -2})});
  CHECK(r.out().to_vector<std::int32_t>() == std::vector<std::int32_t>{3, -3, -3, 3});
}

TEST_CASE("integer division by zero is an error naming the op, and MIN / -1 does not trap", "[kernel]") {
  auto x = Tensor::from_vector<std::int64_t>({3}, {1, 2, 3});
  auto y = Tensor::from_vector<std::int64_t>({3}, {1, 0, 3});
  KILN_CHECK_ERROR(run_op<DivOp>({x, y}), InvalidArgument, {"kiln.div", "zero"});
  auto m = Tensor::from_vector<std::int32_t>({1}, {INT32_MIN});
  auto r = run_op<DivOp>({m, Tensor::from_vector<std::int32_t>({1}, {-1})});
  CHECK(r.out().to_vector<std::int32_t>()[0] == INT32_MIN);  // wraps, as two's complement
  // Float division by zero is IEEE: inf.
  auto f = run_op<DivOp>({Tensor::from_vector<float>({1}, {1.f}), Tensor::from_vector<float>({1}, {0.f})});
  CHECK(std::isinf(f.out().to_vector<float>()[0]));
}

TEST_CASE("maximum and minimum broadcast and let NaN win", "[kernel]") {
  check_all_dtypes<MaximumOp>([](auto a, auto b) { return a > b ? a : b; });
  check_all_dtypes<MinimumOp>([](auto a, auto b) { return a < b ? a : b; });
  const float nan = std::nanf("");
  auto x = Tensor::from_vector<float>({3}, {nan, 1.f, 2.f});
  auto y = Tensor::from_vector<float>({3}, {0.f, nan, 1.f});
  auto mx = run_op<MaximumOp>({x, y}).out().to_vector<float>();
  auto mn = run_op<MinimumOp>({x, y}).out().to_vector<float>();
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mx[1]));
  CHECK(mx[2] == 2.f);
  CHECK(std::isnan(mn[0]));
  CHECK(std::isnan(mn[1]));
  CHECK(mn[2] == 1.f);
}

TEST_CASE("pow raises floats elementwise with broadcasting", "[kernel]") {
  auto p = [](auto a, auto b) { return std::pow(a, b); };
  check_binary<PowOp, float>(p, 0.1, 3);
  check_binary<PowOp, double>(p, 0.1, 3);
  auto r = run_op<PowOp>({Tensor::from_vector<double>({3}, {2, 3, 4}), Tensor::from_vector<double>({}, {2})});
  CHECK(r.out().to_vector<double>() == std::vector<double>{4, 9, 16});
}

TEST_CASE("binary ops reject mixed dtypes, shapes that do not broadcast and pow on integers", "[kernel]") {
  using kiln_test::build_op;
  Program p;
  KILN_CHECK_ERROR((build_op<SubOp>(p, {{DataType::Float32, {2}}, {DataType::Float64, {2}}})),
                     InvalidArgument, {"kiln.sub", "f32", "f64"});
  KILN_CHECK_ERROR((build_op<MulOp>(p, {{DataType::Float32, {3, 4}}, {DataType::Float32, {5}}})),
                     InvalidArgument, {"kiln.mul", "broadcast", "[3, 4]", "[5]"});
  KILN_CHECK_ERROR((build_op<PowOp>(p, {{DataType::Int32, {2}}, {DataType::Int32, {2}}})),
                     InvalidArgument, {"kiln.pow", "floating", "i32"});
  // Unknown dims broadcast at build time; the kernel checks the real ones.
  auto x = Tensor::from_vector<float>({3}, {1, 2, 3});
  auto y = Tensor::from_vector<float>({2}, {1, 2});
  KILN_CHECK_ERROR(kiln_test::run_kernel({x, y}, [](Builder& b, const std::vector<Value>&) {
                       Value a = b.create<DataOp>("a", std::vector<std::int64_t>{-1}).result();
                       Value c = b.create<DataOp>("c", std::vector<std::int64_t>{-1}).result();
                       return b.create<MaximumOp>(a, c).operation();
                     }),
                     InvalidArgument, {"kiln.maximum", "[3]", "[2]"});
}

TEST_CASE("binary ops keep vtensor results for vtensor operands and tensor otherwise", "[kernel]") {
  auto v = VTensorType::get(DataType::Float32, {2, 3});
  auto t = TensorType::get(DataType::Float32, {3});
  auto r = SubOp::infer_meta({v, v}, {});
  CHECK(r[0] == Type(VTensorType::get(DataType::Float32, {2, 3})));
  auto r2 = SubOp::infer_meta({v, t}, {});
  CHECK(r2[0] == Type(TensorType::get(DataType::Float32, {2, 3})));
  auto r3 = DivOp::infer_meta({TensorType::get(DataType::Float32, {-1, 3}), t}, {});
  CHECK(shaped_dims(r3[0]) == std::vector<std::int64_t>{-1, 3});
}

TEST_CASE("add_n sums one or more same-shaped tensors", "[kernel]") {
  for (int k : {1, 2, 3, 5}) {
    std::vector<Tensor> xs;
    for (int i = 0; i < k; ++i) xs.push_back(kiln_test::filled<double>({4, 33}, -1, 1, 10 + i));
    std::vector<double> want(4 * 33, 0.0);
    for (auto& x : xs) {
      auto v = x.to_vector<double>();
      for (std::size_t j = 0; j < v.size(); ++j) want[j] += v[j];
    }
    auto r = run_op<AddNOp>(xs);
    kiln_test::check_close<double>(r.out(), want, 1e-12, 1e-12);
    if (k == 1) CHECK_FALSE(r.out().shares_buffer_with(xs[0]));
  }
  auto r = run_op<AddNOp>({Tensor::from_vector<std::int32_t>({2}, {1, 2}),
                           Tensor::from_vector<std::int32_t>({2}, {10, 20}),
                           Tensor::from_vector<std::int32_t>({2}, {100, 200})});
  CHECK(r.out().to_vector<std::int32_t>() == std::vector<std::int32_t>{111, 222});
  auto f = run_op<AddNOp>({Tensor::from_vector<float>({2}, {1, 2}), Tensor::from_vector<float>({2}, {3, 4})});
  CHECK(f.out().to_vector<float>() == std::vector<float>{4, 6});
}

TEST_CASE("add_n rejects no operands, mixed dtypes and different shapes", "[kernel]") {
  using kiln_test::build_op;
  Program p;
  KILN_CHECK_ERROR((build_op<AddNOp>(p, {})), InvalidArgument, {"kiln.add_n", "at least one"});
  KILN_CHECK_ERROR((build_op<AddNOp>(p, {{DataType::Float32, {2}}, {DataType::Int32, {2}}})),
                     InvalidArgument, {"kiln.add_n", "f32", "i32"});
  KILN_CHECK_ERROR((build_op<AddNOp>(p, {{DataType::Float32, {2, 3}}, {DataType::Float32, {2, 3}},
                                           {DataType::Float32, {3}}})),
                     InvalidArgument, {"kiln.add_n", "[2, 3]", "[3]", "operand #2"});
  // -1 dims unify with known ones.
  Operation* op = build_op<AddNOp>(p, {{DataType::Float32, {-1, 3}}, {DataType::Float32, {4, -1}}});
  CHECK(shaped_dims(op->result_type(0)) == std::vector<std::int64_t>{4, 3});
}

TEST_CASE("binary kernels reuse their output buffer across runs of one context", "[kernel]") {
  // The executor keeps a kernel context per instruction: the second run of
  // the same op writes the buffer the first allocated.
  auto x = kiln_test::filled<float>({8, 8}), y = kiln_test::filled<float>({8}, -1, 1, 3);
  auto run = run_op<AddOp>({x, y});
  const void* first = run.out().raw_data();
  run.results.clear();  // drop the extra reference the helper keeps
  const auto& k = KernelRegistry::instance().get(*run.op, PlaceKind::Cpu, DataType::Float32);
  std::vector<Variable*> in{run.inputs[0].get(), run.inputs[1].get()}, out{run.outputs[0].get()};
  KernelContext ctx(run.op, in.data(), 2, out.data(), 1, nullptr, Place::cpu(), &cpu_allocator());
  k.fn(ctx);
  CHECK(run.outputs[0]->get<Tensor>().raw_data() == first);
}

TEST_CASE("mod takes the divisor's sign and fmod the dividend's, for integers and floats",
          "[kernel]") {
  using I = std::vector<std::int32_t>;
  auto xi = Tensor::from_vector<std::int32_t>({6}, {-4, 7, 5, 4, -7, 8});
  auto yi = Tensor::from_vector<std::int32_t>({6}, {2, -3, 8, -2, 3, 5});
  CHECK(run_op<ModOp>({xi, yi}).out().to_vector<std::int32_t>() == I{0, -2, 5, 0, 2, 3});
  CHECK(run_op<FmodOp>({xi, yi}).out().to_vector<std::int32_t>() == I{0, 1, 5, 0, -1, 3});
  auto xl = Tensor::from_vector<std::int64_t>({3}, {std::numeric_limits<std::int64_t>::min(), -1, 9});
  auto yl = Tensor::from_vector<std::int64_t>({}, {-1});
  CHECK(run_op<ModOp>({xl, yl}).out().to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0, 0});
  auto xf = Tensor::from_vector<double>({4}, {-4.5, 7.25, 5.0, -7.25});
  auto yf = Tensor::from_vector<double>({4}, {2.0, -3.0, 8.0, 3.0});
  kiln_test::check_close<double>(run_op<ModOp>({xf, yf}).out(), {1.5, -1.75, 5.0, 1.75});
  kiln_test::check_close<double>(run_op<FmodOp>({xf, yf}).out(), {-0.5, 1.25, 5.0, -1.25});
}

TEST_CASE("mod and fmod of integers by zero are an error naming the op", "[kernel]") {
  auto x = Tensor::from_vector<std::int64_t>({2}, {3, 4});
  auto y = Tensor::from_vector<std::int64_t>({2}, {1, 0});
  KILN_CHECK_ERROR(run_op<ModOp>({x, y}), InvalidArgument, {"kiln.mod", "by zero"});
  KILN_CHECK_ERROR(run_op<FmodOp>({x, y}), InvalidArgument, {"kiln.fmod", "by zero"});
  Program p;
  KILN_CHECK_ERROR((kiln_test::build_op<ModOp>(p, {{DataType::Int32, {2}}, {DataType::Int64, {2}}})),
                   InvalidArgument, {"kiln.mod", "i32", "i64"});
}

TEST_CASE("add, sub, mul, maximum and minimum work on every integer width, wrapping as C does",
          "[kernel]") {
  auto run_all = [](auto f) {
    check_binary<AddOp, std::int8_t>(f, -100, 100);
    check_binary<AddOp, std::int16_t>(f);
    check_binary<AddOp, std::uint8_t>(f, 0, 200);
    check_binary<AddOp, std::uint16_t>(f, 0, 60000);
    check_binary<AddOp, std::uint32_t>(f, 0, 4e9);
    check_binary<AddOp, std::uint64_t>(f, 0, 1e18);
  };
  run_all([](auto a, auto b) { return static_cast<decltype(a)>(a + b); });
  check_binary<SubOp, std::uint8_t>([](auto a, auto b) { return static_cast<std::uint8_t>(a - b); }, 0, 255);
  check_binary<MulOp, std::int8_t>([](auto a, auto b) { return static_cast<std::int8_t>(a * b); }, -100, 100);
  check_binary<MaximumOp, std::uint32_t>([](auto a, auto b) { return a > b ? a : b; }, 0, 4e9);
  check_binary<MinimumOp, std::uint64_t>([](auto a, auto b) { return a < b ? a : b; }, 0, 1e19);
  auto r = run_op<AddOp>({Tensor::from_vector<std::uint8_t>({2}, {250, 1}),
                          Tensor::from_vector<std::uint8_t>({2}, {10, 2})});
  CHECK(r.out().to_vector<std::uint8_t>() == std::vector<std::uint8_t>{4, 3});
}

TEST_CASE("unsigned division and remainders divide by the largest value as a number", "[kernel]") {
  // A signed -1 divisor negates; the same bits as an unsigned divisor are
  // the type's largest value.
  const std::uint32_t max = UINT32_MAX;
  auto x = Tensor::from_vector<std::uint32_t>({3}, {5, max, max - 1});
  auto y = Tensor::from_vector<std::uint32_t>({3}, {max, max, max});
  CHECK(run_op<DivOp>({x, y}).out().to_vector<std::uint32_t>() == std::vector<std::uint32_t>{0, 1, 0});
  CHECK(run_op<ModOp>({x, y}).out().to_vector<std::uint32_t>() ==
        std::vector<std::uint32_t>{5, 0, max - 1});
  CHECK(run_op<FmodOp>({x, y}).out().to_vector<std::uint32_t>() ==
        std::vector<std::uint32_t>{5, 0, max - 1});
  auto a = Tensor::from_vector<std::uint8_t>({3}, {200, 7, 9});
  auto b = Tensor::from_vector<std::uint8_t>({3}, {7, 200, 0});
  KILN_CHECK_ERROR(run_op<ModOp>({a, b}), InvalidArgument, {"kiln.mod", "zero"});
  auto c = Tensor::from_vector<std::uint8_t>({2}, {200, 7});
  auto d = Tensor::from_vector<std::uint8_t>({2}, {7, 200});
  CHECK(run_op<DivOp>({c, d}).out().to_vector<std::uint8_t>() == std::vector<std::uint8_t>{28, 0});
  CHECK(run_op<ModOp>({c, d}).out().to_vector<std::uint8_t>() == std::vector<std::uint8_t>{4, 7});
}

TEST_CASE("binary ops on f16 and bf16 compute in f32 and round the result once", "[kernel]") {
  auto to16 = [](std::vector<float> v, DataType dt) {
    return run_op<CastOp>({Tensor::from_vector<float>({static_cast<std::int64_t>(v.size())}, v)}, dt)
        .out();
  };
  for (DataType dt : {DataType::Float16, DataType::BFloat16}) {
    INFO(to_string(dt));
    Tensor x = to16({1.5f, -2.f, 3.f, 0.25f}, dt), y = to16({0.5f}, dt);
    auto back = [](const Tensor& t) { return run_op<CastOp>({t}, DataType::Float32).out().to_vector<float>(); };
    Tensor sum = run_op<AddOp>({x, y}).out();
    CHECK(sum.dtype() == dt);
    CHECK(back(sum) == std::vector<float>{2.f, -1.5f, 3.5f, 0.75f});
    CHECK(back(run_op<MaximumOp>({x, y}).out()) == std::vector<float>{1.5f, 0.5f, 3.f, 0.5f});
    CHECK(back(run_op<DivOp>({x, y}).out()) == std::vector<float>{3.f, -4.f, 6.f, 0.5f});
    CHECK(back(run_op<ModOp>({x, y}).out()) == std::vector<float>{0.f, 0.f, 0.f, 0.25f});
    KILN_CHECK_ERROR(run_op<AddOp>({x, Tensor::from_vector<float>({1}, {1.f})}), InvalidArgument,
                     {"kiln.add"});
  }
  // 2049 is not an f16: 2048 + 1 rounds to even, 2048.
  Tensor a = to16({2048.f}, DataType::Float16), one = to16({1.f}, DataType::Float16);
  CHECK(run_op<CastOp>({run_op<AddOp>({a, one}).out()}, DataType::Float32).out().to_vector<float>() ==
        std::vector<float>{2048.f});
}

TEST_CASE("shift_left and shift_right shift integers and shift every bit out past the width",
          "[kernel]") {
  auto x = Tensor::from_vector<std::uint8_t>({5}, {1, 0x81, 16, 255, 3});
  auto n = Tensor::from_vector<std::uint8_t>({5}, {1, 1, 4, 8, 0});
  CHECK(run_op<ShiftLeftOp>({x, n}).out().to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{2, 2, 0, 0, 3});
  CHECK(run_op<ShiftRightOp>({x, n}).out().to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{0, 0x40, 1, 0, 3});
  auto big = Tensor::from_vector<std::uint64_t>({2}, {1, 1ull << 63});
  auto k = Tensor::from_vector<std::uint64_t>({1}, {63});
  CHECK(run_op<ShiftLeftOp>({big, k}).out().to_vector<std::uint64_t>() ==
        std::vector<std::uint64_t>{1ull << 63, 0});
  CHECK(run_op<ShiftRightOp>({big, k}).out().to_vector<std::uint64_t>() ==
        std::vector<std::uint64_t>{0, 1});
  auto s = Tensor::from_vector<std::int32_t>({3}, {-8, -8, 8});
  auto c = Tensor::from_vector<std::int32_t>({3}, {1, 40, 40});
  CHECK(run_op<ShiftRightOp>({s, c}).out().to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{-4, -1, 0});
  using kiln_test::build_op;
  Program p;
  KILN_CHECK_ERROR((build_op<ShiftLeftOp>(p, {{DataType::Float32, {2}}, {DataType::Float32, {2}}})),
                   InvalidArgument, {"kiln.shift_left", "integers", "f32"});
}
