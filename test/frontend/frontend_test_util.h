// Helpers for the frontend tests: the error check, guarded programs, tensors
// from vectors, op counts, and gradients checked by central finite differences.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "cf_lowering_util.h"
#include "test_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/frontend/frontend.h"

namespace kiln_frontend_test {

using kiln_test::expect_error;  // test/test_util.h

// A (main, startup) pair under a ProgramGuard, with fresh unique names.
struct GuardedPrograms {
  kiln::Program main, startup;
  kiln::UniqueNameGuard names;
  kiln::ProgramGuard guard{main, startup};
};

inline kiln::Tensor f32(const std::vector<std::int64_t>& dims, const std::vector<float>& v) {
  return kiln::Tensor::from_vector<float>(kiln::Dims(dims), v);
}

// f32 values drawn from N(0, 1) with `seed`.
inline kiln::Tensor normal_f32(const std::vector<std::int64_t>& dims, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(static_cast<std::size_t>(kiln::Dims(dims).numel()));
  for (float& x : v) x = normal(rng);
  return f32(dims, v);
}

// Every tensor of `from`'s scope, copied into `to`'s (two executors that
// start training one model from the same parameters).
inline void copy_scope(kiln::Executor& from, kiln::Executor& to) {
  for (const std::string& name : from.scope().local_var_names())
    if (const kiln::Variable* v = from.scope().find_var(name); v && v->is<kiln::Tensor>())
      to.scope().var(name).set(v->get<kiln::Tensor>().clone());
}

// Every persistable tensor of the executor's scope (parameters, optimizer
// state, loss-scaling state), copied to the host.
inline std::map<std::string, kiln::Tensor> persistables(kiln::Executor& exe) {
  std::map<std::string, kiln::Tensor> out;
  for (const std::string& name : exe.scope().local_var_names())
    if (const kiln::Variable* v = exe.scope().find_var(name); v && v->is<kiln::Tensor>())
      out[name] = kiln::copy_to_place(v->get<kiln::Tensor>(), kiln::Place::cpu()).clone();
  return out;
}

// The ops of a program's top block by name, in order.
inline std::vector<std::string> op_names(const kiln::Program& p) {
  std::vector<std::string> out;
  for (kiln::Operation* op : p.block()) out.push_back(op->name());
  return out;
}

using kiln_test::count_top_ops;

// Central finite differences of `loss` w.r.t. each fed f64 input, against
// the gradients append_backward built (fetched beside the loss). Each run
// of a program with structured control flow also runs lowered to dataflow
// ops, with bit-identical results (kiln_test::BothWays).
inline void check_grads_by_finite_differences(kiln::Program& main_prog, kiln::Value loss,
                                       const std::vector<std::pair<kiln::Value, kiln::Value>>& grads,
                                       const std::vector<std::string>& names,
                                       std::vector<std::vector<double>> vals,
                                       const std::vector<std::vector<std::int64_t>>& shapes,
                                       kiln::FeedMap fixed) {
  auto feed = [&] {
    kiln::FeedMap f = fixed;
    for (std::size_t i = 0; i < names.size(); ++i)
      f[names[i]] = kiln::Tensor::from_vector<double>(kiln::Dims(shapes[i]), vals[i]);
    return f;
  };
  kiln_test::BothWays exe;  // a program with kiln.if / kiln.while runs lowered too
  std::vector<kiln::FetchTarget> fetch{loss};
  for (auto& [p, g] : grads) fetch.push_back(g);
  auto got = exe.run(main_prog, feed(), fetch);
  const double h = 1e-6;
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto analytic = got[i + 1].to_vector<double>();
    REQUIRE(analytic.size() == vals[i].size());
    for (std::size_t k = 0; k < vals[i].size(); ++k) {
      const double keep = vals[i][k];
      vals[i][k] = keep + h;
      const double up = exe.run(main_prog, feed(), {loss})[0].to_vector<double>()[0];
      vals[i][k] = keep - h;
      const double down = exe.run(main_prog, feed(), {loss})[0].to_vector<double>()[0];
      vals[i][k] = keep;
      const double numeric = (up - down) / (2 * h);
      INFO(names[i] << "[" << k << "]: analytic " << analytic[k] << ", numeric " << numeric);
      CHECK(std::abs(analytic[k] - numeric) < 1e-6 * (1 + std::abs(numeric)));
    }
  }
}

}  // namespace kiln_frontend_test

