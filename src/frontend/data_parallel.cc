// Data-parallel training (kiln/frontend/data_parallel.h).
#include "kiln/frontend/data_parallel.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "kiln/dialect/builtin.h"
#include "kiln/dialect/collective_ops.h"
#include "kiln/dialect/unary_ops.h"
#include "kiln/frontend/op_role.h"
#include "kiln/frontend/parameter.h"
#include "kiln/ir/builder.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/runtime/communicator.h"

namespace kiln {
namespace {

bool reads_as_optimize(OpOperand use) { return op_role(use.owner()) == OpRole::Optimize; }

// The parameter an optimize op updates with `grad` (operand 1 of an update
// op whose operand 0 is a builtin.parameter), following a gradient through
// the optimize ops that transform it first (their operand 0).
std::string parameter_of(Value grad) {
  std::vector<Value> frontier{grad};
  std::unordered_set<const void*> seen;
  while (!frontier.empty()) {
    Value v = frontier.back();
    frontier.pop_back();
    if (!seen.insert(v.impl()).second) continue;
    for (OpOperand use : v.uses()) {
      Operation* op = use.owner();
      if (op_role(op) != OpRole::Optimize) continue;
      if (use.index() == 1 && op->num_operands() > 1) {
        std::string name = parameter_name(op->operand_source(0));
        if (!name.empty()) return name;
      }
      if (use.index() == 0)
        for (std::uint32_t r = 0; r < op->num_results(); ++r) frontier.push_back(op->result(r));
    }
  }
  return {};
}

// A bf16 / f16 gradient that an update reads as it is (an f32 parameter's,
// kiln/frontend/optimizer.h) is averaged in f32, as every f32 parameter's
// gradient is: a cast to f32 right after it, which the optimize ops read
// instead.
void average_in_f32(Program& main, ParameterGradient& g) {
  const DataType dt = shaped_data_type(g.gradient.type());
  if (dt != DataType::BFloat16 && dt != DataType::Float16) return;
  Builder builder(main);
  builder.set_insertion_point_after(g.gradient.defining_op());
  Operation* cast = builder.create<CastOp>(g.gradient, DataType::Float32).operation();
  set_op_role(cast, OpRole::Backward);
  g.gradient.replace_uses_if(cast->result(0), reads_as_optimize);
  g.gradient = cast->result(0);
}

std::size_t static_bytes(Type t) {
  std::size_t n = size_of(shaped_data_type(t));
  for (std::int64_t d : shaped_dims(t)) {
    if (d < 0) return 0;
    n *= static_cast<std::size_t>(d);
  }
  return n;
}

}  // namespace

std::string DataParallelPlan::describe() const {
  std::ostringstream os;
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const GradientBucket& b = buckets[k];
    os << "bucket " << k << " (" << to_string(b.dtype) << ", " << b.bytes << " bytes):";
    for (const ParameterGradient& g : b.gradients) os << ' ' << (g.parameter.empty() ? "?" : g.parameter);
    os << '\n';
  }
  return os.str();
}

std::vector<ParameterGradient> parameter_gradients(const Program& main) {
  std::vector<ParameterGradient> grads;
  for (Operation* op : main.block()) {
    // A collective's results are averages already (a program made data-parallel).
    if (op_role(op) != OpRole::Backward || op->has_trait<Communication>()) continue;
    for (std::uint32_t r = 0; r < op->num_results(); ++r) {
      Value v = op->result(r);
      bool read = false;
      for (OpOperand use : v.uses()) read = read || reads_as_optimize(use);
      if (read) grads.push_back({parameter_of(v), v});
    }
  }
  return grads;
}

