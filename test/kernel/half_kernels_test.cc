// The 16-bit float kernels mixed precision runs on the CPU (kiln.matmul,
// kiln.add_n, and a CNN's convolutions and pools through their f32
// kernels, in bf16 and f16): f32 arithmetic on the widened operands,
// rounded once, so each result is exactly the f32 kernel's result on the
// widened inputs, rounded to nearest even. bf16 convolutions on a CPU with
// AVX512-BF16 run oneDNN's native bf16 kernels, which sum in another order:
// within a rounding of that result. Bad operands are errors naming the op.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "../../kernels/cpu/cpu_blas.h"
#include "kernel/half_test_util.h"
#include "kernel/kernel_test_util.h"
#include "kiln/kernel/half_via_f32.h"

using namespace kiln;
using kiln_test::from_half;
using kiln_test::random_half;
using kiln_test::run_kernel;
using kiln_test::run_op;
using kiln_test::to_half;

namespace {

using V = std::vector<std::int64_t>;
using Make = std::function<Operation*(Builder&, const std::vector<Value>&)>;

Tensor widen(const Tensor& t) {
  Tensor f = Tensor::empty(t.dims(), DataType::Float32);
  const auto* p = static_cast<const std::uint16_t*>(t.raw_data());
  for (std::int64_t i = 0; i < t.numel(); ++i) f.data<float>()[i] = from_half(p[i], t.dtype());
  return f;
}

// Whether `half` is `f32` rounded to `half`'s dtype, element for element.
bool is_rounded(const Tensor& half, const Tensor& f32) {
  if (half.dims() != f32.dims()) return false;
  const auto* p = static_cast<const std::uint16_t*>(half.raw_data());
  for (std::int64_t i = 0; i < half.numel(); ++i)
    if (p[i] != to_half(f32.data<float>()[i], half.dtype())) return false;
  return true;
}

// is_rounded, where a NaN of f32 may be any NaN of `half`'s dtype.
bool is_rounded_or_nan(const Tensor& half, const Tensor& f32) {
  if (half.dims() != f32.dims()) return false;
  const auto* p = static_cast<const std::uint16_t*>(half.raw_data());
  for (std::int64_t i = 0; i < half.numel(); ++i) {
    const float w = f32.data<float>()[i];
    if (std::isnan(w) ? !std::isnan(from_half(p[i], half.dtype())) : p[i] != to_half(w, half.dtype()))
      return false;
  }
  return true;
}

// The op `make` builds, on 16-bit operands and on their widened values:
// each 16-bit result is the f32 result rounded once.
void check_rounded(std::string_view what, const std::vector<Tensor>& half, const Make& make) {
  INFO(what);
  std::vector<Tensor> wide;
  for (const Tensor& t : half) wide.push_back(widen(t));
  const auto got = run_kernel(half, make), want = run_kernel(wide, make);
  REQUIRE(got.results.size() == want.results.size());
  for (std::size_t i = 0; i < got.results.size(); ++i) {
    INFO("output #" << i);
    CHECK(got.out(i).dtype() == half[0].dtype());
    CHECK(is_rounded_or_nan(got.out(i), want.out(i)));
  }
}

// Whether each element of `half` is within a bf16 rounding of `f32` (half
// an ulp, 2^-9 relative, and room for a sum taken in another order).
bool within_rounding(const Tensor& half, const Tensor& f32) {
  if (half.dims() != f32.dims() || half.dtype() != DataType::BFloat16) return false;
  const auto* p = static_cast<const std::uint16_t*>(half.raw_data());
  const float* q = f32.data<float>();
  float scale = 0;
  for (std::int64_t i = 0; i < f32.numel(); ++i) scale = std::max(scale, std::fabs(q[i]));
  for (std::int64_t i = 0; i < half.numel(); ++i)
    if (!(std::fabs(from_half(p[i], DataType::BFloat16) - q[i]) <= std::ldexp(std::fabs(q[i]), -8) + 1e-5f * scale))
      return false;
  return true;
}

Tensor matmul(const Tensor& x, const Tensor& y, bool tx, bool ty) {
  return run_kernel({x, y}, [&](Builder& b, const std::vector<Value>& v) {
           return b.create<MatmulOp>(v[0], v[1], tx, ty).operation();
         }).out();
}

}  // namespace

