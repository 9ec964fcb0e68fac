// CPU kernel of kiln.print (kiln/dialect/debug_ops.h): the result is the
// operand itself (a view, ViewLike); the values are formatted and written
// through detail::write_print_line with the instruction's own run count.
#include <atomic>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>

#include "cpu_kernel_util.h"
#include "kiln/dialect/debug_ops.h"

namespace kiln::cpu {
namespace {

template <typename T>
void append_values(std::ostringstream& os, const Tensor& x, std::int64_t k) {
  const T* p = x.data<T>();
  for (std::int64_t i = 0; i < k; ++i) {
    if (i) os << ", ";
    if constexpr (std::is_same_v<T, bool>) os << (p[i] ? "true" : "false");
    else if constexpr (sizeof(T) == 1) os << static_cast<int>(p[i]);
    else os << p[i];
  }
}

// The type and the first k values, row-major, "..." when there are more.
std::string summarized(const Tensor& x, std::int64_t k) {
  if (!x.is_initialized() || !x.place().is_cpu()) return x.to_string();
  const std::int64_t n = x.numel();
  if (k > n) k = n;
  std::ostringstream os;
  os << x.type_string() << " [";
  switch (x.dtype()) {
    case DataType::Float32: append_values<float>(os, x, k); break;
    case DataType::Float64: append_values<double>(os, x, k); break;
    case DataType::Int32: append_values<std::int32_t>(os, x, k); break;
    case DataType::Int64: append_values<std::int64_t>(os, x, k); break;
    case DataType::Int8: append_values<std::int8_t>(os, x, k); break;
    case DataType::Bool: append_values<bool>(os, x, k); break;
    case DataType::UInt8: append_values<std::uint8_t>(os, x, k); break;
    case DataType::Int16: append_values<std::int16_t>(os, x, k); break;
    case DataType::UInt16: append_values<std::uint16_t>(os, x, k); break;
    case DataType::UInt32: append_values<std::uint32_t>(os, x, k); break;
    case DataType::UInt64: append_values<std::uint64_t>(os, x, k); break;
    default:  // f16 / bf16: the full form knows their formats
      return x.to_string();
  }
  if (k < n) os << (k ? ", ..." : "...");
  os << "]";
  return os.str();
}

// The instruction's decoded attributes and its run counter: one per
// instruction of a plan, shared by the plan's run states (hence atomic).
struct PrintInstruction {
  PrintOp::Attributes attrs;
  mutable std::atomic<std::int64_t> runs{0};
};

std::shared_ptr<const void> decode_print(Operation* op) {
  auto p = std::make_shared<PrintInstruction>();
  p->attrs = from_attributes<PrintOp::Attributes>(op->attributes(), PrintOp::name);
  return p;
}

void print_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto& p = *static_cast<const PrintInstruction*>(ctx.attrs_ptr());
  const auto& a = p.attrs;
  std::string text = a.summarize < 0 ? x.to_string() : summarized(x, a.summarize);
  // relaxed: the count orders nothing; the print lock orders the lines.
  detail::write_print_line(p.runs.fetch_add(1, std::memory_order_relaxed) + 1, a.message, text);
  ctx.output(0) = x;  // a view: the same buffer (view_map {0, 0})
}

const bool registered = [] {
  KernelRegistry::instance().add(TypeId::get<PrintOp>(), PrintOp::name, PlaceKind::Cpu,
                                 DataType::Undefined,
                                 KernelInfo{&print_kernel, "print_kernel", &decode_print});
  return true;
}();

}  // namespace

}  // namespace kiln::cpu