DataParallelPlan insert_gradient_allreduce(Program& main, const DataParallelOptions& options) {
  std::vector<ParameterGradient> grads = parameter_gradients(main);
  if (grads.empty()) {
    for (Operation* op : main.block())
      if (op->isa<AllReduceOp>() && op_role(op) == OpRole::Backward)
        throw_error(ErrorKind::InvalidArgument,
                    "data_parallel: the program is data-parallel already (its optimizer reads "
                    "the averages of a kiln.allreduce)");
    throw_error(ErrorKind::InvalidArgument,
                "data_parallel: the program has no gradient that an optimize op reads "
                "(build it with an optimizer's minimize first)");
  }
  for (ParameterGradient& g : grads) average_in_f32(main, g);
  // Buckets in the order gradients become ready; one open bucket per dtype.
  DataParallelPlan plan;
  std::map<DataType, std::size_t> open;  // dtype → index into plan.buckets
  for (const ParameterGradient& g : grads) {
    const DataType dtype = shaped_data_type(g.gradient.type());
    auto it = open.find(dtype);
    if (it == open.end()) {
      plan.buckets.push_back(GradientBucket{dtype, 0, {}, nullptr});
      it = open.emplace(dtype, plan.buckets.size() - 1).first;
    }
    GradientBucket& b = plan.buckets[it->second];
    b.gradients.push_back(g);
    b.bytes += static_bytes(g.gradient.type());
    if (b.bytes >= options.bucket_bytes) open.erase(it);
  }
  // Each bucket's allreduce right after its last gradient's op; buckets of
  // several dtypes may close out of order: keep program order.
  std::unordered_map<const Operation*, std::size_t> position;
  std::size_t k = 0;
  for (Operation* op : main.block()) position[op] = k++;
  auto last_op = [&](const GradientBucket& b) {
    Operation* last = nullptr;
    for (const ParameterGradient& g : b.gradients) {
      Operation* def = g.gradient.defining_op();
      if (!last || position[def] > position[last]) last = def;
    }
    return last;
  };
  std::stable_sort(plan.buckets.begin(), plan.buckets.end(), [&](const GradientBucket& a, const GradientBucket& b) {
    return position[last_op(a)] < position[last_op(b)];
  });
  Builder builder(main);
  Operation* previous = nullptr;
  for (GradientBucket& b : plan.buckets) {
    Operation* after = last_op(b);
    // Two buckets closed by one op: the later one after the earlier's allreduce.
    if (previous && position[after] <= position[previous]) after = previous;
    builder.set_insertion_point_after(after);
    std::vector<Value> xs;
    for (const ParameterGradient& g : b.gradients) xs.push_back(g.gradient);
    AllReduceOp reduce = builder.create<AllReduceOp>(xs, "mean");
    Operation* op = reduce.operation();
    set_op_role(op, OpRole::Backward);
    position[op] = position[after];
    for (std::size_t i = 0; i < xs.size(); ++i)
      xs[i].replace_uses_if(op->result(static_cast<std::uint32_t>(i)), reads_as_optimize);
    b.allreduce = op;
    previous = op;
  }
  return plan;
}

void broadcast_parameters(Program& startup, int root) {
  std::vector<Operation*> sets;
  for (Operation* op : startup.block())
    if (op->isa<SetParameterOp>()) sets.push_back(op);
  Builder builder(startup);
  for (Operation* set : sets) {
    builder.set_insertion_point(set);
    BroadcastOp b = builder.create<BroadcastOp>(set->operand_source(0), std::int64_t{root});
    set->set_operand(0, b.operation()->result(0));
  }
}

void check_same_parameters(const Program& main, Communicator& comm) {
  if (comm.size() == 1) return;
  std::string mine;
  for (const auto& [name, p] : main.parameters()) mine += name + ' ' + p.type.to_string() + '\n';
  // Every rank's text, padded to the longest.
  Tensor length = Tensor::from_vector<std::int64_t>({1}, {static_cast<std::int64_t>(mine.size())});
  const std::vector<std::int64_t> lengths = comm.allgather(length).to_vector<std::int64_t>();
  const std::int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  Tensor text = Tensor::zeros({std::max<std::int64_t>(longest, 1)}, DataType::UInt8);
  if (!mine.empty()) std::memcpy(text.raw_data(), mine.data(), mine.size());
  const Tensor all = comm.allgather(text);
  const char* base = static_cast<const char*>(all.raw_data());
  const std::size_t stride = static_cast<std::size_t>(std::max<std::int64_t>(longest, 1));
  auto parse = [&](int r) {
    std::map<std::string, std::string> params;
    std::istringstream in(std::string(base + stride * static_cast<std::size_t>(r),
                                      static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)])));
    std::string line;
    while (std::getline(in, line)) {
      const auto sp = line.find(' ');
      params[line.substr(0, sp)] = sp == std::string::npos ? "" : line.substr(sp + 1);
    }
    return params;
  };
  const auto first = parse(0);
  for (int r = 1; r < comm.size(); ++r) {
    const auto other = parse(r);
    if (other == first) continue;
    for (const auto& [name, type] : first) {
      auto it = other.find(name);
      if (it == other.end())
        throw_error(ErrorKind::InvalidArgument, "data_parallel: parameter '", name, "' (", type,
                    ") of rank 0 is missing on rank ", r, " (every rank must build the same program)");
      if (it->second != type)
        throw_error(ErrorKind::InvalidArgument, "data_parallel: parameter '", name, "' is ", type, " on rank 0 but ",
                    it->second, " on rank ", r, " (every rank must build the same program)");
    }
    for (const auto& [name, type] : other)
      if (!first.count(name))
        throw_error(ErrorKind::InvalidArgument, "data_parallel: parameter '", name, "' (", type, ") of rank ", r,
                    " is missing on rank 0 (every rank must build the same program)");
  }
}

DataParallelPlan data_parallel(Program& main, Program& startup, Communicator& comm,
                               const DataParallelOptions& options) {
  if (options.root < 0 || options.root >= comm.size())
    throw_error(ErrorKind::InvalidArgument, "data_parallel: root ", options.root, " is not a rank of ",
                comm.describe());
  check_same_parameters(main, comm);
  DataParallelPlan plan = insert_gradient_allreduce(main, options);
  broadcast_parameters(startup, options.root);
  return plan;
}

void DataParallelPass::run(Program& program, PassContext&) { plan_ = insert_gradient_allreduce(program, options_); }

KILN_REGISTER_PASS("data_parallel", [] { return std::make_unique<DataParallelPass>(); },
                   "gradients averaged over the ranks in buckets (kiln.allreduce), before the optimizer");

}  // namespace kiln
