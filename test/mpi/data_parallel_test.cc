// Data-parallel training over MPI (kiln/frontend/data_parallel.h), on every
// rank of `mpirun -np 2`: two ranks with half the batch each end with the
// parameters one process gets from the whole batch; the buckets and their
// order are the same on every rank; ranks whose programs differ fail at
// start-up naming the parameter; startup broadcasts rank 0's parameters.
#include <algorithm>
#include <cstring>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/data_parallel.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/frontend/unique_name.h"
#include "kiln/kernel/random.h"
#include "kiln/runtime/communicator.h"
#include "kiln/runtime/scope.h"

using namespace kiln;

namespace {

constexpr std::int64_t kIn = 16, kHidden = 32, kClasses = 4, kBatch = 16;

struct Model {
  Program main, startup;
  Value loss;
};

// The same names on every build (UniqueNameGuard): ranks must agree on them.
std::unique_ptr<Model> build_mlp(std::int64_t hidden = kHidden) {
  UniqueNameGuard names;
  auto m = std::make_unique<Model>();
  ProgramGuard guard(m->main, m->startup);
  Value x = data("x", {-1, kIn});
  Value label = data("label", {-1}, DataType::Int64);
  nn::Linear fc1(kIn, hidden), fc2(hidden, hidden), fc3(hidden, kClasses);
  nn::ReLU relu;
  m->loss = nn::CrossEntropyLoss()(fc3(relu(fc2(relu(fc1(x))))), label);
  optim::Adam(1e-2).minimize(m->loss);
  return m;
}

ExecutionOptions one_thread(std::shared_ptr<Communicator> comm = nullptr) {
  ExecutionOptions o;
  o.num_threads = 1;
  o.communicator = std::move(comm);
  return o;
}

// Step `step`'s whole batch, the same on every rank.
void batch(int step, std::vector<float>& x, std::vector<std::int64_t>& y) {
  std::mt19937 rng(1234 + step);
  std::normal_distribution<float> normal;
  x.resize(kBatch * kIn);
  y.resize(kBatch);
  for (std::int64_t i = 0; i < kBatch; ++i) {
    y[i] = static_cast<std::int64_t>(rng() % kClasses);
    for (std::int64_t j = 0; j < kIn; ++j) x[i * kIn + j] = normal(rng) + (j % kClasses == y[i] ? 1.5f : 0.f);
  }
}

Tensor param(const Scope& scope, const std::string& name) { return scope.find_var(name)->get<Tensor>(); }

}  // namespace

TEST_CASE("two ranks with half the batch each train the parameters one rank gets from the whole batch",
          "[mpi][data_parallel]") {
  auto comm = Communicator::from_environment();
  REQUIRE(comm->size() == 2);
  auto dp = build_mlp();
  auto single = build_mlp();
  const DataParallelPlan plan = data_parallel(dp->main, dp->startup, *comm);
  CHECK(plan.buckets.size() == 1);  // 25 MB holds this model's gradients

  Scope dp_scope, single_scope;
  Executor dp_exe(Place::cpu(), one_thread(comm));
  Executor single_exe(Place::cpu(), one_thread());
  dp_exe.run(dp->startup, {}, {}, dp_scope);
  single_exe.run(single->startup, {}, {}, single_scope);
  // The reference starts where the job starts: rank 0's initial values.
  std::vector<std::string> names;
  for (const auto& [name, p] : dp->main.parameters()) names.push_back(name);
  for (const std::string& name : names) single_scope.var(name).get_mutable<Tensor>() = param(dp_scope, name).clone();

  const std::int64_t half = kBatch / comm->size();
  std::vector<float> xs;
  std::vector<std::int64_t> ys;
  for (int step = 0; step < 20; ++step) {
    batch(step, xs, ys);
    const std::vector<float> my_x(xs.begin() + comm->rank() * half * kIn, xs.begin() + (comm->rank() + 1) * half * kIn);
    const std::vector<std::int64_t> my_y(ys.begin() + comm->rank() * half, ys.begin() + (comm->rank() + 1) * half);
    dp_exe.run(dp->main, {{"x", Tensor::from_vector<float>({half, kIn}, my_x)},
                          {"label", Tensor::from_vector<std::int64_t>({half}, my_y)}},
               {}, dp_scope);
    single_exe.run(single->main, {{"x", Tensor::from_vector<float>({kBatch, kIn}, xs)},
                                  {"label", Tensor::from_vector<std::int64_t>({kBatch}, ys)}},
                   {}, single_scope);
  }
  for (const std::string& name : names) {
    if (name.rfind("linear", 0) != 0) continue;  // the layers' weights and biases
    INFO(name);
    const auto got = param(dp_scope, name).to_vector<float>();
    const auto want = param(single_scope, name).to_vector<float>();
    REQUIRE(got.size() == want.size());
    float worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
    CHECK(worst <= 1e-5f);
    // Every rank holds the same values.
    Tensor mean = param(dp_scope, name).clone();
    comm->allreduce(mean, ReduceKind::Mean);
    CHECK(mean.to_vector<float>() == got);
  }
}

