// kiln.fused_matmul on CUDA against the CPU: through cuBLASLt's bias and
// relu epilogues (one GEMM, y one matrix, x not transposed) and through the
// product-then-epilogue route (any other shape, f64). The operands are
// whole numbers small enough that every sum is exact in any order and
// every result exact in the dtype, so each route must give the CPU's bits
// (16-bit: the f32 CPU kernel on the widened operands, rounded once).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernel/cuda_test_util.h"
#include "kernel/half_test_util.h"
#include "kiln/dialect/fused_ops.h"
#include "kiln/exec/executor.h"

using namespace kiln;
using kiln_test::have_cuda;
using kiln_test::integers;
using kiln_test::run_cuda_kernel;
using kiln_test::run_kernel;

namespace {

struct Case {
  const char* what;
  Dims x, y;
  std::vector<std::int64_t> bias;  // empty: none
  bool tx, ty;
  const char* activation;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"batched rows, bias and relu (cuBLASLt)", {2, 5, 8}, {8, 6}, {6}, false, false, "kiln.relu"},
      {"y transposed, bias only (cuBLASLt)", {7, 8}, {6, 8}, {6}, false, true, ""},
      {"x transposed (product, then epilogue)", {2, 8, 5}, {8, 6}, {6}, true, false, "kiln.relu"},
      {"one-element bias (product, then epilogue)", {3, 8}, {8, 6}, {1}, false, false, "kiln.relu"},
      {"no bias, relu (product, then epilogue)", {3, 8}, {8, 6}, {}, false, false, "kiln.relu"},
      {"y batched (product, then epilogue)", {2, 3, 8}, {2, 8, 6}, {6}, false, false, ""},
  };
  return all;
}

Operation* make_fused(Builder& b, const std::vector<Value>& v, const Case& c) {
  return b.create<FusedMatmulOp>(v[0], v[1], v.size() > 2 ? v[2] : Value(), c.tx, c.ty, c.activation)
      .operation();
}

// An f32 tensor as dt, or a 16-bit one as f32 (exactly: whole numbers).
Tensor converted(const Tensor& t, DataType dt) {
  if (dt == t.dtype()) return t;
  if (dt == DataType::Float64) {
    const std::vector<float> v = t.to_vector<float>();
    return Tensor::from_vector<double>(t.dims(), std::vector<double>(v.begin(), v.end()));
  }
  if (dt == DataType::Float32) {
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    const auto* p = static_cast<const std::uint16_t*>(t.raw_data());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = kiln_test::from_half(p[i], t.dtype());
    return Tensor::from_vector<float>(t.dims(), v);
  }
  Tensor h = Tensor::empty(t.dims(), dt);
  auto* p = static_cast<std::uint16_t*>(h.raw_data());
  const std::vector<float> v = t.to_vector<float>();
  for (std::size_t i = 0; i < v.size(); ++i) p[i] = kiln_test::to_half(v[i], dt);
  return h;
}

std::vector<Tensor> operands(const Case& c, DataType dt) {
  auto as = [&](const Tensor& t) { return converted(t, dt); };
  std::vector<Tensor> in{as(integers<float>(c.x, 1, -2, 2)), as(integers<float>(c.y, 2, -2, 2))};
  if (!c.bias.empty()) in.push_back(as(integers<float>(Dims(c.bias), 3, -4, 4)));
  return in;
}

}  // namespace

TEST_CASE("fused_matmul on CUDA gives the CPU's bits in f32 and f64, through cuBLASLt's epilogue and "
          "through the product then the epilogue",
          "[kernel][cuda]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::Float32, DataType::Float64})
    for (const Case& c : cases()) {
      INFO(to_string(dt) << ": " << c.what);
      const std::vector<Tensor> in = operands(c, dt);
      auto make = [&](Builder& b, const std::vector<Value>& v) { return make_fused(b, v, c); };
      const Tensor cpu = run_kernel(in, make).out();
      const Tensor gpu = run_cuda_kernel(in, make).out();
      CHECK(kiln_test::same_bits(gpu, cpu));
    }
}

