// The f64 finite-difference Vjp checker of grad_check.h.
#include "dialect/grad_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/exec/executor.h"

namespace kiln_vjp_test {

using namespace kiln;

namespace {

// A fresh copy (an in-place op under test must not write the caller's data).
Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.dims(), t.dtype());
  if (t.bytes()) std::memcpy(c.raw_data(), t.raw_data(), t.bytes());
  return c;
}

std::vector<std::int64_t> declared_shape(const GradCheckOptions& o, std::size_t i,
                                         const Tensor& t) {
  if (i < o.declared.size() && !o.declared[i].empty()) return o.declared[i];
  auto d = t.dims().to_vector();
  if (o.unknown_batch && !d.empty()) d[0] = -1;
  return d;
}

struct Built {
  std::unique_ptr<Program> program;
  Operation* op = nullptr;
  std::vector<Value> inputs;
};

Built build_forward(const std::vector<Tensor>& inputs, const MakeOp& make,
                    const GradCheckOptions& o) {
  Built r;
  r.program = std::make_unique<Program>();
  Builder b(*r.program);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    r.inputs.push_back(b.create<DataOp>("x" + std::to_string(i), declared_shape(o, i, inputs[i]),
                                        inputs[i].dtype())
                           .result());
  r.op = make(b, r.inputs);
  REQUIRE(r.op != nullptr);
  return r;
}

FeedMap feeds_of(const std::vector<Tensor>& inputs) {
  FeedMap f;
  for (std::size_t i = 0; i < inputs.size(); ++i) f.emplace("x" + std::to_string(i), copy_of(inputs[i]));
  return f;
}

ExecutionOptions one_thread() {
  ExecutionOptions o;
  o.num_threads = 1;
  return o;
}

bool floating(DataType t) { return t == DataType::Float32 || t == DataType::Float64; }

}  // namespace

Tensor random_f64(const Dims& dims, double lo, double hi, std::uint32_t seed) {
  std::vector<double> v(static_cast<std::size_t>(dims.numel()));
  std::uint64_t s = seed * 2654435761ull + 12345;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = static_cast<double>(s >> 11) / 9007199254740992.0;  // [0, 1)
    x = lo + (hi - lo) * u;
  }
  return Tensor::from_vector<double>(dims, v);
}

Tensor random_away_from_zero(const Dims& dims, double lo, double hi, std::uint32_t seed) {
  auto mag = random_f64(dims, lo, hi, seed).to_vector<double>();
  auto sign = random_f64(dims, -1.0, 1.0, seed + 7919).to_vector<double>();
  for (std::size_t i = 0; i < mag.size(); ++i)
    if (sign[i] < 0) mag[i] = -mag[i];
  return Tensor::from_vector<double>(dims, mag);
}

Tensor i64(const Dims& dims, const std::vector<std::int64_t>& values) {
  return Tensor::from_vector<std::int64_t>(dims, values);
}

std::vector<Value> call_vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads) {
  auto vjp = op->dyn_cast<VjpInterface>();
  INFO("op " << op->name());
  REQUIRE(static_cast<bool>(vjp));
  return vjp.vjp(b, out_grads);
}