TEST_CASE("an f16 matmul, and a bf16 one on a CPU without native bf16 products, is the f32 matmul of its widened "
          "operands, rounded once; a bf16 one with them is within a rounding of it; any transposes and batch dims",
          "[kernel][half]") {
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    const bool native = dt == DataType::BFloat16 && cpu::native_bf16_gemm();
    if (dt == DataType::BFloat16 && !native) WARN("no native bf16 products on this CPU: oneDNN's path is not run");
    const auto check = [&](const Tensor& got, const Tensor& f32) {
      CHECK(got.dtype() == dt);
      CHECK((native ? within_rounding(got, f32) : is_rounded(got, f32)));
    };
    for (bool tx : {false, true})
      for (bool ty : {false, true}) {
        INFO("transposes " << tx << ty);
        const Tensor x = random_half(tx ? Dims{70, 33} : Dims{33, 70}, dt, 1);
        const Tensor y = random_half(ty ? Dims{45, 70} : Dims{70, 45}, dt, 2);
        check(matmul(x, y, tx, ty), matmul(widen(x), widen(y), tx, ty));
        // Batches of x against one y (one product of their rows) and
        // batches of both, y broadcast.
        const Tensor bx = random_half(tx ? Dims{2, 3, 70, 33} : Dims{2, 3, 33, 70}, dt, 3);
        const Tensor by = random_half(ty ? Dims{3, 45, 70} : Dims{3, 70, 45}, dt, 4);
        check(matmul(bx, y, tx, ty), matmul(widen(bx), widen(y), tx, ty));
        check(matmul(bx, by, tx, ty), matmul(widen(bx), widen(by), tx, ty));
      }
    // A sum of 4096 products: f32 accumulation, not bf16.
    const Tensor lx = random_half({8, 4096}, dt, 5), ly = random_half({4096, 8}, dt, 6);
    check(matmul(lx, ly, false, false), matmul(widen(lx), widen(ly), false, false));
    // Empty products: zeros, and nothing to multiply.
    check(matmul(random_half({4, 0}, dt, 7), random_half({0, 5}, dt, 8), false, false),
          Tensor::zeros(Dims{4, 5}, DataType::Float32));
  }
}

TEST_CASE("a bf16 add_n sums in f32 and rounds once; mixed dtypes or shapes are errors naming the op",
          "[kernel][half]") {
  const DataType dt = DataType::BFloat16;
  const Tensor a = random_half(Dims{4, 9}, dt, 5), b = random_half(Dims{4, 9}, dt, 6), c = random_half(Dims{4, 9}, dt, 7);
  auto add_n = [](const std::vector<Tensor>& in) {
    return run_kernel(in, [](Builder& bb, const std::vector<Value>& v) { return bb.create<AddNOp>(v).operation(); })
        .out();
  };
  Tensor want = Tensor::empty(Dims{4, 9}, DataType::Float32);
  for (std::int64_t i = 0; i < want.numel(); ++i)
    want.data<float>()[i] = widen(a).data<float>()[i] + widen(b).data<float>()[i] + widen(c).data<float>()[i];
  CHECK(is_rounded(add_n({a, b, c}), want));
  const Tensor f16 = random_half(Dims{4, 9}, DataType::Float16, 8);
  KILN_CHECK_ERROR(run_kernel({a, f16}, [](Builder& bb, const std::vector<Value>& v) {
                     Operation* op = bb.create<AddNOp>(std::vector<Value>{v[0], v[0]}).operation();
                     op->set_operand(1, v[1]);  // past the builder's check: the kernel's own
                     return op;
                   }),
                   InvalidArgument, {"kiln.add_n", "input #1"});
}

