// The merged optimizer updates' CUDA kernels (kernels/cuda/merged_optimizer.cc,
// multi-tensor launches): against the single CUDA updates and the merged
// CPU kernel, step after step, with and without the skip flag, for
// parameters of odd sizes and for more parameters or chunks than one
// launch's table holds; and in CUDA training programs, where the
// fuse_optimizer pass (alone or in the default pipeline) merges the
// updates in place, against the unmerged program. Every comparison is bit
// for bit: each element gets the single kernel's math, which is the CPU's
// ([cuda]: skipped without a device).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "frontend/frontend_test_util.h"
#include "kernel/cuda_test_util.h"
#include "kiln/dialect/merged_optimizer_ops.h"
#include "kiln/dialect/unary_ops.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/kernel/random.h"

using namespace kiln;

// A named namespace: the unity build puts other test files' helpers of the
// same names (scalar, flag) beside these.
namespace merged_cuda_test {

using kiln_frontend_test::persistables;
using kiln_test::filled;
using kiln_test::have_cuda;
using kiln_test::run_cuda_kernel;
using kiln_test::run_kernel;
using kiln_test::same_bits;


template <typename T>
Tensor scalar(double v) {
  return Tensor::from_vector<T>({1}, {static_cast<T>(v)});
}

Tensor flag(bool on) { return Tensor::from_vector<bool>({1}, {on}); }

// A value for the single op's operand `name` of a parameter of n elements.
template <typename T>
Tensor operand_value(std::string_view name, std::int64_t n, std::uint32_t seed) {
  const Dims dims{n};
  if (name == "beta1_pow") return scalar<T>(0.9 * 0.9);
  if (name == "beta2_pow") return scalar<T>(0.999 * 0.999);
  if (name == "moment2") return filled<T>(dims, 0, 0.01, seed);
  if (name == "velocity" || name == "moment1") return filled<T>(dims, -0.1, 0.1, seed);
  return filled<T>(dims, -1, 1, seed);  // param, grad
}

// A merged op over single op Single and its single ops, as the
// merged and single ops' builders take their attributes.
template <typename Merged, typename... Attrs>
struct UpdateOps {
  using Single = typename Merged::SingleOp;
  using Layout = MergedLayout<Single>;
  std::function<Operation*(Builder&, Value, const std::vector<Value>&, Value)> merged;
  std::function<Operation*(Builder&, const std::vector<Value>&, Value)> single;

  explicit UpdateOps(Attrs... attrs) {
    merged = [=](Builder& b, Value lr, const std::vector<Value>& members, Value skip) {
      if constexpr (sizeof...(Attrs) == 0)
        return b.create<Merged>(lr, members, skip).operation();
      else
        return b.create<Merged>(lr, members, typename Merged::Attributes{attrs...}, skip).operation();
    };
    single = [=](Builder& b, const std::vector<Value>& v, Value skip) {
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return b.create<Single>(v[I]..., attrs..., skip).operation();
      }(std::make_index_sequence<Single::num_operands>{});
    };
  }
};

// Inputs of a merged op over `Single` for parameters of `sizes`: the
// learning rate, each parameter's operands, then (with `skip`) the flag.
template <typename Single, typename T>
std::vector<Tensor> merged_inputs(const std::vector<std::int64_t>& sizes, bool skip) {
  std::vector<Tensor> in{scalar<T>(1e-2)};
  std::uint32_t seed = 1;
  for (std::int64_t n : sizes)
    for (std::uint32_t i = 0; i < Single::num_operands; ++i)
      if (i != MergedLayout<Single>::lr) in.push_back(operand_value<T>(Single::operand_names[i], n, seed++));
  if (skip) in.push_back(flag(false));
  return in;
}

// A parameter's gradient `g` in dtype `dtype` (kiln.cast's CPU kernel).
Tensor gradient_as(const Tensor& g, DataType dtype) {
  return g.dtype() == dtype ? g : kiln_test::run_op<CastOp>({g}, dtype).out();
}