TEST_CASE("a bf16 or f16 fused_matmul on CUDA rounds once what the f32 kernel computes on the widened "
          "operands",
          "[kernel][half][cuda]") {
  if (!have_cuda()) return;
  for (DataType dt : {DataType::BFloat16, DataType::Float16})
    for (const Case& c : cases()) {
      INFO(to_string(dt) << ": " << c.what);
      const std::vector<Tensor> in = operands(c, dt);
      std::vector<Tensor> wide;
      for (const Tensor& t : in) wide.push_back(converted(t, DataType::Float32));
      auto make = [&](Builder& b, const std::vector<Value>& v) { return make_fused(b, v, c); };
      const Tensor want = converted(run_kernel(wide, make).out(), dt);
      const Tensor gpu = run_cuda_kernel(in, make).out();
      REQUIRE(gpu.dtype() == dt);
      CHECK(kiln_test::same_bits(gpu, want));
    }
}

TEST_CASE("a fused_matmul on CUDA with an activation cuBLASLt does not apply, or a bias of the wrong "
          "size, is a kiln::Error naming the op",
          "[kernel][cuda]") {
  if (!have_cuda()) return;
  const Tensor x = integers<float>({3, 8}, 1, -2, 2), y = integers<float>({8, 6}, 2, -2, 2);
  const Tensor b6 = integers<float>({6}, 3, -2, 2);
  CHECK_THROWS_WITH(run_cuda_kernel({x, y, b6},
                                    [](Builder& b, const std::vector<Value>& v) {
                                      return b.create<FusedMatmulOp>(v[0], v[1], v[2], false, false, "kiln.tanh")
                                          .operation();
                                    }),
                    Catch::Contains("kiln.fused_matmul") && Catch::Contains("'kiln.tanh'"));
  // A bias whose size is known only at run time, on either route.
  for (bool tx : {false, true}) {
    INFO("transpose_x " << tx);
    Program p;
    Builder bl(p);
    Value xv = bl.create<DataOp>("x", tx ? std::vector<std::int64_t>{8, 3} : std::vector<std::int64_t>{3, 8}).result();
    Value yv = bl.create<DataOp>("y", std::vector<std::int64_t>{8, 6}).result();
    Value bias = bl.create<DataOp>("b", std::vector<std::int64_t>{-1}).result();
    Value r = bl.create<FusedMatmulOp>(xv, yv, bias, tx, false, "kiln.relu").operation()->result(0);
    Executor exe(Place::cuda(0), {.passes = ""});
    const FeedMap feed{{"x", integers<float>(tx ? Dims{8, 3} : Dims{3, 8}, 1, -2, 2)},
                       {"y", y},
                       {"b", integers<float>({4}, 3, -2, 2)}};
    CHECK_THROWS_WITH(exe.run(p, feed, {r}),
                      Catch::Contains("kiln.fused_matmul") && Catch::Contains("bias has 4 elements"));
  }
}

// kiln's relu gives 0 for NaN (`x > 0 ? x : 0`); cuBLASLt's RELU_BIAS
// epilogue keeps it (seen on an H200), so the kernel applies relu itself.
// A NaN bias makes its column NaN before the relu, on both routes.
TEST_CASE("a NaN before a fused_matmul's relu gives 0 on CUDA, as on the CPU, on both routes",
          "[kernel][cuda]") {
  if (!have_cuda()) return;
  for (bool tx : {false, true}) {
    INFO((tx ? "x transposed (product, then epilogue)" : "cuBLASLt's BIAS epilogue, then relu"));
    const Tensor x = integers<float>(tx ? Dims{8, 5} : Dims{5, 8}, 1, -2, 2);
    const Tensor y = integers<float>({8, 6}, 2, -2, 2);
    std::vector<float> b = integers<float>({6}, 3, -4, 4).to_vector<float>();
    b[2] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<Tensor> in{x, y, Tensor::from_vector<float>({6}, b)};
    auto make = [&](Builder& bl, const std::vector<Value>& v) {
      return bl.create<FusedMatmulOp>(v[0], v[1], v[2], tx, false, "kiln.relu").operation();
    };
    const Tensor cpu = run_kernel(in, make).out();
    const Tensor gpu = run_cuda_kernel(in, make).out();
    for (std::int64_t r = 0; r < 5; ++r) CHECK(cpu.to_vector<float>()[std::size_t(r * 6 + 2)] == 0.0f);
    CHECK(kiln_test::same_bits(gpu, cpu));
  }
}