TEST_CASE("an f16 conv2d and its gradient, and the bf16 or f16 pools, are the f32 kernels on the widened "
          "operands, rounded once",
          "[kernel][half]") {
  const auto& check = check_rounded;
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    const Tensor x = random_half({2, 4, 9, 9}, dt, 1), w = random_half({6, 2, 3, 3}, dt, 2);
    const Tensor dout = random_half({2, 6, 5, 5}, dt, 3), pooled = random_half({2, 4, 4, 4}, dt, 4);
    if (dt == DataType::Float16) {
      check("conv2d", {x, w}, [](Builder& b, const std::vector<Value>& v) {
        return b.create<Conv2dOp>(v[0], v[1], V{2, 2}, V{1, 1}, V{1, 1}, std::int64_t{2}).operation();
      });
      check("conv2d_grad", {x, w, dout}, [](Builder& b, const std::vector<Value>& v) {
        return b.create<GradOf<Conv2dOp>>(Conv2dOp::Attributes{V{2, 2}, V{1, 1}, V{1, 1}, 2}, v[0], v[1], v[2])
            .operation();
      });
    }
    check("max_pool2d", {x}, [](Builder& b, const std::vector<Value>& v) {
      return b.create<MaxPool2dOp>(v[0], V{2, 2}).operation();
    });
    check("avg_pool2d", {x}, [](Builder& b, const std::vector<Value>& v) {
      return b.create<AvgPool2dOp>(v[0], V{3, 3}, V{2, 2}, V{1, 1}).operation();
    });
    check("adaptive_avg_pool2d", {x}, [](Builder& b, const std::vector<Value>& v) {
      return b.create<AdaptiveAvgPool2dOp>(v[0], V{1, 1}).operation();
    });
    check("max_pool2d_grad", {x, pooled}, [](Builder& b, const std::vector<Value>& v) {
      return b.create<GradOf<MaxPool2dOp>>(MaxPool2dOp::Attributes{V{2, 2}, V{2, 2}, V{0, 0}, false, "NCHW"},
                                           v[0], v[1])
          .operation();
    });
  }
}

// Each output of make's op on bf16 `in` against the f32 kernel on the widened
// operands.
void check_bf16_conv(const char* what, const std::vector<Tensor>& in, const Make& make) {
  INFO(what);
  std::vector<Tensor> wide;
  for (const Tensor& t : in) wide.push_back(t.dtype() == DataType::BFloat16 ? widen(t) : t);
  const auto got = run_kernel(in, make), want = run_kernel(wide, make);
  REQUIRE(got.results.size() == want.results.size());
  for (std::size_t i = 0; i < got.results.size(); ++i) {
    INFO("output #" << i);
    CHECK(within_rounding(got.out(i), want.out(i)));
  }
}

TEST_CASE("a bf16 conv2d, fused_conv2d and conv2d gradient are within a bf16 rounding of the f32 kernels on the "
          "widened operands, in NCHW and NHWC, grouped and depthwise",
          "[kernel][half][conv]") {
  const DataType bf = DataType::BFloat16;
  for (const char* layout : {"NCHW", "NHWC"}) {
    INFO(layout);
    const bool nhwc = std::string_view(layout) == "NHWC";
    const auto dims = [&](std::int64_t n, std::int64_t c, std::int64_t h) { return nhwc ? Dims{n, h, h, c} : Dims{n, c, h, h}; };
    const Tensor x = random_half(dims(3, 8, 9), bf, 1), w = random_half({12, 4, 3, 3}, bf, 2);
    const Tensor dw_w = random_half({8, 1, 3, 3}, bf, 3), bias = random_half({12}, bf, 4);
    const Tensor dout = random_half(dims(3, 12, 5), bf, 5), residual = random_half(dims(3, 12, 5), bf, 6);
    const std::string f = layout;
    check_bf16_conv("conv2d, 2 groups, stride 2", {x, w}, [f](Builder& b, const std::vector<Value>& v) {
      return b.create<Conv2dOp>(v[0], v[1], V{2, 2}, V{1, 1}, V{1, 1}, std::int64_t{2}, f).operation();
    });
    check_bf16_conv("conv2d_grad", {x, w, dout}, [f](Builder& b, const std::vector<Value>& v) {
      return b.create<GradOf<Conv2dOp>>(Conv2dOp::Attributes{V{2, 2}, V{1, 1}, V{1, 1}, 2, f}, v[0], v[1], v[2])
          .operation();
    });
    for (const char* act : {"none", "relu", "relu6", "silu"}) {
      INFO(act);
      const std::string a = act;
      check_bf16_conv("fused_conv2d", {x, w, bias}, [f, a](Builder& b, const std::vector<Value>& v) {
        return b.create<FusedConv2dOp>(v[0], v[1], v[2], V{2, 2}, V{1, 1}, V{1, 1}, std::int64_t{2}, a, f).operation();
      });
      check_bf16_conv("fused_conv2d with a residual", {x, w, bias, residual},
                      [f, a](Builder& b, const std::vector<Value>& v) {
                        return b.create<FusedConv2dOp>(v[0], v[1], v[2], V{2, 2}, V{1, 1}, V{1, 1}, std::int64_t{2}, a,
                                                       f, v[3])
                            .operation();
                      });
    }
    check_bf16_conv("depthwise fused_conv2d", {x, dw_w, random_half({8}, bf, 7)},
                    [f](Builder& b, const std::vector<Value>& v) {
                      return b.create<FusedConv2dOp>(v[0], v[1], v[2], V{1, 1}, V{1, 1}, V{1, 1}, std::int64_t{8},
                                                     "silu", f)
                          .operation();
                    });
  }
}

