// Training steps of real CNNs built with kiln's frontend, as a user builds
// them: ResNet-18 and MobileNetV2 (torchvision's layer for layer: convs
// without bias, batch norm in training mode, ReLU / ReLU6, residual adds,
// global average pool, a 1000-way linear head), batch 16, 224x224 images,
// cross-entropy, SGD with momentum 0.9 (lr 0.01). bench/peers/cnn_train_torch.py
// runs the same networks in PyTorch eager beside it (`./run bench models`).
//   BENCH model.{resnet18,mobilenet_v2}.t1, .t2     ms/step (medians after warm-up)
//   BENCH model.{resnet18,mobilenet_v2}.t1.min      the fastest step at 1 thread
//   BENCH model.{resnet18,mobilenet_v2}.amp_bf16.*  the same under mixed precision
//                                                   O1 in bf16, convolutions included
// Random but fixed data, fed every step. Filters: "", "models", "model",
// "model.resnet18", "model.mobilenet_v2", "model.<net>.amp_bf16".
#include <algorithm>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_cnns.h"
#include "bench_util.h"

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/frontend/amp.h"
#include "kiln/exec/thread_plan.h"

namespace bench {
namespace {

constexpr std::int64_t kBatch = 16;

// KILN_BENCH_PLAN=sequential|graph|blas forces a thread plan (default: auto).
kiln::ThreadPlan thread_plan_named(const std::string& name) {
  for (auto p : {kiln::ThreadPlan::Sequential, kiln::ThreadPlan::Graph, kiln::ThreadPlan::Blas})
    if (name == to_string(p)) return p;
  return kiln::ThreadPlan::Auto;
}

// ms per step of `steps` steps after the warm-up the thread-plan tuner needs.
std::vector<double> step_ms(Model& m, unsigned threads, int steps) {
  kiln::ExecutionOptions opts;
  opts.num_threads = threads;
  opts.profile = std::getenv("KILN_BENCH_TRACE") != nullptr;
  if (const char* plan = std::getenv("KILN_BENCH_PLAN")) opts.thread_plan = thread_plan_named(plan);
  kiln::Executor exe(kiln::Place::cpu(), opts);
  exe.run(m.startup);
  const std::vector<kiln::FetchTarget> fetch{m.loss};
  std::vector<kiln::Tensor> out(1);
  const int warm = threads > 1 ? 2 + 2 * kiln::ThreadPlanTuner::kTrials : 2;
  for (int i = 0; i < warm; ++i) exe.run(m.main, m.feeds, fetch, out);
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) t.push_back(time_ns([&] { exe.run(m.main, m.feeds, fetch, out); }) / 1e6);
  if (detail())
    std::printf("# t%u: loss after %d steps %.9g, thread plan %s\n", threads, warm + steps,
                out[0].to_vector<float>()[0],
                exe.last_core() ? std::string(to_string(exe.last_core()->thread_plan())).c_str() : "?");
  if (const char* trace = std::getenv("KILN_BENCH_TRACE"); trace && exe.last_core()) {
    std::ofstream f(std::string(trace) + ".t" + std::to_string(threads) + ".json");
    f << exe.last_core()->chrome_trace();
  }
  return t;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  for (const std::string name : {"resnet18", "mobilenet_v2", "resnet18_amp_bf16", "mobilenet_v2_amp_bf16"}) {
    const bool amp = name.ends_with("_amp_bf16");
    const std::string key = "model." + name.substr(0, name.find("_amp")) + (amp ? ".amp_bf16" : "");
    if (!(filter.empty() || filter == "models" || filter == "model" || filter == key)) continue;
    auto m = bench::cnn_model(name, bench::kBatch);
    const auto t1 = bench::step_ms(*m, 1, 4), t2 = bench::step_ms(*m, 2, 4);
    bench::emit(key + ".t1", bench::median(t1), "ms");
    bench::emit(key + ".t1.min", *std::min_element(t1.begin(), t1.end()), "ms");
    bench::emit(key + ".t2", bench::median(t2), "ms");
  }
}
