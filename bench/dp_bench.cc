// Data-parallel training of the MLP example's model (784-512-512-10, ReLU,
// cross-entropy, Adam): one rank with the whole batch of 256 on one thread,
// then — this program again, started by mpirun -np 2 — two ranks with 128
// each, one executor thread per rank.
//   BENCH dp.mlp256.t1          ms/step, 1 rank x 1 thread, batch 256 (measured
//                               before and after the ranks' run: the mean)
//   BENCH dp.mlp256.np2         ms/step, 2 ranks x 1 thread, batch 128 each
//   BENCH dp.mlp256.speedup     t1 / np2
//   BENCH dp.mlp256.compute     ms/step of the two ranks' programs with the
//                               collectives local (no communication)
//   BENCH dp.mlp256.allreduce   ms/step of the same buckets' allreduces alone
//   BENCH dp.mlp256.allreduce_in_step  ms/step the communicator's thread spent
//                               in the step's allreduces (Communicator::busy_ns)
//   BENCH dp.overlap            fraction of the allreduce time hidden behind
//                               backward: 1 - (np2 - compute) / allreduce_in_step
// The ranks time np2, compute and allreduce in turn within each round.
// Buckets of 1 MB (--bucket-kb): the model's 2.7 MB of gradients in 25 MB
// would make one bucket, which only starts when backward is over. On 2
// cores that the 2 ranks' compute fills, an allreduce that overlaps backward
// also competes with it for the cores (shared-memory MPI is memcpy and
// adds): more of it is hidden, but the step is not shorter than with one
// bucket (dp_bench dp --bucket-kb 25600).
//   dp_bench [filter]           (filter: "", "dp", "dp.mlp256", "dp.overlap")
//   dp_bench --worker BUCKET_KB (the ranks, under mpirun)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/frontend/data_parallel.h"
#include "kiln/frontend/frontend.h"
#include "kiln/frontend/optimizer.h"
#include "kiln/frontend/unique_name.h"
#include "kiln/kernel/blas.h"
#include "kiln/runtime/communicator.h"