TEST_CASE("a bf16 fused_conv2d whose bias does not match its output channels is an error naming the op",
          "[kernel][half][conv]") {
  const DataType bf = DataType::BFloat16;
  const Tensor x = random_half({2, 4, 7, 7}, bf, 1), w = random_half({6, 4, 3, 3}, bf, 2);
  const Tensor short_bias = random_half({5}, bf, 4);
  KILN_CHECK_ERROR(run_kernel({x, w, short_bias}, [bf](Builder& b, const std::vector<Value>& v) {
                     const Value bias = b.create<DataOp>("bias", V{6}, bf).result();
                     Operation* op = b.create<FusedConv2dOp>(v[0], v[1], bias).operation();
                     op->set_operand(2, v[2]);  // past the builder's check: the kernel's own
                     return op;
                   }),
                   InvalidArgument, {"kiln.fused_conv2d", "bias is [5]", "6 output channels"});
}

TEST_CASE("a bf16 or f16 layer_norm keeps its mean and rstd in f32, so its gradient stays accurate for rows far "
          "from zero",
          "[kernel][half][norm]") {
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    // Rows around 100 with a spread of about one: in 16 bits the mean
    // would round by up to a quarter, a quarter of a standard deviation.
    const std::int64_t m = 8, n = 64;
    Tensor x = Tensor::empty({m, n}, dt), dy = random_half({m, n}, dt, 3), w = random_half({n}, dt, 4);
    const Tensor noise = random_half({m, n}, dt, 5);
    for (std::int64_t i = 0; i < m * n; ++i)
      static_cast<std::uint16_t*>(x.raw_data())[i] =
          to_half(100.3f + from_half(static_cast<const std::uint16_t*>(noise.raw_data())[i], dt), dt);
    const Tensor b = random_half({n}, dt, 6);
    const auto fwd = run_op<LayerNormOp>({x, w, b}, std::int64_t{1}, 1e-5);
    REQUIRE(fwd.out(1).dtype() == DataType::Float32);
    REQUIRE(fwd.out(2).dtype() == DataType::Float32);
    const auto wide = run_op<LayerNormOp>({widen(x), widen(w), widen(b)}, std::int64_t{1}, 1e-5);
    CHECK(kiln_test::same_bits(fwd.out(1), wide.out(1)));
    CHECK(kiln_test::same_bits(fwd.out(2), wide.out(2)));
    const auto grad = run_op<GradOf<LayerNormOp>>({x, w, fwd.out(1), fwd.out(2), dy}, std::int64_t{1}, 1e-5);
    const auto want = run_op<GradOf<LayerNormOp>>({widen(x), widen(w), wide.out(1), wide.out(2), widen(dy)},
                                                 std::int64_t{1}, 1e-5);
    for (std::uint32_t r = 0; r < 3; ++r) {
      INFO("gradient #" << r);
      CHECK(is_rounded(grad.out(r), want.out(r)));
    }
  }
}

TEST_CASE("a 16-bit layer_norm_grad given statistics in x's dtype instead of f32 is an error naming the op",
          "[kernel][half][norm]") {
  const DataType dt = DataType::BFloat16;
  const Tensor x = random_half({2, 4}, dt, 1), w = random_half({4}, dt, 2), s = random_half({2}, dt, 3);
  KILN_CHECK_ERROR(run_op<GradOf<LayerNormOp>>({x, w, s, s, x}, std::int64_t{1}, 1e-5), InvalidArgument,
                   {"kiln.layer_norm_grad", "f32"});
}

