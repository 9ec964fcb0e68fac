// Control-flow benchmarks (`./run bench cf`): what a kiln.while costs per
// iteration beyond its body's kernels, and whether its memory grows.
//   BENCH cf.while.ns_per_iter          ns: one iteration of a loop whose body is
//         x = x + 1 (one element) with the counter's update (i = i + 1,
//         i < n): three tiny ops
//   BENCH cf.while.body_ns              ns: the same three ops, run as straight-line
//         code: (time of a flat program of 2k copies − of k copies) / k, so
//         a run's own fixed costs cancel; k = 16 keeps every buffer resident,
//         as the loop's are
//   BENCH cf.while.overhead_per_iter    ns: ns_per_iter − body_ns, the loop's own
//         cost per iteration (running the child plan, reading the condition,
//         rebinding the carried values)
//   BENCH cf.while.mem_growth           bytes in use after a 10⁵-iteration run
//         minus after a 1-iteration run of the same program
// Medians of 9 repetitions, 1 thread.
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"

#include "kiln/dialect/control_flow_ops.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/cpu_allocator.h"

namespace bench {
namespace {

using kiln::Builder;
using kiln::DataType;
using kiln::Value;

Value constant(Builder& b, double v, DataType dt) {
  return b.create<kiln::FullOp>(std::vector<std::int64_t>{}, v, dt).result();
}

// (i, x) = (0, 0); while (i < n) { x = x + 1; i = i + 1 }
struct Loop {
  kiln::Program p;
  kiln::Operation* w = nullptr;
  Loop() {
    Builder b(p);
    Value n = b.create<kiln::DataOp>("n", std::vector<std::int64_t>{}, DataType::Int64).result();
    Value i0 = constant(b, 0, DataType::Int64), x0 = constant(b, 0, DataType::Float32);
    Value one_i = constant(b, 1, DataType::Int64), one_x = constant(b, 1, DataType::Float32);
    auto op = b.create<kiln::WhileOp>(b.create<kiln::LessThanOp>(i0, n).result(),
                                      std::vector<Value>{i0, x0},
                                      std::vector<Value>{n, one_i, one_x});
    kiln::Block& body = op->region(0).emplace_block();
    Value i = body.add_argument(i0.type()), x = body.add_argument(x0.type());
    Value bn = body.add_argument(n.type()), bi = body.add_argument(one_i.type()),
          bx = body.add_argument(one_x.type());
    Builder bb(body);
    Value x1 = bb.create<kiln::AddOp>(x, bx).result();
    Value i1 = bb.create<kiln::AddOp>(i, bi).result();
    Value c = bb.create<kiln::LessThanOp>(i1, bn).result();
    bb.create<kiln::YieldOp>(std::vector<Value>{c, i1, x1});
    w = op.operation();
  }
};

// The body's three ops `copies` times in a row, as straight-line code.
struct Flat {
  kiln::Program p;
  Value out;
  explicit Flat(int copies) {
    Builder b(p);
    Value i = constant(b, 0, DataType::Int64), x = constant(b, 0, DataType::Float32);
    Value n = constant(b, 1e9, DataType::Int64);
    Value one_i = constant(b, 1, DataType::Int64), one_x = constant(b, 1, DataType::Float32);
    Value c;
    for (int k = 0; k < copies; ++k) {
      x = b.create<kiln::AddOp>(x, one_x).result();
      i = b.create<kiln::AddOp>(i, one_i).result();
      c = b.create<kiln::LessThanOp>(i, n).result();
    }
    out = c;
  }
};

kiln::Tensor scalar_i64(std::int64_t v) {
  return kiln::Tensor::from_vector<std::int64_t>(kiln::Dims(), {v});
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  const std::string filter = argc > 1 ? argv[1] : "";
  if (!filter.empty() && filter != "cf" && filter.rfind("cf.", 0) != 0) return 0;
  kiln::ExecutionOptions o;
  o.num_threads = 1;
  kiln::Executor exe(kiln::Place::cpu(), o);
  const int reps = 9;

  Loop loop;
  const std::int64_t iters = 100000;
  exe.run(loop.p, {{"n", scalar_i64(iters)}}, {loop.w->result(1)});  // warm-up: plan, buffers
  std::vector<double> per_iter;
  for (int r = 0; r < reps; ++r)
    per_iter.push_back(time_ns([&] { exe.run(loop.p, {{"n", scalar_i64(iters)}}, {loop.w->result(1)}); }) /
                       double(iters));

  const int copies = 16, runs = 2000;
  Flat flat1(copies), flat2(2 * copies);
  exe.run(flat1.p, {}, {flat1.out});
  exe.run(flat2.p, {}, {flat2.out});
  std::vector<double> per_copy;
  for (int r = 0; r < reps; ++r) {
    const double t1 = time_ns([&] {
      for (int k = 0; k < runs; ++k) exe.run(flat1.p, {}, {flat1.out});
    });
    const double t2 = time_ns([&] {
      for (int k = 0; k < runs; ++k) exe.run(flat2.p, {}, {flat2.out});
    });
    per_copy.push_back((t2 - t1) / (double(runs) * copies));
  }

  const double loop_ns = median(per_iter), body_ns = median(per_copy);
  emit("cf.while.ns_per_iter", loop_ns, "ns");
  emit("cf.while.body_ns", body_ns, "ns");
  emit("cf.while.overhead_per_iter", loop_ns - body_ns, "ns");

  auto& alloc = kiln::cpu_allocator();
  auto after = [&](std::int64_t n) {
    auto out = exe.run(loop.p, {{"n", scalar_i64(n)}}, {loop.w->result(1)});
    out.clear();
    return static_cast<double>(alloc.bytes_in_use());
  };
  const double one = after(1);
  const double many = after(iters);
  emit("cf.while.mem_growth", many - one, "bytes");
  return 0;
}