namespace {

// |got - want| <= abs + rel·|want| elementwise, both read as f32.
void check_close(const Tensor& got, const Tensor& want, float abs, float rel) {
  REQUIRE(got.dtype() == want.dtype());
  const std::vector<float> g = converted(got, DataType::Float32).to_vector<float>();
  const std::vector<float> w = converted(want, DataType::Float32).to_vector<float>();
  REQUIRE(g.size() == w.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i) bad += !(std::abs(g[i] - w[i]) <= abs + rel * std::abs(w[i]));
  CHECK(bad == 0);
}

}  // namespace

// gelu after the product and bias: the erf form by the kernel's own pass
// (erfc on the device; the CPU's Φ comes from a vectorized exp), the tanh
// form in cuBLASLt's GELU_BIAS / GELU_AUX_BIAS epilogue where it is one
// GEMM with a row bias (cuBLASLt's tanh), else by the pass (also where
// cuBLASLt turns the epilogue down: the refusal is kept, so each case runs
// twice, the second launch from the cache). The sums are whole numbers,
// exact in every dtype, so the kept pre-activation is the CPU's bits; the
// activation within f32's or the dtype's rounding.
TEST_CASE("a fused_matmul's gelu on CUDA, either form, tracks the CPU's, and the pre-activation it keeps is "
          "the CPU's bits",
          "[kernel][half][cuda]") {
  if (!have_cuda()) return;
  const std::vector<Case> gelu_cases = {
      {"one GEMM with a row bias (cuBLASLt)", {2, 5, 8}, {8, 16}, {16}, false, false, ""},
      {"x transposed (product, then epilogue)", {2, 8, 5}, {8, 16}, {16}, true, false, ""},
      {"one-element bias (product, then epilogue)", {3, 8}, {8, 16}, {1}, false, false, ""},
  };
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float16})
    for (const char* form : {"kiln.gelu", "kiln.gelu_tanh"})
      for (bool keep : {false, true})
        for (const Case& c : gelu_cases) {
          INFO(to_string(dt) << ", " << form << (keep ? ", kept" : "") << ": " << c.what);
          const std::vector<Tensor> in = operands(c, dt);
          auto make = [&](Builder& b, const std::vector<Value>& v) {
            return b.create<FusedMatmulOp>(v[0], v[1], v[2], c.tx, c.ty, form, keep).operation();
          };
          const auto cpu = run_kernel(in, make);
          const auto gpu = run_cuda_kernel(in, make);
          // cuBLASLt's tanh is likely the hardware's approximate one (about
          // 2^-11 relative): 2e-3 absolute for that form.
          const float rel = dt == DataType::Float32 ? 1e-4f : dt == DataType::BFloat16 ? 1e-2f : 2e-3f;
          const float abs = std::string(form) == "kiln.gelu_tanh" ? 2e-3f : 1e-4f;
          check_close(gpu.out(), cpu.out(), abs, rel);
          if (keep) CHECK(kiln_test::same_bits(gpu.out(1), cpu.out(1)));
          // Again: cuBLASLt's algorithm, or its refusal, now from the cache.
          const auto again = run_cuda_kernel(in, make);
          check_close(again.out(), cpu.out(), abs, rel);
          if (keep) CHECK(kiln_test::same_bits(again.out(1), cpu.out(1)));
        }
}