namespace {

// A mixed batch norm's operands: x and dy in `dt`, the [C] ones f32.
struct MixedNormCase {
  Tensor x, dy, scale, bias, rm, rv;
  MixedNormCase(const Dims& d, std::int64_t c, DataType dt, unsigned seed)
      : x(random_half(d, dt, seed)),
        dy(random_half(d, dt, seed + 1)),
        scale(kiln_test::filled<float>(Dims{c}, 0.5, 1.5, seed + 2)),
        bias(kiln_test::filled<float>(Dims{c}, -1, 1, seed + 3)),
        rm(kiln_test::filled<float>(Dims{c}, -0.5, 0.5, seed + 4)),
        rv(kiln_test::filled<float>(Dims{c}, 0.5, 2, seed + 5)) {}
};

Tensor f32_copy(const Tensor& t) { return Tensor::from_vector<float>(t.dims(), t.to_vector<float>()); }

// batch_norm (act empty) or fused_batch_norm (act relu / relu6) forward,
// in `format`: {x, scale, bias, rm, rv}.
kiln_test::KernelRun mixed_forward(const std::vector<Tensor>& in, bool is_test, const std::string& format,
                                  const std::string& act) {
  if (act.empty()) return run_op<BatchNormOp>(in, 0.9, 1e-5, is_test, format);
  return run_op<FusedBatchNormOp>(in, 0.9, 1e-5, is_test, format, act);
}

// Its gradient: x, scale, (fused: bias,) saved_mean, saved_invstd, dy.
kiln_test::KernelRun mixed_backward(const MixedNormCase& k, const Tensor& x, const Tensor& dy,
                                   const kiln_test::KernelRun& fwd, bool is_test, const std::string& format,
                                   const std::string& act) {
  if (act.empty())
    return run_op<GradOf<BatchNormOp>>({x, k.scale, fwd.out(3), fwd.out(4), dy}, 0.9, 1e-5, is_test, format);
  return run_op<GradOf<FusedBatchNormOp>>({x, k.scale, k.bias, fwd.out(3), fwd.out(4), dy}, 0.9, 1e-5, is_test,
                                          format, act);
}

// The 16-bit batch norm and its gradient against the f32 kernels on the
// widened x and dy: y and dx those results rounded once, the saved
// statistics, dscale, dbias and the running statistics (updated in place)
// the same f32 bits.
void check_mixed_batch_norm(const Dims& d, DataType dt, const std::string& format, const std::string& act,
                            bool is_test, unsigned seed) {
  INFO(to_string(dt) << " x [" << d.to_string() << "] " << format << " '" << act << "' is_test " << is_test);
  const MixedNormCase k(d, format == "NHWC" ? d[3] : d[1], dt, seed);
  Tensor rm = f32_copy(k.rm), rv = f32_copy(k.rv);
  const auto got = mixed_forward({k.x, k.scale, k.bias, k.rm, k.rv}, is_test, format, act);
  const auto want = mixed_forward({widen(k.x), k.scale, k.bias, rm, rv}, is_test, format, act);
  REQUIRE(got.out(0).dtype() == dt);
  CHECK(is_rounded(got.out(0), want.out(0)));
  for (std::uint32_t r = 1; r < 5; ++r) {
    INFO("result #" << r);
    CHECK(kiln_test::same_bits(got.out(r), want.out(r)));
  }
  CHECK(kiln_test::same_bits(k.rm, rm));  // the f32 running statistics, updated in place alike
  CHECK(kiln_test::same_bits(k.rv, rv));
  const auto grad = mixed_backward(k, k.x, k.dy, got, is_test, format, act);
  const auto wgrad = mixed_backward(k, widen(k.x), widen(k.dy), want, is_test, format, act);
  REQUIRE(grad.out(0).dtype() == dt);
  CHECK(is_rounded(grad.out(0), wgrad.out(0)));
  CHECK(kiln_test::same_bits(grad.out(1), wgrad.out(1)));
  CHECK(kiln_test::same_bits(grad.out(2), wgrad.out(2)));
}

}  // namespace

