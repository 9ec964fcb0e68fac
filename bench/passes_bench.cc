// The pass pipeline's compile-time cost: the executor's default pipeline
// (kDefaultPasses: "dce,cse,fold,simplify,fuse") on a
// program of 10^4 ops — an MLP-like chain of layers, each with a duplicated
// activation (cse), a scale computed from constants (fold), identities
// (simplify), a transpose pair and an unused branch (dce) — and each pass
// alone on the same program (without the verifier, timed on its own).
// Medians over fresh copies (the copy is not timed). `./run bench passes`;
// KILN_BENCH_DETAIL=1 prints the op counts and the pipeline's timing report.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/execution_options.h"
#include "kiln/ir/builder.h"
#include "kiln/passes/pass_manager.h"

using namespace kiln;

namespace {

Program make_program(std::size_t target_ops, Value* out) {
  Program p;
  Builder b(p);
  const std::int64_t n = 8, d = 16;
  const Type wt = TensorType::get(DataType::Float32, {d, d});
  const Type bt = TensorType::get(DataType::Float32, {d});
  Value h = b.create<DataOp>("x", std::vector<std::int64_t>{n, d}).result();
  for (int layer = 0; p.block().size() < target_ops; ++layer) {
    const std::string w = "w" + std::to_string(layer), bias = "b" + std::to_string(layer);
    p.set_parameter(w, Parameter{wt});
    p.set_parameter(bias, Parameter{bt});
    Value wv = b.create<ParameterOp>(w, wt).result();
    Value bv = b.create<ParameterOp>(bias, bt).result();
    Value m = b.create<MatmulOp>(h, wv).result();
    Value a = b.create<ReluOp>(b.create<AddOp>(m, bv).result()).result();
    // A scale of ones from constants: fold gives a constant, simplify drops x * 1.
    Value half = b.create<FullOp>(std::vector<std::int64_t>{d}, 0.5).result();
    Value two = b.create<FullOp>(std::vector<std::int64_t>{d}, 2.0).result();
    Value ones = b.create<MulOp>(half, two).result();
    Value s = b.create<MulOp>(a, ones).result();
    // The same activation twice: cse merges them.
    Value t1 = b.create<TanhOp>(s).result();
    Value t2 = b.create<TanhOp>(s).result();
    Value sum = b.create<AddOp>(t1, t2).result();
    // A transpose pair: simplify makes it x.
    Value tr = b.create<TransposeOp>(sum, std::vector<std::int64_t>{1, 0}).result();
    Value back = b.create<TransposeOp>(tr, std::vector<std::int64_t>{1, 0}).result();
    // An unused branch: dce removes it.
    b.create<ExpOp>(b.create<AbsOp>(back).result());
    h = b.create<ScaleOp>(back, 1.0, 0.0).result();
  }
  *out = h;
  return p;
}

template <typename F>
double median_ms(const Program& proto, int reps, F&& run) {
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    Program p = proto.clone();
    ms.push_back(bench::time_ns([&] { run(p); }) / 1e6);
  }
  return bench::median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  if (!filter.empty() && filter != "passes" && filter.rfind("pass", 0) != 0) return 0;
  Value out;
  Program proto = make_program(10000, &out);
  const int reps = 9;
  // The fetched value, found again in each copy: the program's last op's result.
  auto run = [](const std::string& pipeline, bool verify) {
    return [pipeline, verify](Program& p) {
      PassContext ctx({p.block().back()->result(0)});
      PassManagerOptions o;
      o.verify_each = verify;
      PassManager::parse(pipeline, o).run(p, ctx);
    };
  };
  if (bench::detail()) {
    Program p = proto.clone();
    PassManagerOptions o;
    o.timing = true;
    PassManager pm = PassManager::parse(kDefaultPasses, o);
    PassContext ctx({p.block().back()->result(0)});
    pm.run(p, ctx);
    std::printf("%zu ops -> %zu ops\n", proto.num_ops(), p.num_ops());
    pm.timing_report().print(std::cout);
  }
  // As a user runs it: the verifier before the first pass and after each.
  bench::emit("pass.pipeline.10k", median_ms(proto, reps, run(kDefaultPasses, true)), "ms");
  bench::emit("pass.pipeline.noverify.10k", median_ms(proto, reps, run(kDefaultPasses, false)), "ms");
  // Each pass alone on the unoptimised program, without the verifier.
  for (const char* name : {"dce", "cse", "fold", "simplify", "fuse"})
    bench::emit(std::string("pass.") + name + ".10k", median_ms(proto, reps, run(name, false)), "ms");
  // The verifier alone (Program::verify), which the pipeline runs up to 6 times.
  bench::emit("pass.verify.10k", median_ms(proto, reps, [](Program& p) { p.verify(); }), "ms");
  return 0;
}