// `steps` steps of the merged CUDA kernel on parameters of `sizes`, each
// against the single CUDA kernel per parameter and the merged CPU kernel
// (bit for bit); the results feed the next step with new gradients. With
// `skip_steps` non-empty, the skip flag operand holds skip_steps[step].
// Parameter k's gradient has dtype grad_types[k % size] (mixed precision:
// bf16 or f16 for f32), or T where grad_types is empty.
template <typename Merged, typename T, typename... Attrs>
void check_steps_with(const std::vector<std::int64_t>& sizes, const std::vector<bool>& skip_steps,
                      const std::vector<DataType>& grad_types, int steps, Attrs... attrs) {
  using Single = typename Merged::SingleOp;
  using Layout = MergedLayout<Single>;
  const UpdateOps<Merged, Attrs...> ops(attrs...);
  const bool has_skip = !skip_steps.empty();
  INFO((has_skip ? "with a skip flag" : "without a skip flag"));
  std::vector<Tensor> in = merged_inputs<Single, T>(sizes, has_skip);
  const auto count = static_cast<std::uint32_t>(sizes.size());
  const auto grad_type = [&](std::uint32_t k) {
    return grad_types.empty() ? data_type_of<T> : grad_types[k % grad_types.size()];
  };
  for (std::uint32_t k = 0; k < count; ++k)
    in[Layout::operand(k, kGradOperand)] = gradient_as(in[Layout::operand(k, kGradOperand)], grad_type(k));
  const auto make = [&](Builder& b, const std::vector<Value>& v) {
    const std::vector<Value> members(v.begin() + 1, v.begin() + 1 + count * Layout::operands);
    return ops.merged(b, v[0], members, has_skip ? v.back() : Value{});
  };
  for (int step = 0; step < steps; ++step) {
    INFO("step " << step);
    const bool skipping = has_skip && skip_steps.at(step);
    if (has_skip) in.back() = flag(skipping);
    const auto cuda = run_cuda_kernel(in, make);
    const auto cpu = run_kernel(in, make);
    for (std::uint32_t k = 0; k < count; ++k) {
      INFO("parameter " << k << " of " << sizes[k] << " elements");
      std::vector<Tensor> one;
      for (std::uint32_t i = 0; i < Single::num_operands; ++i) one.push_back(in[Layout::operand(k, i)]);
      if (has_skip) one.push_back(in.back());
      const auto single = run_cuda_kernel(one, [&](Builder& b, const std::vector<Value>& v) {
        return ops.single(b, v, has_skip ? v.back() : Value{});
      });
      for (auto [r, i] : Single::inplace_map) {
        const Tensor& got = cuda.out(Layout::result(k, r));
        CHECK(same_bits(got, single.out(r)));
        CHECK(same_bits(got, cpu.out(Layout::result(k, r))));
        if (skipping) CHECK(same_bits(got, in[Layout::operand(k, i)]));
      }
    }
    for (std::uint32_t k = 0; k < count; ++k) {
      for (auto [r, i] : Single::inplace_map) in[Layout::operand(k, i)] = cuda.out(Layout::result(k, r));
      in[Layout::operand(k, kGradOperand)] =
          gradient_as(operand_value<T>("grad", sizes[k], 1000 + 10 * step + k), grad_type(k));
    }
  }
}

template <typename Merged, typename T, typename... Attrs>
void check_steps(const std::vector<std::int64_t>& sizes, const std::vector<bool>& skip_steps, int steps,
                 Attrs... attrs) {
  check_steps_with<Merged, T>(sizes, skip_steps, {}, steps, attrs...);
}

// 13 parameters of odd sizes, one beyond a chunk.
const std::vector<std::int64_t> kOddSizes{1, 7, 1000, 65537, 3, 1, 4099, 7, 65536, 2, 1000, 1, 31};


TEST_CASE("CUDA merged sgd_, momentum_, adam_ and adamw_ give the single CUDA updates' bits and the merged "
          "CPU kernel's, step after step, with and without a skip flag",
          "[cuda][kernel][merged]") {
  if (!have_cuda()) return;
  // No skip flag; a flag set in step 1 only.
  const std::vector<std::vector<bool>> skips{{}, {false, true, false}};
  SECTION("sgd f32") {
    for (const auto& skip : skips) check_steps<MergedSgd_Op, float>(kOddSizes, skip, 3);
  }
  SECTION("sgd f64") {
    for (const auto& skip : skips) check_steps<MergedSgd_Op, double>(kOddSizes, skip, 3);
  }
  SECTION("momentum f32") {
    for (const auto& skip : skips) check_steps<MergedMomentum_Op, float>(kOddSizes, skip, 3, 0.9, false);
  }
  SECTION("nesterov f64") {
    for (const auto& skip : skips) check_steps<MergedMomentum_Op, double>(kOddSizes, skip, 3, 0.8, true);
  }
  SECTION("adam f32") {
    for (const auto& skip : skips) check_steps<MergedAdam_Op, float>(kOddSizes, skip, 3, 0.9, 0.999, 1e-8);
  }
  SECTION("adamw f32") {
    for (const auto& skip : skips)
      check_steps<MergedAdamW_Op, float>(kOddSizes, skip, 3, 0.9, 0.999, 1e-8, 0.01);
  }
  SECTION("adamw f64") {
    for (const auto& skip : skips)
      check_steps<MergedAdamW_Op, double>(kOddSizes, skip, 3, 0.9, 0.99, 1e-6, 0.1);
  }
}