TEST_CASE("a bf16 or f16 batch_norm or fused_batch_norm with f32 parameters and its gradient are the f32 "
          "kernels on the widened x and dy, y and dx rounded once, the running statistics f32 and in place",
          "[kernel][half][norm]") {
  for (DataType dt : {DataType::BFloat16, DataType::Float16})
    for (const std::string act : {"", "relu", "relu6"})
      for (bool is_test : {false, true}) {
        check_mixed_batch_norm(Dims{2, 5, 7, 9}, dt, "NCHW", act, is_test, 31);
        check_mixed_batch_norm(Dims{3, 20, 4, 4}, dt, "NCHW", act, is_test, 32);
        check_mixed_batch_norm(Dims{5, 6, 13, 11}, dt, "NCHW", act, is_test, 34);
        check_mixed_batch_norm(Dims{2, 7, 9, 5}, dt, "NHWC", act, is_test, 33);
        check_mixed_batch_norm(Dims{3, 6, 5, 37}, dt, "NHWC", act, is_test, 35);
      }
}

TEST_CASE("a 16-bit batch_norm whose running statistics are its own variables updates them in place, f32",
          "[kernel][half][norm]") {
  const MixedNormCase k(Dims{4, 3, 2, 2}, 3, DataType::BFloat16, 41);
  const Tensor rm0 = f32_copy(k.rm);
  const auto r = run_op<BatchNormOp>({k.x, k.scale, k.bias, k.rm, k.rv}, 0.9, 1e-5, false, std::string("NCHW"));
  CHECK(k.rm.dtype() == DataType::Float32);
  CHECK(!kiln_test::same_bits(k.rm, rm0));
  CHECK(kiln_test::same_bits(r.out(1), k.rm));
}

namespace {
template <typename... OpTs>
void check_kernel_names(OpTypeList<OpTs...>,
                        std::initializer_list<DataType> dtypes = {DataType::BFloat16, DataType::Float16}) {
  for (DataType dt : dtypes) {
    INFO(to_string(dt));
    const auto check = [&](TypeId op, std::string_view name) {
      INFO(name);
      const KernelInfo* k = KernelRegistry::instance().find(op, PlaceKind::Cpu, dt);
      REQUIRE(k != nullptr);
      CHECK(k->name.size() == name.size());
      CHECK(k->name == name);
    };
    (check(TypeId::get<OpTs>(), OpTs::name), ...);
  }
}
// The unary family's kernels, f32 ones included, under their own op's name:
// "kiln.tanh_grad" for the gradient, not the forward's.
template <typename... Maths>
void check_unary_kernel_names(MathList<Maths...>) {
  check_kernel_names(OpTypeList<UnaryOp<Maths>..., GradOf<UnaryOp<Maths>>...>{},
                     {DataType::BFloat16, DataType::Float16, DataType::Float32, DataType::Float64});
}
}  // namespace

TEST_CASE("a gradient op's name ends in a NUL, and its kernels carry that name whole",
          "[kernel][half]") {
  // A name built from the forward op's (GradName) is read as a C string by
  // code that registers kernels under it; without the NUL the read runs past it.
  STATIC_REQUIRE(GradOf<Conv2dOp>::name == "kiln.conv2d_grad");
  STATIC_REQUIRE(GradOf<Conv2dOp>::name.data()[GradOf<Conv2dOp>::name.size()] == '\0');
  STATIC_REQUIRE(GradOf<BatchNormOp>::name.data()[GradOf<BatchNormOp>::name.size()] == '\0');
  check_kernel_names(HalfViaF32Ops{});
  check_kernel_names(OpTypeList<GradOf<BatchNormOp>, GradOf<FusedBatchNormOp>>{});
  check_unary_kernel_names(UnaryFamily{});
}

namespace {
template <typename... Maths>
void check_unary_family(MathList<Maths...>, DataType dt) {
  // Long enough for several of the kernels' chunks and both threads; values
  // in [-2, 2), so log, sqrt, acosh and the rest also meet NaNs.
  const Tensor x = random_half({3, 2501}, dt, 11), d = random_half({3, 2501}, dt, 12);
  const auto one = [&]<typename Math>(Math*) {
    check_rounded(Math::name, {x}, [](Builder& b, const std::vector<Value>& v) {
      return b.create<UnaryOp<Math>>(v[0]).operation();
    });
    check_rounded(GradOf<UnaryOp<Math>>::name, {x, d}, [](Builder& b, const std::vector<Value>& v) {
      return b.create<GradOf<UnaryOp<Math>>>(v[0], v[1]).operation();
    });
  };
  (one(static_cast<Maths*>(nullptr)), ...);
}
}  // namespace

