// KernelContext: everything a kernel touches when it runs — its op's input and
// output variables, its attributes decoded once (the op's reflected
// Attributes struct), and its place. The executor builds one per
// instruction at pre-analysis and reuses it every run, so a kernel does no
// string or map look-up (seed 001 §3.2, "缓存 kernel 上下文").
#pragma once

#include <cstdint>

#include "kiln/ir/operation.h"
#include "kiln/kernel/step_context.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/variable.h"
#include "kiln/support/host_device.h"

namespace kiln {

class Stream;

class KernelContext {
 public:
  KernelContext() = default;
  KernelContext(Operation* op, Variable* const* inputs, std::uint32_t num_inputs,
                Variable* const* outputs, std::uint32_t num_outputs, const void* attrs, Place place,
                Allocator* allocator)
      : op_(op),
        inputs_(inputs),
        outputs_(outputs),
        num_inputs_(num_inputs),
        num_outputs_(num_outputs),
        attrs_(attrs),
        place_(place),
        allocator_(allocator) {}

  Operation* op() const { return op_; }
  std::uint32_t num_inputs() const { return num_inputs_; }
  std::uint32_t num_outputs() const { return num_outputs_; }

  Variable& input_var(std::uint32_t i) const { return *inputs_[i]; }
  Variable& output_var(std::uint32_t i) const { return *outputs_[i]; }
  // The input's tensor; kiln::Error naming the op when it holds none.
  // Inline: kernels call it once per operand, on every run.
  // Parked or not (Variable::park): what a kernel reads was written earlier
  // in its run, and a value parked at a run's end is taken back by its
  // writer before any reader runs.
  KILN_ALWAYS_INLINE const Tensor& input(std::uint32_t i) const {
    if (const Tensor* t = inputs_[i]->held_or_parked(); t && t->is_initialized()) [[likely]]
      return *t;
    throw_missing_input(i);
  }
  // The output variable's tensor (created empty on first use). For an
  // Inplace op, output k and its aliased input are the same variable.
  KILN_ALWAYS_INLINE Tensor& output(std::uint32_t i) const {
    return outputs_[i]->get_mutable<Tensor>();
  }
  // Output i with these dims and dtype, its buffer allocated (reused when the
  // variable already holds one that is big enough and not shared).
  Tensor& alloc_output(std::uint32_t i, const Dims& dims, DataType dtype) const;

  // The op's attributes as decoded at pre-analysis: ctx.attrs<MatmulOp>().transpose_x
  template <typename OpT>
  const typename OpT::Attributes& attrs() const {
    return *static_cast<const typename OpT::Attributes*>(attrs_);
  }
  // The decoded attributes, untyped (null for ops without an Attributes struct).
  const void* attrs_ptr() const { return attrs_; }
  Place place() const { return place_; }
  Allocator& allocator() const { return *allocator_; }
  // The stream a device kernel launches its work on (a CudaStream on
  // Place::cuda); null on the CPU, where a kernel's work is done when it
  // returns.
  Stream* stream() const { return stream_; }
  void set_stream(Stream* stream) { stream_ = stream; }

  // The run this kernel is part of (step id, rendezvous, cancellation);
  // null outside an executor's run or for a run given no RunOptions and
  // holding no asynchronous kernel.
  const StepContext* step() const { return step_; }
  void set_step(const StepContext* step) { step_ = step; }

  // Whether output i is read by nothing after this kernel (no op uses it, no
  // fetch takes it): a kernel with several outputs may then skip computing
  // it and leave its variable as it is. Set by the executor's plan.
  bool output_unused(std::uint32_t i) const { return i < 64 && ((unused_outputs_ >> i) & 1); }
  void set_unused_outputs(std::uint64_t mask) { unused_outputs_ = mask; }

 private:
  Operation* op_ = nullptr;
  Variable* const* inputs_ = nullptr;
  Variable* const* outputs_ = nullptr;
  std::uint32_t num_inputs_ = 0;
  std::uint32_t num_outputs_ = 0;
  const void* attrs_ = nullptr;
  Place place_ = Place::cpu();
  [[noreturn]] void throw_missing_input(std::uint32_t i) const;

  Allocator* allocator_ = nullptr;
  Stream* stream_ = nullptr;
  std::uint64_t unused_outputs_ = 0;
  const StepContext* step_ = nullptr;
};

// The error typed_input throws: input i of ctx's op is not of dtype `want`.
[[noreturn, gnu::cold]] void throw_input_dtype(const KernelContext& ctx, std::uint32_t i, DataType want);

// Input i as T; kiln::Error naming the op when its dtype is another.
template <typename T>
KILN_ALWAYS_INLINE inline const Tensor& typed_input(const KernelContext& ctx, std::uint32_t i) {
  const Tensor& t = ctx.input(i);
  if (t.dtype() != data_type_of<T>) [[unlikely]]
    throw_input_dtype(ctx, i, data_type_of<T>);
  return t;
}

// Whether output i is input `in`'s variable (an in-place op run in place).
inline bool output_is_input(const KernelContext& ctx, std::uint32_t out, std::uint32_t in) {
  return &ctx.output_var(out) == &ctx.input_var(in);
}

}  // namespace kiln