TEST_CASE("CUDA updates read an f32 parameter's bf16 or f16 gradient, each parameter's its own, with the CPU "
          "kernels' bits, merged and single",
          "[cuda][kernel][merged]") {
  if (!have_cuda()) return;
  const std::vector<DataType> mixed{DataType::BFloat16, DataType::Float32, DataType::Float16};
  const std::vector<std::vector<bool>> skips{{}, {false, true, false}};
  for (const auto& skip : skips) {
    check_steps_with<MergedSgd_Op, float>(kOddSizes, skip, mixed, 3);
    check_steps_with<MergedMomentum_Op, float>(kOddSizes, skip, mixed, 3, 0.9, true);
    check_steps_with<MergedAdam_Op, float>(kOddSizes, skip, mixed, 3, 0.9, 0.999, 1e-8);
    check_steps_with<MergedAdamW_Op, float>(kOddSizes, skip, mixed, 3, 0.9, 0.999, 1e-8, 0.01);
  }
}

TEST_CASE("CUDA merged updates of more parameters or chunks than one launch's table holds take several "
          "launches and give the same bits",
          "[cuda][kernel][merged]") {
  if (!have_cuda()) return;
  // 100 parameters (tables of 85 sgd_ and 36 adam_ parameters, 96 beta-power
  // pairs per launch).
  std::vector<std::int64_t> many;
  for (int k = 0; k < 100; ++k) many.push_back(kOddSizes[k % kOddSizes.size()]);
  SECTION("sgd") { check_steps<MergedSgd_Op, float>(many, {}, 1); }
  SECTION("adamw") { check_steps<MergedAdamW_Op, float>(many, {false, false}, 2, 0.9, 0.999, 1e-8, 0.01); }
  // 1 + 306 + 1 + 16 + 2 chunks of 65536 elements: the 1M parameter starts
  // in the first table (320 chunks) and ends in the second.
  SECTION("sgd of more chunks than a table") {
    check_steps<MergedSgd_Op, float>({1, 20'000'000, 7, 1'000'000, 65537}, {}, 1);
  }
}


// A training program's update ops without a model: parameters of `sizes`
// (f32, the last two f64), gradients fed, a skip flag fed, the optimizer
// `make` builds.
struct UpdateProgram {
  Program main, startup;
  std::vector<std::int64_t> sizes;
  explicit UpdateProgram(const std::function<std::unique_ptr<optim::Optimizer>()>& make,
                         std::vector<std::int64_t> sizes_in)
      : sizes(std::move(sizes_in)) {
    UniqueNameGuard names;
    ProgramGuard guard(main, startup);
    std::vector<std::pair<Value, Value>> pairs;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const DataType dtype = dtype_of(k);
      const std::string name = "w" + std::to_string(k);
      Value w = create_parameter(name, {sizes[k]}, dtype, init::Uniform(-1, 1, 7 + k));
      pairs.emplace_back(w, data("g" + std::to_string(k), {sizes[k]}, dtype));
    }
    make()->apply_gradients(pairs, data("skip", {1}, DataType::Bool));
  }
  DataType dtype_of(std::size_t k) const { return k + 2 >= sizes.size() ? DataType::Float64 : DataType::Float32; }
  FeedMap feeds(int step, bool skip) const {
    FeedMap f{{"skip", flag(skip)}};
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const Dims dims{sizes[k]};
      const auto seed = static_cast<std::uint32_t>(100 * step + k);
      f["g" + std::to_string(k)] =
          dtype_of(k) == DataType::Float64 ? filled<double>(dims, -1, 1, seed) : filled<float>(dims, -1, 1, seed);
    }
    return f;
  }
};

// Startup, then 4 steps (the third skipped) of `p` at `place` with `passes`:
// every persistable value, and the plan's instruction count.
std::pair<std::map<std::string, Tensor>, std::uint32_t> train(const UpdateProgram& p, Place place,
                                                                const char* passes) {
  ExecutionOptions o;
  o.num_threads = 1;
  o.passes = passes;
  Executor exe(place, o);
  set_random_seed(3);
  exe.run(p.startup);
  for (int step = 0; step < 4; ++step) exe.run(p.main, p.feeds(step, step == 2));
  return {persistables(exe), exe.last_core()->num_instructions()};
}

void require_same(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [name, t] : want) {
    INFO(name);
    REQUIRE(got.count(name));
    CHECK(same_bits(got.at(name), t));
  }
}