TEST_CASE("the bf16 and f16 unary family and gelu, and their gradients, are the f32 kernels on the widened "
          "operands, rounded once",
          "[kernel][half]") {
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    check_unary_family(UnaryFamily{}, dt);
    const Tensor x = random_half({3, 2501}, dt, 13), d = random_half({3, 2501}, dt, 14);
    for (bool approximate : {false, true}) {
      INFO("approximate " << approximate);
      check_rounded("gelu", {x}, [&](Builder& b, const std::vector<Value>& v) {
        return b.create<GeluOp>(v[0], approximate).operation();
      });
      check_rounded("gelu_grad", {x, d}, [&](Builder& b, const std::vector<Value>& v) {
        return b.create<GradOf<GeluOp>>(GradOf<GeluOp>::Attributes{approximate}, v[0], v[1]).operation();
      });
    }
  }
}

namespace {
// `t` with ties and NaNs: every third element on an integer (so windows
// hold equal maxima) and every 29th a NaN.
Tensor with_ties_and_nans(Tensor t) {
  auto* p = static_cast<std::uint16_t*>(t.raw_data());
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (i % 3 == 0) p[i] = to_half(std::round(from_half(p[i], t.dtype())), t.dtype());
    if (i % 29 == 0) p[i] = to_half(std::nanf(""), t.dtype());
  }
  return t;
}

struct MaxPoolCase {
  V kernel, strides, paddings;
  bool ceil_mode;
};

void check_max_pool(const MaxPoolCase& c, const Tensor& x, const std::string& format, unsigned seed) {
  const MaxPool2dOp::Attributes attrs{c.kernel, c.strides, c.paddings, c.ceil_mode, format};
  const Make forward = [&](Builder& b, const std::vector<Value>& v) {
    return b.create<MaxPool2dOp>(v[0], c.kernel, c.strides, c.paddings, c.ceil_mode, format).operation();
  };
  check_rounded("max_pool2d", {x}, forward);
  const Dims pooled = run_kernel({widen(x)}, forward).out().dims();
  check_rounded("max_pool2d_grad", {x, random_half(pooled, x.dtype(), seed)},
                [&](Builder& b, const std::vector<Value>& v) {
                  return b.create<GradOf<MaxPool2dOp>>(attrs, v[0], v[1]).operation();
                });
}
}  // namespace

TEST_CASE("a bf16 or f16 max_pool2d and its gradient, NCHW or NHWC, are the f32 kernels on the widened "
          "operands, rounded once, ties and NaNs included",
          "[kernel][half]") {
  const MaxPoolCase cases[] = {{V{2, 2}, V{2, 2}, V{0, 0}, false}, {V{3, 3}, V{2, 2}, V{1, 1}, false},
                               {V{3, 3}, V{1, 1}, V{1, 1}, false}, {V{2, 2}, V{2, 2}, V{0, 0}, true},
                               {V{2, 2}, V{2, 2}, V{1, 0}, false}, {V{3, 2}, V{3, 3}, V{1, 0}, true}};
  for (DataType dt : {DataType::BFloat16, DataType::Float16})
    for (const MaxPoolCase& c : cases) {
      INFO(to_string(dt) << ", kernel " << c.kernel[0] << "x" << c.kernel[1] << ", stride " << c.strides[0]
                         << ", padding " << c.paddings[0] << ", ceil " << c.ceil_mode);
      // Odd sizes; NHWC with a channel count past one vector and more
      // output rows than one widened run.
      check_max_pool(c, with_ties_and_nans(random_half({3, 4, 21, 19}, dt, 21)), "NCHW", 22);
      check_max_pool(c, with_ties_and_nans(random_half({3, 23, 19, 37}, dt, 23)), "NHWC", 24);
      check_max_pool(c, with_ties_and_nans(random_half({2, 6, 7, 3}, dt, 25)), "NHWC", 26);
      // An even width: runs of rows a 2x2 pool takes whole while the
      // image's last row (ceil mode, padding) it does not.
      check_max_pool(c, with_ties_and_nans(random_half({2, 23, 20, 5}, dt, 27)), "NHWC", 28);
    }
}

