// The CUDA data-movement kernels of shape.cu — full, zeros_like, transpose,
// concat, split, slice and its gradient, split_as, cast, clip and its
// gradient, scale — against the CPU kernels on the same inputs ([cuda]:
// skipped without a device). Copies and clip_grad (a select) must give the
// CPU's bytes; casts and arithmetic the CPU's values (NaN equal to NaN: a
// device's NaN may carry another payload, as CUDA's f32 -> f16 gives 0x7fff
// where the CPU gives 0x7e00).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernel/cuda_test_util.h"
#include "kiln/support/half.h"

using namespace kiln;
using kiln_test::filled;
using kiln_test::have_cuda;
using kiln_test::run_cuda_kernel;
using kiln_test::run_cuda_op;
using kiln_test::run_kernel;
using kiln_test::run_op;

namespace {

using I64s = std::vector<std::int64_t>;

// Every dtype of 1, 2, 4 and 8 bytes the copies serve.
const DataType kMoved[] = {DataType::Bool,    DataType::UInt8,   DataType::Int8,
                           DataType::Int16,   DataType::Float16, DataType::Int32,
                           DataType::Float32, DataType::Int64,   DataType::Float64};

// A tensor of pseudo-random bytes (bools 0 or 1).
Tensor random_bytes(const Dims& d, DataType dt, std::uint32_t seed = 1) {
  Tensor t = Tensor::empty(d, dt);
  auto* p = static_cast<unsigned char*>(t.raw_data());
  std::uint64_t s = seed * 2654435761ull + 7;
  for (std::size_t i = 0; i < t.bytes(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<unsigned char>(s >> 56);
    if (dt == DataType::Bool) p[i] &= 1;
  }
  return t;
}

void check_bytes(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dims() == want.dims());
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.bytes() == want.bytes());
  if (want.bytes()) CHECK(std::memcmp(got.raw_data(), want.raw_data(), want.bytes()) == 0);
}

template <typename T>
bool same_values(const Tensor& got, const Tensor& want) {
  const auto g = got.to_vector<T>(), w = want.to_vector<T>();
  for (std::size_t i = 0; i < w.size(); ++i)
    if (!(g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i])))) return false;
  return true;
}

// f16 / bf16: the same bits, or NaN both.
bool same_16bit(const Tensor& got, const Tensor& want) {
  const auto* g = static_cast<const std::uint16_t*>(got.raw_data());
  const auto* w = static_cast<const std::uint16_t*>(want.raw_data());
  const auto nan = [&](std::uint16_t v) {
    return std::isnan(want.dtype() == DataType::Float16 ? half_to_float(v) : bfloat16_to_float(v));
  };
  for (std::int64_t i = 0; i < want.numel(); ++i)
    if (!(g[i] == w[i] || (nan(g[i]) && nan(w[i])))) return false;
  return true;
}

// Bytes, except f32 / f64 compared as values and f16 / bf16 as bits, with
// NaN equal to NaN.
void check_values(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dims() == want.dims());
  REQUIRE(got.dtype() == want.dtype());
  if (want.dtype() == DataType::Float32) CHECK(same_values<float>(got, want));
  else if (want.dtype() == DataType::Float64) CHECK(same_values<double>(got, want));
  else if (want.dtype() == DataType::Float16 || want.dtype() == DataType::BFloat16)
    CHECK(same_16bit(got, want));
  else check_bytes(got, want);
}

template <typename OpT, typename... Args>
void check_move(const std::vector<Tensor>& in, Args... args) {
  const auto cpu = run_op<OpT>(in, args...);
  const auto dev = run_cuda_op<OpT>(in, args...);
  REQUIRE(dev.results.size() == cpu.results.size());
  for (std::size_t i = 0; i < cpu.results.size(); ++i) check_bytes(dev.out(i), cpu.out(i));
}

// clip_grad's operands, n elements of T: x every third element one of the
// bounds (as T), a step either side of each, ±inf, ±0 or NaN, else in
// [-8, 8); dout in [-2, 2) with -0 and NaN among them.
template <typename T>
std::pair<Tensor, Tensor> clip_grad_operands(const Dims& dims, double lo, double hi) {
  const T l = static_cast<T>(lo), h = static_cast<T>(hi), inf = std::numeric_limits<T>::infinity();
  const T special[] = {l, h, std::nextafter(l, -inf), std::nextafter(l, inf), std::nextafter(h, -inf),
                       std::nextafter(h, inf), -inf, inf, T(-0.0), T(0), std::numeric_limits<T>::quiet_NaN()};
  std::vector<T> x = filled<T>(dims, -8, 8, 2).template to_vector<T>();
  std::vector<T> d = filled<T>(dims, -2, 2, 3).template to_vector<T>();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (i % 3 == 0) x[i] = special[(i / 3) % std::size(special)];
    if (i % 7 == 0) d[i] = T(-0.0);
    if (i % 11 == 0) d[i] = std::numeric_limits<T>::quiet_NaN();
  }
  return {Tensor::from_vector<T>(dims, x), Tensor::from_vector<T>(dims, d)};
}

}  // namespace