namespace {

constexpr std::int64_t kFeatures = 784, kHidden = 512, kClasses = 10, kBatch = 256;
constexpr int kWarmup = 5, kSteps = 30;

struct Model {
  kiln::Program main, startup;
  kiln::Value loss;
};

std::unique_ptr<Model> build_mlp() {
  kiln::UniqueNameGuard names;
  auto m = std::make_unique<Model>();
  kiln::ProgramGuard guard(m->main, m->startup);
  auto x = kiln::data("x", {-1, kFeatures});
  auto label = kiln::data("label", {-1}, kiln::DataType::Int64);
  kiln::nn::Linear fc1(kFeatures, kHidden), fc2(kHidden, kHidden), fc3(kHidden, kClasses);
  kiln::nn::ReLU relu;
  m->loss = kiln::nn::CrossEntropyLoss()(fc3(relu(fc2(relu(fc1(x))))), label);
  kiln::optim::Adam(1e-3).minimize(m->loss);
  return m;
}

kiln::FeedMap batch_of(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> xs(static_cast<std::size_t>(n * kFeatures));
  std::vector<std::int64_t> ys(static_cast<std::size_t>(n));
  for (auto& v : xs) v = normal(rng);
  for (auto& y : ys) y = static_cast<std::int64_t>(rng() % kClasses);
  return {{"x", kiln::Tensor::from_vector<float>({n, kFeatures}, xs)},
          {"label", kiln::Tensor::from_vector<std::int64_t>({n}, ys)}};
}

kiln::ExecutionOptions one_thread(std::shared_ptr<kiln::Communicator> comm) {
  kiln::ExecutionOptions o;
  o.num_threads = 1;
  o.communicator = std::move(comm);
  return o;
}

// Median ms per step of `model` on `comm` (warm-up steps first).
double step_ms(Model& m, const std::shared_ptr<kiln::Communicator>& comm, const kiln::FeedMap& feed) {
  kiln::Executor exe(kiln::Place::cpu(), one_thread(comm));
  exe.run(m.startup);
  std::vector<double> t;
  for (int s = 0; s < kWarmup + kSteps; ++s) {
    const double ns = bench::time_ns([&] { exe.run(m.main, feed, {}); });
    if (s >= kWarmup) t.push_back(ns / 1e6);
  }
  return bench::median(t);
}

// The ranks: 128 samples each. The data-parallel step, the same step with
// local collectives (compute only, both ranks at once) and the buckets'
// allreduces alone are measured in turn within each round, so that a
// machine whose load changes gives each the same conditions.
int worker(std::size_t bucket_bytes) {
  auto comm = kiln::Communicator::from_environment();
  const std::int64_t local = kBatch / comm->size();
  const kiln::FeedMap feed = batch_of(local, 7 + static_cast<unsigned>(comm->rank()));
  kiln::DataParallelOptions options;
  options.bucket_bytes = bucket_bytes;

  auto dp = build_mlp();
  const kiln::DataParallelPlan plan = kiln::data_parallel(dp->main, dp->startup, *comm, options);
  kiln::Executor dp_exe(kiln::Place::cpu(), one_thread(comm));
  dp_exe.run(dp->startup);

  auto local_model = build_mlp();
  auto self = kiln::Communicator::single_process();
  kiln::data_parallel(local_model->main, local_model->startup, *self, options);
  kiln::Executor local_exe(kiln::Place::cpu(), one_thread(self));
  local_exe.run(local_model->startup);

  std::vector<std::vector<kiln::Tensor>> buckets;
  for (const kiln::GradientBucket& b : plan.buckets) {
    std::vector<kiln::Tensor> ts;
    for (const kiln::ParameterGradient& g : b.gradients)
      ts.push_back(kiln::Tensor::zeros(kiln::Dims(kiln::shaped_dims(g.gradient.type())), b.dtype));
    buckets.push_back(std::move(ts));
  }

  std::vector<double> np2, compute, allreduce, in_step;
  for (int s = 0; s < kWarmup + kSteps; ++s) {
    comm->barrier();
    const std::int64_t busy_before = comm->busy_ns();
    const double t_dp = bench::time_ns([&] { dp_exe.run(dp->main, feed, {}); });
    const double t_in_step = static_cast<double>(comm->busy_ns() - busy_before);
    comm->barrier();
    const double t_compute = bench::time_ns([&] { local_exe.run(local_model->main, feed, {}); });
    comm->barrier();
    const double t_allreduce = bench::time_ns([&] {
      for (auto& b : buckets) comm->allreduce(b, kiln::ReduceKind::Mean);
    });
    if (s < kWarmup) continue;
    np2.push_back(t_dp / 1e6);
    compute.push_back(t_compute / 1e6);
    allreduce.push_back(t_allreduce / 1e6);
    in_step.push_back(t_in_step / 1e6);
  }
  if (comm->rank() == 0) {
    bench::emit("dp.mlp256.np2", bench::median(np2), "ms");
    bench::emit("dp.mlp256.compute", bench::median(compute), "ms");
    bench::emit("dp.mlp256.allreduce", bench::median(allreduce), "ms");
    bench::emit("dp.mlp256.allreduce_in_step", bench::median(in_step), "ms");
    bench::emit("dp.mlp256.buckets", static_cast<double>(plan.buckets.size()), "count");
    if (bench::detail()) std::fprintf(stderr, "%s", plan.describe().c_str());
  }
  return 0;
}

bool wanted(const std::string& filter) {
  return filter.empty() || filter == "dp" || filter.rfind("dp.", 0) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  // One thread per rank: BLAS's too (OpenBLAS read its environment before
  // main; the ranks get it from mpirun -x).
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  kiln::blas_set_num_threads(1);
  const std::string first = argc > 1 ? argv[1] : "";
  if (first == "--worker") return worker(static_cast<std::size_t>(std::atol(argc > 2 ? argv[2] : "1024")) << 10);
  if (!wanted(first)) return 0;
  std::size_t bucket_kb = 1024;
  for (int k = 1; k + 1 < argc; ++k)
    if (std::strcmp(argv[k], "--bucket-kb") == 0) bucket_kb = static_cast<std::size_t>(std::atol(argv[k + 1]));

  // One rank, the whole batch: before and after the ranks' run (the mean
  // of the two medians), for a machine whose load changes.
  auto m = build_mlp();
  const kiln::FeedMap whole = batch_of(kBatch, 7);
  const double t1_before = step_ms(*m, nullptr, whole);

  // Two ranks: this program under mpirun.
  if (!kiln::Communicator::built_with_mpi()) {
    bench::emit("dp.mlp256.t1", t1_before, "ms");
    std::fprintf(stderr, "dp_bench: kiln was built without MPI: no 2-rank figures\n");
    return 0;
  }
  const std::string cmd = "mpirun -np 2 --allow-run-as-root --oversubscribe -x OPENBLAS_NUM_THREADS=1 " +
                          std::string(argv[0]) + " --worker " + std::to_string(bucket_kb);
  FILE* out = popen(cmd.c_str(), "r");
  if (!out) {
    std::fprintf(stderr, "dp_bench: cannot run %s\n", cmd.c_str());
    return 1;
  }
  double np2 = 0, compute = 0, in_step = 0;
  char line[512];
  while (std::fgets(line, sizeof line, out)) {
    std::fputs(line, stdout);
    char name[128];
    double v = 0;
    if (std::sscanf(line, "BENCH %127s %lf", name, &v) == 2) {
      if (std::strcmp(name, "dp.mlp256.np2") == 0) np2 = v;
      if (std::strcmp(name, "dp.mlp256.compute") == 0) compute = v;
      if (std::strcmp(name, "dp.mlp256.allreduce_in_step") == 0) in_step = v;
    }
  }
  const int rc = pclose(out);
  if (rc != 0 || np2 <= 0) {
    std::fprintf(stderr, "dp_bench: the 2-rank run failed (%s)\n", cmd.c_str());
    return 1;
  }
  const double t1 = (t1_before + step_ms(*m, nullptr, whole)) / 2;
  bench::emit("dp.mlp256.t1", t1, "ms");
  bench::emit("dp.mlp256.speedup", t1 / np2, "ratio");
  if (in_step > 0) {
    double hidden = 1.0 - (np2 - compute) / in_step;
    hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
    bench::emit("dp.overlap", hidden, "fraction");
  }
  return 0;
}