TEST_CASE("a bf16 max_pool2d_grad whose dout does not have the pooled shape is an error naming the op",
          "[kernel][half]") {
  const Tensor x = random_half({1, 2, 8, 8}, DataType::BFloat16, 27);
  for (const std::string format : {"NCHW", "NHWC"}) {
    INFO(format);
    const Dims pooled = format == "NCHW" ? Dims{1, 2, 4, 4} : Dims{1, 1, 4, 8};
    const Tensor wrong = random_half({1, 2, 3, 3}, DataType::BFloat16, 28);
    KILN_CHECK_ERROR(run_kernel({x, wrong},
                                [&](Builder& b, const std::vector<Value>& v) {
                                  const Value dout =
                                      b.create<DataOp>("dout", pooled.to_vector(), DataType::BFloat16).result();
                                  Operation* op = b.create<GradOf<MaxPool2dOp>>(
                                                       MaxPool2dOp::Attributes{V{2, 2}, V{2, 2}, V{0, 0}, false,
                                                                               format},
                                                       v[0], dout)
                                                      .operation();
                                  op->set_operand(1, v[1]);  // past the builder's check: the kernel's own
                                  return op;
                                }),
                     InvalidArgument, {"kiln.max_pool2d_grad", "dout"});
  }
}

TEST_CASE("a bf16 or f16 reduce_as is the f32 kernel on the widened x, rounded once, for every way of summing",
          "[kernel][half]") {
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    const Tensor x = random_half({4, 33, 65}, dt, 30);
    // A bias gradient's rows, a column sum, all into one, nothing summed.
    for (const Dims& target : {Dims{65}, Dims{1, 65}, Dims{33, 1}, Dims{4, 1, 65}, Dims{1}, Dims{4, 33, 65}}) {
      INFO("to [" << target.to_string() << "]");
      check_rounded("reduce_as", {x, random_half(target, dt, 31)}, [](Builder& b, const std::vector<Value>& v) {
        return b.create<ReduceAsOp>(v[0], v[1]).operation();
      });
    }
    KILN_CHECK_ERROR(run_kernel({x, random_half({5}, dt, 32)},
                                [&](Builder& b, const std::vector<Value>& v) {
                                  const Value fits = b.create<DataOp>("fits", V{65}, dt).result();
                                  Operation* op = b.create<ReduceAsOp>(v[0], fits).operation();
                                  op->set_operand(1, v[1]);  // past the builder's check: the kernel's own
                                  return op;
                                }),
                     InvalidArgument, {"kiln.reduce_as", "cannot sum [4x33x65] down to [5]"});
  }
}

namespace {
template <typename... Maths>
void check_binary_family(BinaryMathList<Maths...>, DataType dt) {
  // Several chunks and both threads; rows, a scalar and a column (the
  // broadcast that widens whole) on either side.
  const Tensor x = with_ties_and_nans(random_half({4, 9001}, dt, 40)), same = random_half({4, 9001}, dt, 41);
  const Tensor row = random_half({9001}, dt, 42), row1 = random_half({1, 9001}, dt, 43);
  const Tensor scalar = random_half({}, dt, 44), one = random_half({1}, dt, 45), column = random_half({4, 1}, dt, 46);
  const auto each = [&]<typename Math>(Math*) {
    if constexpr (!integer_only_math<Math>) {
      for (const Tensor* other : {&same, &row, &row1, &scalar, &one, &column}) {
        INFO(Math::name << " with [" << other->dims().to_string() << "]");
        const Make make = [](Builder& b, const std::vector<Value>& v) {
          return b.create<BinaryOp<Math>>(v[0], v[1]).operation();
        };
        check_rounded(Math::name, {x, *other}, make);
        check_rounded(Math::name, {*other, x}, make);
      }
    }
  };
  (each(static_cast<Maths*>(nullptr)), ...);
}
}  // namespace

TEST_CASE("the bf16 and f16 binary family, broadcast any way, is the f32 kernel on the widened operands, rounded "
          "once; an operand of another dtype is an error naming the op",
          "[kernel][half]") {
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    INFO(to_string(dt));
    check_binary_family(BinaryFamily{}, dt);
  }
  const Tensor bf = random_half({4, 9}, DataType::BFloat16, 47), f16 = random_half({4, 9}, DataType::Float16, 48);
  KILN_CHECK_ERROR(run_kernel({bf, f16}, [](Builder& b, const std::vector<Value>& v) {
                     Operation* op = b.create<AddOp>(v[0], v[0]).operation();
                     op->set_operand(1, v[1]);  // past the builder's check: the kernel's own
                     return op;
                   }),
                   InvalidArgument, {"kiln.add", "input #1 is f16"});
}