TEST_CASE("CUDA full and zeros_like give the CPU's tensors", "[cuda][kernel]") {
  if (!have_cuda()) return;
  const DataType full_types[] = {DataType::Float32, DataType::Float64, DataType::Int8,
                                 DataType::Int32,   DataType::Int64,   DataType::Bool};
  for (DataType dt : full_types)
    for (const I64s& shape : {I64s{2, 3}, I64s{0, 4}, I64s{}, I64s{1000}})
      for (double v : {0.0, -3.0, 1.5, 100.0}) {
        INFO(to_string(dt) << " " << v << " rank " << shape.size());
        check_move<FullOp>({}, shape, v, dt);
      }
  KILN_CHECK_ERROR(run_cuda_op<FullOp>({}, I64s{2}, 300.0, DataType::Int8), InvalidArgument,
                   {"value 300", "does not fit i8"});
  for (DataType dt : kMoved)
    for (const Dims& d : {Dims({3, 5}), Dims({0, 2}), Dims({})}) {
      INFO(to_string(dt));
      check_move<ZerosLikeOp>({random_bytes(d, dt)});
    }
}

TEST_CASE("CUDA transpose copies the CPU's bytes for every permutation and element size",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  const I64s perms[] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0},
                        {-1, 0, -2}};
  for (DataType dt : kMoved) {
    INFO(to_string(dt));
    const Tensor x = random_bytes(Dims({3, 4, 5}), dt);
    for (const I64s& p : perms) check_move<TransposeOp>({x}, p);
    check_move<TransposeOp>({random_bytes(Dims({2, 1, 3, 7}), dt)}, I64s{3, 1, 0, 2});
    check_move<TransposeOp>({random_bytes(Dims({4, 0, 3}), dt)}, I64s{2, 0, 1});
    check_move<TransposeOp>({random_bytes(Dims({6}), dt)}, I64s{0});
    check_move<TransposeOp>({random_bytes(Dims({}), dt)}, I64s{});
  }
  const Tensor x = random_bytes(Dims({2, 3}), DataType::Float32);
  KILN_CHECK_ERROR(run_cuda_op<TransposeOp>({x}, I64s{0, 0}), InvalidArgument,
                   {"kiln.transpose", "not a permutation"});
  KILN_CHECK_ERROR(run_cuda_op<TransposeOp>({x}, I64s{0}), InvalidArgument,
                   {"kiln.transpose", "one entry per dim of the input (rank 2)"});
}

TEST_CASE("CUDA concat, split and split_as copy the CPU's parts", "[cuda][kernel]") {
  if (!have_cuda()) return;
  for (DataType dt : kMoved) {
    INFO(to_string(dt));
    const Tensor a = random_bytes(Dims({2, 3, 4}), dt, 1), b = random_bytes(Dims({2, 1, 4}), dt, 2),
                 c = random_bytes(Dims({2, 0, 4}), dt, 3);
    check_move<ConcatOp>({a, b, c}, std::int64_t{1});
    check_move<ConcatOp>({a, b, c, a}, std::int64_t{-2});
    check_move<ConcatOp>({a, a}, std::int64_t{0});
    check_move<ConcatOp>({a, random_bytes(Dims({2, 3, 3}), dt, 4)}, std::int64_t{-1});
    check_move<ConcatOp>({c, c}, std::int64_t{0});
    const Tensor x = random_bytes(Dims({4, 6, 3}), dt, 5);
    check_move<SplitOp>({x}, std::int64_t{3}, std::int64_t{1});
    check_move<SplitOp>({x}, std::int64_t{2}, std::int64_t{0});
    check_move<SplitOp>({x}, std::int64_t{3}, std::int64_t{-1});
    check_move<SplitOp>({x}, I64s{2, -1, 0, 1}, std::int64_t{-2});
    check_move<SplitOp>({random_bytes(Dims({0, 4}), dt)}, std::int64_t{2}, std::int64_t{1});
  }
  const Tensor x = random_bytes(Dims({4, 6}), DataType::Float32);
  KILN_CHECK_ERROR(run_cuda_op<ConcatOp>({x, random_bytes(Dims({3, 6}), DataType::Float32)},
                                         std::int64_t{1}),
                   InvalidArgument, {"kiln.concat", "operand #1", "only the concat axis 1 may differ"});
  KILN_CHECK_ERROR(run_cuda_op<SplitOp>({x}, std::int64_t{4}, std::int64_t{1}), InvalidArgument,
                   {"cannot split dim 1", "4 equal parts"});
  for (DataType dt : {DataType::Float32, DataType::Float64}) {
    const Tensor xs = random_bytes(Dims({3, 7, 2}), dt);
    const std::vector<Tensor> in = {xs, random_bytes(Dims({3, 2, 2}), dt),
                                    random_bytes(Dims({3, 0, 2}), dt),
                                    random_bytes(Dims({3, 5, 2}), dt)};
    const auto make = [](Builder& b, const std::vector<Value>& v) {
      return b.create<SplitAsOp>(v[0], std::vector<Value>{v[1], v[2], v[3]}, -2).operation();
    };
    const auto cpu = run_kernel(in, make);
    const auto dev = run_cuda_kernel(in, make);
    for (std::size_t i = 0; i < 3; ++i) check_bytes(dev.out(i), cpu.out(i));
  }
}