TEST_CASE("the gradient buckets and their order are the same on every rank", "[mpi][data_parallel]") {
  auto comm = Communicator::from_environment();
  auto m = build_mlp();
  DataParallelOptions options;
  options.bucket_bytes = 4096;  // several buckets
  const DataParallelPlan plan = data_parallel(m->main, m->startup, *comm, options);
  REQUIRE(plan.buckets.size() > 1);
  const std::string mine = plan.describe();
  // Every rank's text, padded to the longest, side by side.
  Tensor length = Tensor::from_vector<std::int64_t>({1}, {static_cast<std::int64_t>(mine.size())});
  const auto lengths = comm->allgather(length).to_vector<std::int64_t>();
  const std::int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  Tensor text = Tensor::zeros({longest}, DataType::UInt8);
  std::copy(mine.begin(), mine.end(), static_cast<char*>(text.raw_data()));
  const Tensor all = comm->allgather(text);
  const char* base = static_cast<const char*>(all.raw_data());
  for (int r = 0; r < comm->size(); ++r) {
    INFO("rank " << r);
    CHECK(std::string(base + r * longest, static_cast<std::size_t>(lengths[r])) == mine);
  }
  // Each bucket's allreduce sits after its gradients, in the order they run.
  CHECK_THAT(mine, Catch::Contains("bucket 0 (f32"));
}

TEST_CASE("ranks whose parameters differ fail at start-up naming the parameter", "[mpi][data_parallel]") {
  auto comm = Communicator::from_environment();
  auto m = build_mlp(comm->rank() == 0 ? kHidden : kHidden + 1);
  CHECK_THROWS_WITH(data_parallel(m->main, m->startup, *comm),
                    Catch::Contains("linear_0.b_0") && Catch::Contains("rank 1") &&
                        Catch::Contains("every rank must build the same program"));
  comm->barrier();
}

TEST_CASE("startup gives every rank rank 0's initial parameters", "[mpi][data_parallel]") {
  auto comm = Communicator::from_environment();
  auto plain = build_mlp();
  auto m = build_mlp();
  data_parallel(m->main, m->startup, *comm);
  // Each rank draws its own initial values...
  auto same_on_every_rank = [&](const Tensor& t) {
    Tensor root = t.clone();
    comm->broadcast(root, 0);
    const int same = std::memcmp(root.raw_data(), t.raw_data(), t.bytes()) == 0;
    Tensor all = Tensor::from_vector<std::int32_t>({1}, {same});
    comm->allreduce(all, ReduceKind::Sum);
    return all.to_vector<std::int32_t>()[0] == comm->size();
  };
  Scope plain_scope, scope;
  Executor exe(Place::cpu(), one_thread(comm));
  set_random_seed(100 + comm->rank());
  exe.run(plain->startup, {}, {}, plain_scope);
  CHECK_FALSE(same_on_every_rank(param(plain_scope, "linear_0.w_0")));
  // ... but a data-parallel startup stores rank 0's.
  set_random_seed(100 + comm->rank());
  exe.run(m->startup, {}, {}, scope);
  for (const auto& [name, p] : m->main.parameters()) {
    INFO(name);
    CHECK(same_on_every_rank(param(scope, name)));
  }
}
