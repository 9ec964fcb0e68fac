// Helpers for CUDA kernel tests: run one op's CUDA kernel on the inputs
// copied to the device and bring its outputs back, to compare with the CPU
// kernel on the same inputs. Every test using them is tagged [cuda] and
// skips itself (with a warning) on a machine without a CUDA device.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernel/kernel_test_util.h"
#include "kiln/runtime/cuda_context.h"

namespace kiln_test {

// True when a CUDA device is present; otherwise WARNs once per test case.
inline bool have_cuda() {
  if (kiln::cuda_device_count() > 0) return true;
  WARN("no CUDA device: the [cuda] checks are skipped");
  return false;
}

// Builds `make_op` as run_kernel does and runs its CUDA kernel on
// cuda:0's compute stream; results are copied back to the host.
inline KernelRun run_cuda_kernel(
    const std::vector<kiln::Tensor>& inputs,
    const std::function<kiln::Operation*(kiln::Builder&, const std::vector<kiln::Value>&)>& make_op) {
  using namespace kiln;
  CudaContext& cuda = cuda_context(0);
  KernelRun run;
  run.program = std::make_unique<Program>();
  Builder b(*run.program);
  std::vector<Value> values;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    values.push_back(b.create<DataOp>("in" + std::to_string(i), inputs[i].dims().to_vector(),
                                      inputs[i].dtype())
                         .result());
  run.op = make_op(b, values);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto v = std::make_shared<Variable>("in" + std::to_string(i));
    v->set(copy_to_place(inputs[i], Place::cuda(0)));
    run.inputs.push_back(std::move(v));
  }
  const auto& inplace = run.op->info().impl()->inplace_map;
  for (std::uint32_t r = 0; r < run.op->num_results(); ++r) {
    std::shared_ptr<Variable> var;
    for (auto [o, in] : inplace)
      if (o == r) var = run.inputs.at(in);
    if (!var) var = std::make_shared<Variable>("out" + std::to_string(r));
    run.outputs.push_back(std::move(var));
  }
  const DataType dtype = kernel_dtype(*run.op);
  const KernelInfo& k = KernelRegistry::instance().get(*run.op, PlaceKind::Cuda, dtype);
  std::shared_ptr<const void> attrs = k.decode_attrs ? k.decode_attrs(run.op) : nullptr;
  std::vector<Variable*> in_ptrs, out_ptrs;
  for (auto& v : run.inputs) in_ptrs.push_back(v.get());
  for (auto& v : run.outputs) out_ptrs.push_back(v.get());
  KernelContext ctx(run.op, in_ptrs.data(), static_cast<std::uint32_t>(in_ptrs.size()),
                    out_ptrs.data(), static_cast<std::uint32_t>(out_ptrs.size()), attrs.get(),
                    Place::cuda(0), &cuda.allocator());
  ctx.set_stream(&cuda.compute_stream());
  k.fn(ctx);
  cuda.compute_stream().synchronize();
  for (std::uint32_t r = 0; r < run.op->num_results(); ++r) {
    const Tensor& t = run.outputs[r]->get<Tensor>();
    CHECK(t.place() == Place::cuda(0));
    run.results.push_back(copy_to_place(t, Place::cpu()));
  }
  return run;
}

// run_cuda_op<AddOp>({x, y}): as run_op, on cuda:0.
template <typename OpT, typename... Args>
KernelRun run_cuda_op(const std::vector<kiln::Tensor>& inputs, Args&&... args) {
  return run_cuda_kernel(inputs, [&](kiln::Builder& b, const std::vector<kiln::Value>& v) {
    return detail::create_op<OpT>(b, v, args...);
  });
}

// got (a CUDA kernel's result) against want (the CPU's): same dims and
// dtype, every element within atol + rtol · |want|.
template <typename T>
void check_same(const kiln::Tensor& got, const kiln::Tensor& want, double rtol, double atol) {
  REQUIRE(got.dims() == want.dims());
  REQUIRE(got.dtype() == want.dtype());
  check_close<T>(got, want.to_vector<T>(), rtol, atol);
}

// Whole numbers drawn from [lo, hi) as T: sums of them are exact in any order.
template <typename T>
kiln::Tensor integers(const kiln::Dims& dims, std::uint32_t seed, double lo, double hi) {
  auto f = filled<double>(dims, lo, hi, seed).to_vector<double>();
  std::vector<T> v;
  for (double d : f) v.push_back(static_cast<T>(std::floor(d)));
  return kiln::Tensor::from_vector<T>(dims, v);
}

// The ops of `p` that have no CUDA kernel for their dtype (feeds, fetches
// and parameters aside): a device run would take them to the CPU and back.
// Needs no device: kernels are registered in any build with CUDA.
inline std::vector<std::string> ops_without_cuda_kernels(const kiln::Program& p) {
  using namespace kiln;
  std::vector<std::string> missing;
  for (Operation* op : p.block()) {
    if (op->isa<DataOp>() || op->isa<FetchOp>() || op->isa<ParameterOp>() || op->isa<SetParameterOp>())
      continue;
    const DataType dt = kernel_dtype(*op);
    if (!KernelRegistry::instance().find(op->info().id(), PlaceKind::Cuda, dt))
      missing.push_back(std::string(op->name()) + " in " + std::string(to_string(dt)));
  }
  return missing;
}

}  // namespace kiln_test
