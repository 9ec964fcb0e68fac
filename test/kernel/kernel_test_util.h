// Helpers for kernel tests: run one op's CPU kernel without the executor.
// run_op<OpT>(inputs, attrs…) builds a Program (a kiln.data op per input
// tensor, then the op through a Builder, so InferMeta runs), gives each
// operand and result a Variable (an Inplace op's output shares its input's
// variable), decodes the attributes as the executor does (KernelInfo's
// decode_attrs), looks the kernel up in the KernelRegistry by the dtype of
// the first input (of the first result when there is none) and calls it.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/kernel/kernel_registry.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/cpu_allocator.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/variable.h"

namespace kiln_test {

// An f32 tensor of `dims` holding `values`.
inline kiln::Tensor f32(const kiln::Dims& dims, const std::vector<float>& values) {
  return kiln::Tensor::from_vector<float>(dims, values);
}

// 0, 1, 2, ... as T: every element distinct, so a misplaced one shows.
template <typename T>
kiln::Tensor iota(const std::vector<std::int64_t>& dims) {
  const kiln::Dims d(dims);
  std::vector<T> v(static_cast<std::size_t>(d.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(i);
  return kiln::Tensor::from_vector<T>(d, v);
}

// What one kernel run leaves behind: the program (owns the op), the op, its
// variables and the output tensors.
struct KernelRun {
  std::unique_ptr<kiln::Program> program;
  kiln::Operation* op = nullptr;
  std::vector<std::shared_ptr<kiln::Variable>> inputs, outputs;
  std::vector<kiln::Tensor> results;  // the output variables' tensors after the run

  const kiln::Tensor& out(std::size_t i = 0) const { return results.at(i); }
};

// Builds `make_op(builder, data values)` after one kiln.data op per input and
// runs its kernel. The data ops take each tensor's dims and dtype.
inline KernelRun run_kernel(
    const std::vector<kiln::Tensor>& inputs,
    const std::function<kiln::Operation*(kiln::Builder&, const std::vector<kiln::Value>&)>& make_op) {
  using namespace kiln;
  KernelRun run;
  run.program = std::make_unique<Program>();
  Builder b(*run.program);
  std::vector<Value> values;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    values.push_back(
        b.create<DataOp>("in" + std::to_string(i), t.dims().to_vector(), t.dtype()).result());
  }
  Operation* op = make_op(b, values);
  run.op = op;

  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto v = std::make_shared<Variable>("in" + std::to_string(i));
    v->set(inputs[i]);  // shares the caller's buffer, as a fed variable would
    run.inputs.push_back(std::move(v));
  }
  const auto& inplace = op->info().impl()->inplace_map;
  for (std::uint32_t r = 0; r < op->num_results(); ++r) {
    std::shared_ptr<Variable> var;
    for (auto [o, in] : inplace)
      if (o == r) var = run.inputs.at(in);
    if (!var) var = std::make_shared<Variable>("out" + std::to_string(r));
    run.outputs.push_back(std::move(var));
  }

  DataType dtype = !inputs.empty() ? inputs[0].dtype() : shaped_data_type(op->result_type(0));
  const KernelInfo& k = KernelRegistry::instance().get(*op, PlaceKind::Cpu, dtype);
  std::shared_ptr<const void> attrs = k.decode_attrs ? k.decode_attrs(op) : nullptr;
  std::vector<Variable*> in_ptrs, out_ptrs;
  for (auto& v : run.inputs) in_ptrs.push_back(v.get());
  for (auto& v : run.outputs) out_ptrs.push_back(v.get());
  KernelContext ctx(op, in_ptrs.data(), static_cast<std::uint32_t>(in_ptrs.size()), out_ptrs.data(),
                    static_cast<std::uint32_t>(out_ptrs.size()), attrs.get(), Place::cpu(),
                    &cpu_allocator());
  k.fn(ctx);

  for (std::uint32_t r = 0; r < op->num_results(); ++r) {
    const Tensor& t = run.outputs[r]->get<Tensor>();
    // The kernel's output agrees with what InferMeta promised.
    Type rt = op->result_type(r);
    CHECK(to_string(t.dtype()) == to_string(shaped_data_type(rt)));
    const auto& want = shaped_dims(rt);
    bool known = true;
    for (auto d : want) known = known && d >= 0;
    if (known) CHECK(t.dims().to_vector() == want);
    run.results.push_back(t);
  }
  return run;
}

namespace detail {
// A gradient op (GradOf<Fwd>) takes its attributes as the forward op's
// struct, built here from the remaining arguments.
template <typename OpT, std::size_t... I, typename... Args>
kiln::Operation* create_fixed(kiln::Builder& b, const std::vector<kiln::Value>& v,
                              std::index_sequence<I...>, Args&&... args) {
  REQUIRE(v.size() == sizeof...(I));
  // Trailing attributes the caller leaves out keep their defaults (a max
  // pool's data_format "NCHW"), as they do in the forward op's build.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
  if constexpr (requires { typename OpT::Spec; } && sizeof...(Args) > 0)
    return b.create<OpT>(typename OpT::Attributes{std::forward<Args>(args)...}, v[I]...)
        .operation();
  else
    return b.create<OpT>(v[I]..., std::forward<Args>(args)...).operation();
#pragma GCC diagnostic pop
}
// A gradient op with optional operands (GradSpec<-1, …>): create_fixed at
// v's count, up to 9.
template <typename OpT, std::size_t N = 1, typename... Args>
kiln::Operation* create_grad(kiln::Builder& b, const std::vector<kiln::Value>& v, Args&&... args) {
  if constexpr (N < 9)
    if (v.size() != N) return create_grad<OpT, N + 1>(b, v, std::forward<Args>(args)...);
  return create_fixed<OpT>(b, v, std::make_index_sequence<N>{}, std::forward<Args>(args)...);
}
// OpT on the values v: a variadic op (num_operands = -1) gets them as one
// std::vector<Value> argument, a gradient op with optional operands as
// create_grad, a fixed-arity op one by one.
template <typename OpT, typename... Args>
kiln::Operation* create_op(kiln::Builder& b, const std::vector<kiln::Value>& v, Args&&... args) {
  if constexpr (OpT::num_operands < 0 && requires { typename OpT::Spec; })
    return create_grad<OpT>(b, v, std::forward<Args>(args)...);
  else if constexpr (OpT::num_operands < 0)
    return b.create<OpT>(v, std::forward<Args>(args)...).operation();
  else
    return create_fixed<OpT>(b, v, std::make_index_sequence<OpT::num_operands>{}, std::forward<Args>(args)...);
}
}  // namespace detail

// run_op<SubOp>({x, y}); run_op<ScaleOp>({x}, 2.0f, 1.0f, true);
// run_op<AddNOp>({a, b, c}) — a variadic op (num_operands = -1) gets the
// values as one std::vector<Value> argument.
template <typename OpT, typename... Args>
KernelRun run_op(const std::vector<kiln::Tensor>& inputs, Args&&... args) {
  return run_kernel(inputs, [&](kiln::Builder& b, const std::vector<kiln::Value>& v) {
    return detail::create_op<OpT>(b, v, args...);
  });
}

// Builds the op on data ops of these types only (no kernel run): for
// InferMeta error tests. Types: {dtype, dims}.
struct TypeSpec {
  kiln::DataType dtype;
  std::vector<std::int64_t> dims;
};
template <typename OpT, typename... Args>
kiln::Operation* build_op(kiln::Program& p, const std::vector<TypeSpec>& ins, Args&&... args) {
  kiln::Builder b(p);
  std::vector<kiln::Value> v;
  for (std::size_t i = 0; i < ins.size(); ++i)
    v.push_back(b.create<kiln::DataOp>("in" + std::to_string(i), ins[i].dims, ins[i].dtype).result());
  return detail::create_op<OpT>(b, v, args...);
}


// Element-wise closeness: |a - b| <= atol + rtol * |b|; reports the first miss.
template <typename T>
void check_close(const kiln::Tensor& got, const std::vector<T>& want, double rtol = 1e-5,
                 double atol = 1e-6) {
  auto g = got.to_vector<T>();
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    double a = static_cast<double>(g[i]), w = static_cast<double>(want[i]);
    bool ok = (std::isnan(a) && std::isnan(w)) || (a == w) || std::abs(a - w) <= atol + rtol * std::abs(w);
    if (!ok) {
      INFO("element " << i << ": got " << a << ", want " << w);
      CHECK(ok);
      return;
    }
  }
}

