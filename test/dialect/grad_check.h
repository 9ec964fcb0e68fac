// Finite-difference checks of an op's Vjp in f64: every
// differentiable op has a Vjp, each checked against finite differences.
// check_vjp builds the op on kiln.data inputs, asks its VjpInterface for the
// operands' grads given random out_grads w (fed, so their shapes may be -1),
// runs them through kiln::Executor, and compares each element with the
// central difference of Σ_r sum(out_r · w_r) from the forward program.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/runtime/tensor.h"

namespace kiln_vjp_test {

// Builds the op under test from the data values (one per input).
using MakeOp =
    std::function<kiln::Operation*(kiln::Builder&, const std::vector<kiln::Value>&)>;

struct GradCheckOptions {
  double eps = 1e-6;
  double rtol = 1e-6;  // |analytic - numeric| <= atol + rtol · max(|analytic|, |numeric|)
  double atol = 1e-7;
  // Per input: the shape its kiln.data op declares (-1 = known at run time
  // only). Missing or empty entries declare the fed tensor's exact dims.
  std::vector<std::vector<std::int64_t>> declared;
  // Declare dim 0 of every input of rank >= 1 as -1 (a batch dim unknown
  // at build time); `declared` entries win.
  bool unknown_batch = false;
  // Per result: false = its out_grad is a null Value (no gradient flows).
  // Missing entries: true for floating results, false for the others.
  std::vector<bool> result_grads;
  // Floating inputs the op gives no gradient by design (checked null): a
  // region's corners.
  std::vector<std::size_t> without_grad;
};

// The numbers the check compared (for tests that assert more).
struct GradCheckReport {
  std::vector<kiln::Tensor> grads;  // per input: the fetched grad (empty for a null one)
  std::size_t compared = 0;         // elements compared with finite differences
};

// Runs the check; Catch2 CHECKs report the op, the input and the element of
// any mismatch. Integer inputs are fed as given and must get a null grad.
GradCheckReport check_vjp(const std::vector<kiln::Tensor>& inputs, const MakeOp& make,
                          const GradCheckOptions& options = {});

// Convenience for ops built as b.create<OpT>(v0, v1, …, args…) (variadic
// ops, num_operands < 0, get the values as one std::vector<Value>).
template <typename OpT, typename... Args>
MakeOp make_op(Args... args) {
  return [=](kiln::Builder& b, const std::vector<kiln::Value>& v) -> kiln::Operation* {
    if constexpr (OpT::num_operands < 0) {
      return b.create<OpT>(v, args...).operation();
    } else if constexpr (OpT::num_operands == 1) {
      REQUIRE(v.size() == 1);
      return b.create<OpT>(v[0], args...).operation();
    } else if constexpr (OpT::num_operands == 2) {
      REQUIRE(v.size() == 2);
      return b.create<OpT>(v[0], v[1], args...).operation();
    } else {
      static_assert(OpT::num_operands == 3, "make_op handles ops of 1, 2, 3 or variadic operands");
      REQUIRE(v.size() == 3);
      return b.create<OpT>(v[0], v[1], v[2], args...).operation();
    }
  };
}

// Random f64 data in [lo, hi) (deterministic per seed).
kiln::Tensor random_f64(const kiln::Dims& dims, double lo = -1.0, double hi = 1.0,
                        std::uint32_t seed = 1);
// Random f64 data whose magnitudes lie in [lo, hi) with random signs: away
// from the kinks of relu / abs at 0.
kiln::Tensor random_away_from_zero(const kiln::Dims& dims, double lo = 0.2, double hi = 1.0,
                                   std::uint32_t seed = 1);
// An i64 tensor.
kiln::Tensor i64(const kiln::Dims& dims, const std::vector<std::int64_t>& values);

// The op's Vjp (kiln::Error-free REQUIRE that the op has one).
std::vector<kiln::Value> call_vjp(kiln::Builder& b, kiln::Operation* op,
                                  const std::vector<kiln::Value>& out_grads);

}  // namespace kiln_vjp_test