TEST_CASE("a CUDA program's optimizer updates merge (fuse_optimizer, the default pipeline) and train in "
          "place to the unmerged program's bits and the CPU's, through a skipped step",
          "[cuda][merged][train]") {
  if (!have_cuda()) return;
  struct Case {
    const char* name;
    std::function<std::unique_ptr<optim::Optimizer>()> make;
  };
  const std::vector<Case> cases{
      {"sgd", [] { return std::make_unique<optim::SGD>(0.1); }},
      {"momentum", [] { return std::make_unique<optim::Momentum>(0.05, 0.9); }},
      {"nesterov", [] { return std::make_unique<optim::Momentum>(0.05, 0.8, true); }},
      {"adam", [] { return std::make_unique<optim::Adam>(1e-2); }},
      {"adamw", [] { return std::make_unique<optim::AdamW>(1e-2, 0.9, 0.99, 1e-8, 0.05); }},
  };
  // 8 parameters, 6 f32 and 2 f64: one merged op per dtype (each its own
  // learning rate), at most 8 · 5 = 40 results.
  const std::vector<std::int64_t> sizes{1, 7, 1000, 65537, 3, 4099, 7, 65537};
  for (const Case& c : cases) {
    SECTION(c.name) {
      const UpdateProgram p(c.make, sizes);
      const auto [plain, plain_count] = train(p, Place::cuda(0), "");
      const auto [merged, merged_count] = train(p, Place::cuda(0), "fuse_optimizer");
      const auto [defaults, defaults_count] = train(p, Place::cuda(0), kDefaultPasses);
      const auto [cpu, cpu_count] = train(p, Place::cpu(), "fuse_optimizer");
      // 8 updates became 2 merged ops.
      CHECK(merged_count + 6 == plain_count);
      require_same(merged, plain);
      require_same(defaults, plain);
      require_same(merged, cpu);
    }
  }
}

TEST_CASE("CUDA merged adam_ updates that share their beta powers run one after another, as the "
          "unmerged updates do",
          "[cuda][merged][train]") {
  if (!have_cuda()) return;
  // Three adam_ updates reading one pair of beta-power parameters: each
  // advances the powers the next one reads.
  Program main, startup;
  {
    UniqueNameGuard names;
    ProgramGuard guard(main, startup);
    Value b1p = create_parameter("b1p", {1}, DataType::Float32, init::Constant(0.9), false);
    Value b2p = create_parameter("b2p", {1}, DataType::Float32, init::Constant(0.999), false);
    Value lr = create_parameter("lr", {1}, DataType::Float32, init::Constant(1e-2), false);
    Builder b = main_builder();
    std::vector<std::pair<Value, Value>> reads;
    for (int k = 0; k < 3; ++k) reads.emplace_back(b1p, b2p);
    for (int k = 1; k < 3; ++k)  // later reads of the same variables
      reads[k] = {b.create<ParameterOp>("b1p", b1p.type()).result(),
                  b.create<ParameterOp>("b2p", b2p.type()).result()};
    for (int k = 0; k < 3; ++k) {
      const std::int64_t n = 1000 + 37 * k;
      const std::string s = std::to_string(k);
      Value w = create_parameter("w" + s, {n}, DataType::Float32, init::Uniform(-1, 1, 5 + k));
      Value m1 = create_parameter("m1_" + s, {n}, DataType::Float32, init::Constant(0.0), false);
      Value m2 = create_parameter("m2_" + s, {n}, DataType::Float32, init::Constant(0.0), false);
      b.create<Adam_Op>(w, data("g" + s, {n}), lr, m1, m2, reads[k].first, reads[k].second);
    }
  }
  FeedMap feeds;
  for (int k = 0; k < 3; ++k) feeds["g" + std::to_string(k)] = filled<float>(Dims{1000 + 37 * k}, -1, 1, 9 + k);
  const auto run = [&](Place place, const char* passes) {
    ExecutionOptions o;
    o.num_threads = 1;
    o.passes = passes;
    Executor exe(place, o);
    exe.run(startup);
    for (int step = 0; step < 3; ++step) exe.run(main, feeds);
    return std::make_pair(persistables(exe), exe.last_core()->num_instructions());
  };
  const auto [plain, plain_count] = run(Place::cuda(0), "");
  const auto [merged, merged_count] = run(Place::cuda(0), "fuse_optimizer");
  CHECK(merged_count + 2 == plain_count);  // one merged op
  require_same(merged, plain);
  require_same(merged, run(Place::cpu(), "").first);
}

}  // namespace merged_cuda_test