// A tensor of `dims` filled with a deterministic pseudo-random sequence in
// [lo, hi) (a small LCG, so tests need no <random> state).
template <typename T>
kiln::Tensor filled(const kiln::Dims& dims, double lo = -1.0, double hi = 1.0, std::uint32_t seed = 1) {
  std::vector<T> v(static_cast<std::size_t>(dims.numel()));
  std::uint64_t s = seed * 2654435761ull + 12345;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = static_cast<double>(s >> 11) / 9007199254740992.0;  // [0, 1)
    x = static_cast<T>(lo + (hi - lo) * u);
  }
  return kiln::Tensor::from_vector<T>(dims, v);
}

// t [D0, D1, D2, D3] with axes 1 and 2 swapped (an attention operand
// between layouts BHLD and BLHD).
template <typename T>
kiln::Tensor swap12(const kiln::Tensor& t) {
  const kiln::Dims& d = t.dims();
  const std::vector<T> x = t.to_vector<T>();
  std::vector<T> y(x.size());
  for (std::int64_t a = 0; a < d[0]; ++a)
    for (std::int64_t i = 0; i < d[1]; ++i)
      for (std::int64_t j = 0; j < d[2]; ++j)
        for (std::int64_t c = 0; c < d[3]; ++c)
          y[static_cast<std::size_t>(((a * d[2] + j) * d[1] + i) * d[3] + c)] =
              x[static_cast<std::size_t>(((a * d[1] + i) * d[2] + j) * d[3] + c)];
  return kiln::Tensor::from_vector<T>({d[0], d[2], d[1], d[3]}, y);
}

}  // namespace kiln_test