TEST_CASE("CUDA slice and slice_grad copy the CPU's elements", "[cuda][kernel]") {
  if (!have_cuda()) return;
  for (DataType dt : kMoved) {
    INFO(to_string(dt));
    const Tensor x = random_bytes(Dims({4, 5, 6}), dt);
    check_move<SliceOp>({x}, I64s{1}, I64s{1}, I64s{4});
    check_move<SliceOp>({x}, I64s{-1, 0}, I64s{2, -3}, I64s{5, 100});
    check_move<SliceOp>({x}, I64s{0, 1, 2}, I64s{1, 1, 1}, I64s{3, 4, 5});
    check_move<SliceOp>({x}, I64s{2}, I64s{0}, I64s{6});
    check_move<SliceOp>({x}, I64s{1}, I64s{3}, I64s{3});  // empty
    check_move<SliceOp>({random_bytes(Dims({0, 3}), dt)}, I64s{1}, I64s{1}, I64s{2});
  }
  KILN_CHECK_ERROR(
      run_cuda_op<SliceOp>({random_bytes(Dims({4}), DataType::Float32)}, I64s{1}, I64s{0}, I64s{1}),
      InvalidArgument, {"axis 1 is out of range"});
  for (DataType dt : {DataType::Float32, DataType::Float64}) {
    INFO(to_string(dt));
    const Tensor x = random_bytes(Dims({4, 5, 3}), dt);
    check_move<GradOf<SliceOp>>({x, random_bytes(Dims({3, 2, 3}), dt)}, I64s{0, 1}, I64s{1, -3},
                                I64s{4, 4});
    check_move<GradOf<SliceOp>>({x, random_bytes(Dims({4, 5, 1}), dt)}, I64s{-1}, I64s{2},
                                I64s{3});
    check_move<GradOf<SliceOp>>({x, random_bytes(Dims({4, 0, 3}), dt)}, I64s{1}, I64s{2},
                                I64s{2});
    KILN_CHECK_ERROR(run_cuda_op<GradOf<SliceOp>>({x, random_bytes(Dims({1, 5, 3}), dt)},
                                                  I64s{0}, I64s{0}, I64s{2}),
                     InvalidArgument, {"must have the slice's shape [2, 5, 3]"});
  }
}

TEST_CASE("CUDA cast converts as the CPU does: saturating, NaN to 0, bools 0 or 1",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> special = {0.0,   -0.0,   1.0,    -1.5,  2.5,   127.9, 128.0,
                                       -129.0, 255.5, 256.0,  300.7, -1e10, 3e9,   -3e9,
                                       9.3e18, -9.3e18, 2e19, 1e300, inf,   -inf,  std::nan("")};
  std::vector<float> specialf(special.begin(), special.end());
  const Dims d({static_cast<std::int64_t>(special.size())});
  const std::vector<Tensor> sources = {
      Tensor::from_vector<double>(d, special),
      Tensor::from_vector<float>(d, specialf),
      Tensor::from_vector<std::int64_t>(Dims({6}), {0, -1, 300, -200, std::int64_t{1} << 40,
                                                    std::numeric_limits<std::int64_t>::min()}),
      Tensor::from_vector<std::int32_t>(Dims({5}), {0, -1, 300, -200, 1 << 30}),
      Tensor::from_vector<std::uint8_t>(Dims({4}), {0, 1, 200, 255}),
      Tensor::from_vector<std::int8_t>(Dims({4}), {0, -1, 127, -128}),
      Tensor::from_vector<bool>(Dims({3}), {true, false, true}),
      Tensor::from_vector<float>(Dims({0, 3}), {}),
  };
  const DataType targets[] = {DataType::Float32, DataType::Float64, DataType::Int32,
                              DataType::Int64,   DataType::Bool,    DataType::UInt8,
                              DataType::Int8,    DataType::Float16, DataType::Int16,
                              DataType::UInt64};
  for (const Tensor& x : sources)
    for (DataType to : targets) {
      INFO(to_string(x.dtype()) << " -> " << to_string(to));
      check_values(run_cuda_op<CastOp>({x}, to).out(), run_op<CastOp>({x}, to).out());
    }
}

