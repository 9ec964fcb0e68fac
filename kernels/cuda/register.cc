// Registers the nvcc-compiled CUDA kernels (cuda_kernels.h) for
// PlaceKind::Cuda, expanding the same family lists as the CPU's
// registrations: one place where the dtypes of each family member are
// decided (elementwise.cu instantiates exactly these).
#include <cstdint>

#include "cuda_kernels.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln::cuda {
namespace {

template <typename... Ts>
struct Types {};
using Floats = Types<float, double>;
using Ints = Types<std::int8_t, std::int16_t, std::int32_t, std::int64_t, std::uint8_t,
                   std::uint16_t, std::uint32_t, std::uint64_t>;

template <typename OpT, typename Math, void (*Kernel)(KernelContext&), typename T>
void add(const char* name) {
  KernelRegistrar<OpT>(PlaceKind::Cuda, data_type_of<T>, Kernel, name);
}

template <typename Math, typename... Ts>
void add_binary(Types<Ts...>) {
  (add<BinaryOp<Math>, Math, &binary_kernel<Math, Ts>, Ts>(Math::name.data()), ...);
}

template <typename Math>
void register_binary() {
  if constexpr (!integer_only_math<Math>) add_binary<Math>(Floats{});
  if constexpr (!Math::floating_only) add_binary<Math>(Ints{});
}

template <typename Math, typename... Ts>
void add_unary(Types<Ts...>) {
  (add<UnaryOp<Math>, Math, &unary_kernel<Math, Ts>, Ts>(Math::name.data()), ...);
}

template <typename Math>
void register_unary() {
  add_unary<Math>(Floats{});
  if constexpr (!Math::floating_only) add_unary<Math>(Types<std::int32_t, std::int64_t>{});
  add<GradOf<UnaryOp<Math>>, Math, &unary_grad_kernel<Math, float>, float>(Math::name.data());
  add<GradOf<UnaryOp<Math>>, Math, &unary_grad_kernel<Math, double>, double>(Math::name.data());
}

template <typename Math>
void register_inplace_unary() {
  add<InplaceUnaryOp<Math>, Math, &unary_kernel<Math, float>, float>(Math::inplace_name.data());
  add<InplaceUnaryOp<Math>, Math, &unary_kernel<Math, double>, double>(Math::inplace_name.data());
  if constexpr (!Math::floating_only) {
    add<InplaceUnaryOp<Math>, Math, &unary_kernel<Math, std::int32_t>, std::int32_t>(
        Math::inplace_name.data());
    add<InplaceUnaryOp<Math>, Math, &unary_kernel<Math, std::int64_t>, std::int64_t>(
        Math::inplace_name.data());
  }
}

template <typename... Maths>
bool register_all(BinaryMathList<Maths...>) {
  (register_binary<Maths>(), ...);
  return true;
}
template <typename... Maths>
bool register_unaries(MathList<Maths...>) {
  (register_unary<Maths>(), ...);
  return true;
}
template <typename... Maths>
bool register_inplace(MathList<Maths...>) {
  (register_inplace_unary<Maths>(), ...);
  return true;
}

[[maybe_unused]] const bool binaries = register_all(BinaryFamily{});
[[maybe_unused]] const bool unaries = register_unaries(UnaryFamily{});
[[maybe_unused]] const bool inplace = register_inplace(InplaceUnaryFamily{});

}  // namespace
}  // namespace kiln::cuda
