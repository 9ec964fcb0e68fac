// Asynchronous kernels (seed 003's AsyncOpKernel::ComputeAsync): a kernel
// that starts work and returns before it is done — a rendezvous receive
// waiting for its value — and reports completion through `done`, from any
// thread. The scheduler never blocks a worker on one: the instruction's
// successors run once `done` is called.
//   void compute_async(KernelContext& ctx, AsyncKernelDone done);
//   KILN_REGISTER_ASYNC_KERNEL(MyRecvOp, Cpu, Undefined, compute_async);
#pragma once

#include <cstdint>

#include "kiln/kernel/kernel_context.h"
#include "kiln/support/error.h"

namespace kiln {

// Completes one asynchronous kernel: call it exactly once, with null when
// the kernel's outputs are written, or with the error that stopped it (the
// run fails with it, named after the op). It may be called on the thread
// that started the kernel, before compute_async returns, or on any other.
// Trivially copyable (three words), so it fits the inline storage of
// a rendezvous callback beside a pointer or two.
class AsyncKernelDone {
 public:
  using Fn = void (*)(void* target, std::uint32_t index, const Error* error) noexcept;
  AsyncKernelDone(Fn fn, void* target, std::uint32_t index) noexcept
      : fn_(fn), target_(target), index_(index) {}
  void operator()(const Error* error = nullptr) const noexcept { fn_(target_, index_, error); }

 private:
  Fn fn_;
  void* target_;
  std::uint32_t index_;
};

// An asynchronous kernel. If it throws, it must not have handed `done` to
// anything (the throw is its error, and `done` is never to be called).
using AsyncKernelFn = void (*)(KernelContext& ctx, AsyncKernelDone done);

}  // namespace kiln
