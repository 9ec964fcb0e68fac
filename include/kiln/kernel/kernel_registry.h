// The static kernel registry: (op type, backend, dtype) → kernel function,
// resolved to a function pointer once, at pre-analysis (seed 001 §3.2,
// kernel choice). A user registers a kernel for their own op in their own
// file with one declaration:
//   KILN_REGISTER_KERNEL(MyOp, Cpu, Float32, my_op_kernel<float>);
// DataType::Undefined registers a kernel that serves every dtype.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/op.h"
#include "kiln/kernel/async_kernel.h"
#include "kiln/kernel/kernel_context.h"

namespace kiln {

using KernelFn = void (*)(KernelContext&);

struct KernelInfo {
  KernelFn fn = nullptr;  // null for an asynchronous kernel
  std::string name;  // the kernel's name as registered, for traces and errors
  // Decodes the op's attributes into its Attributes struct (null when the
  // op declares none); called once per instruction at pre-analysis.
  std::shared_ptr<const void> (*decode_attrs)(Operation*) = nullptr;
  // An asynchronous kernel (kiln/kernel/async_kernel.h), with fn null.
  AsyncKernelFn async_fn = nullptr;
};

class KernelRegistry {
 public:
  static KernelRegistry& instance();

  // Throws kiln::Error(AlreadyExists) for a second kernel under one key.
  void add(TypeId op, std::string_view op_name, PlaceKind backend, DataType dtype, KernelInfo info);
  // The kernel for (op, backend, dtype), falling back to the dtype-agnostic
  // one; null when none.
  const KernelInfo* find(TypeId op, PlaceKind backend, DataType dtype) const;
  // Like find, but throws kiln::Error(NotFound / Unimplemented) naming the
  // op, backend and dtype, and listing the dtypes that do have kernels.
  const KernelInfo& get(const Operation& op, PlaceKind backend, DataType dtype) const;
  std::vector<DataType> dtypes_for(TypeId op, PlaceKind backend) const;
  // Whether any kernel is registered for `backend`.
  bool has_backend(PlaceKind backend) const;

 private:
  KernelRegistry() = default;
  struct Entry {
    TypeId op;
    PlaceKind backend;
    DataType dtype;
    KernelInfo info;
  };
  std::vector<Entry> entries_;  // registration happens at load time; lookups at pre-analysis
};

// The dtype an op's kernel is chosen by: its first operand's element type,
// else its first result's, else f32.
DataType kernel_dtype(const Operation& op);

template <typename OpT>
std::shared_ptr<const void> decode_op_attributes(Operation* op) {
  if constexpr (requires { typename OpT::Attributes; })
    return std::make_shared<typename OpT::Attributes>(
        from_attributes<typename OpT::Attributes>(op->attributes(), OpT::name));
  else
    return nullptr;
}

// Registers kernels at static-initialisation time: one function, or one
// kernel template `template <typename T> struct K { static void run(KernelContext&); }`
// for each of several dtypes.
template <typename OpT>
struct KernelRegistrar {
  KernelRegistrar(PlaceKind backend, DataType dtype, KernelFn fn, std::string_view name) {
    KernelRegistry::instance().add(TypeId::get<OpT>(), OpT::name, backend, dtype,
                                   KernelInfo{fn, std::string(name), &decode_op_attributes<OpT>});
  }
  KernelRegistrar(PlaceKind backend, DataType dtype, AsyncKernelFn fn, std::string_view name) {
    KernelRegistry::instance().add(TypeId::get<OpT>(), OpT::name, backend, dtype,
                                   KernelInfo{nullptr, std::string(name), &decode_op_attributes<OpT>, fn});
  }
  template <template <typename> class Kernel, typename... Ts>
  static KernelRegistrar for_dtypes(PlaceKind backend, std::string_view name) {
    (KernelRegistrar(backend, data_type_of<Ts>, &Kernel<Ts>::run, name), ...);
    return KernelRegistrar();
  }

 private:
  KernelRegistrar() = default;
};

#define KILN_KERNEL_CAT2(a, b) a##b
#define KILN_KERNEL_CAT(a, b) KILN_KERNEL_CAT2(a, b)
// KILN_REGISTER_KERNEL(OpClass, Cpu|HostStream|Cuda, Float32|…|Undefined, function)
#define KILN_REGISTER_KERNEL(OpClass, backend, dtype, ...)                                    \
  static const ::kiln::KernelRegistrar<OpClass> KILN_KERNEL_CAT(kiln_kernel_, __COUNTER__)( \
      ::kiln::PlaceKind::backend, ::kiln::DataType::dtype, __VA_ARGS__, #__VA_ARGS__)
// KILN_REGISTER_ASYNC_KERNEL(OpClass, Cpu|HostStream|Cuda, dtype, compute_async):
// an asynchronous kernel (kiln/kernel/async_kernel.h).
#define KILN_REGISTER_ASYNC_KERNEL(OpClass, backend, dtype, ...)                             \
  static const ::kiln::KernelRegistrar<OpClass> KILN_KERNEL_CAT(kiln_kernel_, __COUNTER__)( \
      ::kiln::PlaceKind::backend, ::kiln::DataType::dtype,                                   \
      static_cast<::kiln::AsyncKernelFn>(__VA_ARGS__), #__VA_ARGS__)
// KILN_REGISTER_KERNELS(OpClass, backend, KernelTemplate, float, double, …):
// KernelTemplate<T>::run for each listed element type.
#define KILN_REGISTER_KERNELS(OpClass, backend, KernelTemplate, ...)                        \
  static const ::kiln::KernelRegistrar<OpClass> KILN_KERNEL_CAT(kiln_kernel_, __COUNTER__) = \
      ::kiln::KernelRegistrar<OpClass>::for_dtypes<KernelTemplate, __VA_ARGS__>(             \
          ::kiln::PlaceKind::backend, #OpClass "/" #KernelTemplate)

}  // namespace kiln
