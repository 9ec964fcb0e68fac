// Registers the elementwise families' CUDA kernels (elementwise_kernels.h)
// for PlaceKind::Cuda, expanding the same family lists as the CPU's
// registrations: one place where the dtypes of each family member are
// decided (elementwise.cu and elementwise_half.cu instantiate the launchers
// of exactly these).
#include <cstdint>

#include "elementwise_kernels.h"
#include "kiln/dialect/kiln_dialect.h"
#include "kiln/kernel/kernel_registry.h"

namespace kiln::cuda {
namespace {

template <typename... Ts>
struct Types {};
using Floats = Types<float, double>;
using Ints = Types<std::int8_t, std::int16_t, std::int32_t, std::int64_t, std::uint8_t,
                   std::uint16_t, std::uint32_t, std::uint64_t>;

template <typename OpT, void (*Kernel)(KernelContext&), typename T>
void add() {
  KernelRegistrar<OpT>(PlaceKind::Cuda, data_type_of<T>, Kernel, OpT::name);
}

template <typename Math, typename... Ts>
void add_binary(Types<Ts...>) {
  (add<BinaryOp<Math>, &binary_kernel<Math, Ts>, Ts>(), ...);
}

template <typename OpT, void (*Bf16)(KernelContext&), void (*F16)(KernelContext&)>
void add_halves() {
  KernelRegistrar<OpT>(PlaceKind::Cuda, DataType::BFloat16, Bf16, OpT::name);
  KernelRegistrar<OpT>(PlaceKind::Cuda, DataType::Float16, F16, OpT::name);
}

template <typename Math>
void register_binary() {
  if constexpr (!integer_only_math<Math>) {
    add_binary<Math>(Floats{});
    add_halves<BinaryOp<Math>, &binary_half_kernel<Math, DataType::BFloat16>,
               &binary_half_kernel<Math, DataType::Float16>>();
  }
  if constexpr (!Math::floating_only) add_binary<Math>(Ints{});
}

template <typename Math, typename... Ts>
void add_unary(Types<Ts...>) {
  (add<UnaryOp<Math>, &unary_kernel<Math, Ts>, Ts>(), ...);
}

template <typename Math>
void register_unary() {
  add_unary<Math>(Floats{});
  if constexpr (!Math::floating_only) add_unary<Math>(Types<std::int32_t, std::int64_t>{});
  add<GradOf<UnaryOp<Math>>, &unary_grad_kernel<Math, float>, float>();
  add<GradOf<UnaryOp<Math>>, &unary_grad_kernel<Math, double>, double>();
  add_halves<UnaryOp<Math>, &unary_half_kernel<Math, DataType::BFloat16>,
             &unary_half_kernel<Math, DataType::Float16>>();
  add_halves<GradOf<UnaryOp<Math>>, &unary_half_grad_kernel<Math, DataType::BFloat16>,
             &unary_half_grad_kernel<Math, DataType::Float16>>();
}

template <typename Math>
void register_inplace_unary() {
  add<InplaceUnaryOp<Math>, &unary_kernel<Math, float>, float>();
  add<InplaceUnaryOp<Math>, &unary_kernel<Math, double>, double>();
  if constexpr (!Math::floating_only) {
    add<InplaceUnaryOp<Math>, &unary_kernel<Math, std::int32_t>, std::int32_t>();
    add<InplaceUnaryOp<Math>, &unary_kernel<Math, std::int64_t>, std::int64_t>();
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

template <typename OpT, typename Math, typename... Ts>
void add_compare(Types<Ts...>) {
  (add<OpT, &compare_kernel<Math, Ts>, Ts>(), ...);
}
template <typename... Maths>
bool register_compare(CompareMathList<Maths...>) {
  using Numeric = Types<float, double, std::int32_t, std::int64_t>;
  auto one = []<typename Math>(Math*) {
    add_compare<CompareOp<Math>, Math>(Numeric{});
    if constexpr (Math::allows_bool) add_compare<CompareOp<Math>, Math>(Types<bool>{});
  };
  (one(static_cast<Maths*>(nullptr)), ...);
  return true;
}
template <typename... Maths>
bool register_logical(CompareMathList<Maths...>) {
  (add_compare<LogicalOp<Maths>, Maths>(Types<bool>{}), ...);
  return true;
}
template <typename... Maths>
bool register_predicates(CompareMathList<Maths...>) {
  (add<PredicateOp<Maths>, &predicate_kernel<Maths, float>, float>(), ...);
  (add<PredicateOp<Maths>, &predicate_kernel<Maths, double>, double>(),
   ...);
  return true;
}

[[maybe_unused]] const bool binaries = register_all(BinaryFamily{});
[[maybe_unused]] const bool unaries = register_unaries(UnaryFamily{});
[[maybe_unused]] const bool inplace = register_inplace(InplaceUnaryFamily{});
[[maybe_unused]] const bool compares = register_compare(CompareFamily{});
[[maybe_unused]] const bool logicals = register_logical(LogicalFamily{});
[[maybe_unused]] const bool predicates = register_predicates(PredicateFamily{});
KILN_REGISTER_KERNEL(LogicalNotOp, Cuda, Bool, logical_not_kernel);

}  // namespace
}  // namespace kiln::cuda