TEST_CASE("CUDA clip and scale compute the CPU's values", "[cuda][kernel]") {
  if (!have_cuda()) return;
  const Tensor xf = Tensor::from_vector<float>(Dims({6}), {-3.f, -1.f, 0.f, 1.5f, 4.f,
                                                           std::nanf("")});
  for (auto [lo, hi] : {std::pair{-1.0, 2.0}, std::pair{2.0, 1.0}, std::pair{-1e30, 1e30}}) {
    check_values(run_cuda_op<ClipOp>({xf}, lo, hi).out(), run_op<ClipOp>({xf}, lo, hi).out());
    const Tensor xd = filled<double>(Dims({7, 3}), -3, 3);
    check_values(run_cuda_op<ClipOp>({xd}, lo, hi).out(), run_op<ClipOp>({xd}, lo, hi).out());
    for (DataType dt : {DataType::Int8, DataType::Int16, DataType::Int32, DataType::Int64,
                        DataType::UInt8, DataType::UInt16, DataType::UInt32, DataType::UInt64}) {
      INFO(to_string(dt));
      const Tensor x = random_bytes(Dims({33}), dt);
      check_values(run_cuda_op<ClipOp>({x}, lo, hi).out(), run_op<ClipOp>({x}, lo, hi).out());
    }
  }
  const std::vector<Tensor> xs = {filled<float>(Dims({5, 7}), -4, 4),
                                  filled<double>(Dims({5, 7}), -4, 4),
                                  filled<std::int32_t>(Dims({9}), -100, 100),
                                  filled<std::int64_t>(Dims({9}), -100, 100),
                                  Tensor::from_vector<float>(Dims({0}), {})};
  for (const Tensor& x : xs)
    for (bool after : {true, false}) {
      INFO(to_string(x.dtype()) << (after ? " bias after" : " bias before"));
      check_values(run_cuda_op<ScaleOp>({x}, 0.3, 1.7, after).out(),
                   run_op<ScaleOp>({x}, 0.3, 1.7, after).out());
    }
}

TEST_CASE("CUDA clip_grad gives the CPU's bits: dout where min <= x <= max, both bounds included, "
          "0 beyond them and for NaN",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  const double inf = std::numeric_limits<double>::infinity();
  // relu6, bounds that round in f32, fused_conv2d's relu6 gradient (below 6), min > max
  const std::pair<double, double> bounds[] = {
      {0.0, 6.0}, {-1.5, 0.1}, {-inf, std::nextafter(6.0, 0.0)}, {2.0, 1.0}};
  for (auto [lo, hi] : bounds)
    for (const Dims& dims : {Dims({7, 143}), Dims({1}), Dims({0}), Dims({4, 0})}) {
      INFO("[" << lo << ", " << hi << "] on " << dims.to_string());
      const auto [xf, df] = clip_grad_operands<float>(dims, lo, hi);
      check_bytes(run_cuda_op<GradOf<ClipOp>>({xf, df}, lo, hi).out(),
                  run_op<GradOf<ClipOp>>({xf, df}, lo, hi).out());
      const auto [xd, dd] = clip_grad_operands<double>(dims, lo, hi);
      check_bytes(run_cuda_op<GradOf<ClipOp>>({xd, dd}, lo, hi).out(),
                  run_op<GradOf<ClipOp>>({xd, dd}, lo, hi).out());
    }
}

TEST_CASE("CUDA clip_grad rejects an x and a dout of different shapes with the CPU's error",
          "[cuda][kernel]") {
  if (!have_cuda()) return;
  // Dims unknown at build time, so that only the kernel can see them differ.
  const auto make = [](Builder& b, const std::vector<Value>&) {
    const auto in = [&](const char* name) {
      return b.create<DataOp>(name, std::vector<std::int64_t>{-1, 3}).result();
    };
    return b.create<GradOf<ClipOp>>(ClipOp::Attributes{0.0, 6.0}, in("x"), in("dout")).operation();
  };
  const std::vector<Tensor> in = {filled<float>(Dims({2, 3})), filled<float>(Dims({4, 3}))};
  const std::string cuda = KILN_CHECK_ERROR(run_cuda_kernel(in, make), InvalidArgument,
                                            {"kiln.clip_grad", "[2x3]", "[4x3]", "one shape"});
  CHECK(cuda == KILN_CHECK_ERROR(run_kernel(in, make), InvalidArgument, {}));
}