GradCheckReport check_vjp(const std::vector<Tensor>& inputs, const MakeOp& make,
                          const GradCheckOptions& o) {
  GradCheckReport report;
  Executor exe(Place::cpu(), one_thread());

  // Forward: result shapes, and f(inputs) = Σ_r sum(out_r · w_r).
  Built fwd = build_forward(inputs, make, o);
  const std::string op_name = fwd.op->name();
  INFO("op " << op_name);
  const std::uint32_t nr = fwd.op->num_results();
  std::vector<FetchTarget> fwd_fetch;
  for (std::uint32_t r = 0; r < nr; ++r) fwd_fetch.emplace_back(fwd.op->result(r));
  std::vector<Tensor> outs = exe.run(*fwd.program, feeds_of(inputs), fwd_fetch);
  REQUIRE(outs.size() == nr);

  std::vector<Tensor> w(nr);
  for (std::uint32_t r = 0; r < nr; ++r) {
    bool wanted = r < o.result_grads.size() ? o.result_grads[r] : floating(outs[r].dtype());
    if (!wanted) continue;
    REQUIRE(outs[r].dtype() == DataType::Float64);
    w[r] = random_f64(outs[r].dims(), -1.0, 1.0, 1000 + r);
  }
  auto objective = [&](const std::vector<Tensor>& x) {
    auto y = exe.run(*fwd.program, feeds_of(x), fwd_fetch);
    double f = 0;
    for (std::uint32_t r = 0; r < nr; ++r) {
      if (!w[r].is_initialized()) continue;
      auto yv = y[r].to_vector<double>();
      auto wv = w[r].to_vector<double>();
      for (std::size_t k = 0; k < yv.size(); ++k) f += yv[k] * wv[k];
    }
    return f;
  };

  // Backward: the op's Vjp on fed out_grads.
  Built bwd = build_forward(inputs, make, o);
  Builder b(*bwd.program);
  std::vector<Value> out_grads(nr);
  FeedMap feed = feeds_of(inputs);
  for (std::uint32_t r = 0; r < nr; ++r) {
    if (!w[r].is_initialized()) continue;
    const auto& rd = shaped_dims(bwd.op->result_type(r));
    out_grads[r] =
        b.create<DataOp>("w" + std::to_string(r), rd, DataType::Float64).result();
    feed.emplace("w" + std::to_string(r), copy_of(w[r]));
  }
  std::vector<Value> grads = call_vjp(b, bwd.op, out_grads);
  REQUIRE(grads.size() == inputs.size());
  std::vector<FetchTarget> grad_fetch;
  std::vector<std::size_t> fetched_for;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    INFO("input #" << i);
    if (!floating(inputs[i].dtype()) ||
        std::find(o.without_grad.begin(), o.without_grad.end(), i) != o.without_grad.end()) {
      CHECK(!grads[i]);  // integers, and what the op does not differentiate, get no gradient
      continue;
    }
    REQUIRE(static_cast<bool>(grads[i]));
    // The grad's static type: the operand's dtype, a shape compatible with it.
    Type gt = grads[i].type();
    CHECK(shaped_data_type(gt) == DataType::Float64);
    const auto& gd = shaped_dims(gt);
    const auto& xd = shaped_dims(bwd.inputs[i].type());
    REQUIRE(gd.size() == xd.size());
    for (std::size_t k = 0; k < gd.size(); ++k) CHECK((gd[k] == xd[k] || gd[k] < 0 || xd[k] < 0));
    grad_fetch.emplace_back(grads[i]);
    fetched_for.push_back(i);
  }
  bwd.program->verify();  // throws kiln::Error for a malformed grad op
  std::vector<Tensor> got = exe.run(*bwd.program, feed, grad_fetch);
  REQUIRE(got.size() == fetched_for.size());
  report.grads.resize(inputs.size());
  for (std::size_t k = 0; k < got.size(); ++k) report.grads[fetched_for[k]] = got[k];

  // Central differences, element by element.
  for (std::size_t i : fetched_for) {
    INFO("input #" << i << " dims [" << inputs[i].dims().to_string() << "]");
    const Tensor& g = report.grads[i];
    REQUIRE(g.dims() == inputs[i].dims());
    auto analytic = g.to_vector<double>();
    std::vector<Tensor> x;
    for (const auto& t : inputs) x.push_back(copy_of(t));
    for (std::int64_t j = 0; j < inputs[i].numel(); ++j) {
      double* p = x[i].data<double>() + j;
      const double orig = *p;
      *p = orig + o.eps;
      const double fp = objective(x);
      *p = orig - o.eps;
      const double fm = objective(x);
      *p = orig;
      const double numeric = (fp - fm) / (2 * o.eps);
      const double a = analytic[static_cast<std::size_t>(j)];
      const double tol = o.atol + o.rtol * std::max(std::abs(a), std::abs(numeric));
      INFO("element " << j << ": vjp " << a << ", finite difference " << numeric);
      CHECK(std::abs(a - numeric) <= tol);
      ++report.compared;
    }
  }
  return report;
}

}  // namespace kiln_vjp_test
