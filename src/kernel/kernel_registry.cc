#include "kiln/kernel/kernel_registry.h"

#include <algorithm>
#include <sstream>

#include "kiln/ir/builtin_types.h"

namespace kiln {

KernelRegistry& KernelRegistry::instance() {
  static KernelRegistry* r = new KernelRegistry();  // never destroyed: used by static registrars
  return *r;
}

void KernelRegistry::add(TypeId op, std::string_view op_name, PlaceKind backend, DataType dtype,
                         KernelInfo info) {
  for (const auto& e : entries_)
    if (e.op == op && e.backend == backend && e.dtype == dtype)
      throw_error(ErrorKind::AlreadyExists, "a kernel for op '", op_name, "' on ",
                  Place{backend, 0}.to_string(), " for ", to_string(dtype),
                  " is already registered");
  entries_.push_back(Entry{op, backend, dtype, std::move(info)});
}

const KernelInfo* KernelRegistry::find(TypeId op, PlaceKind backend, DataType dtype) const {
  const KernelInfo* any = nullptr;
  for (const auto& e : entries_) {
    if (e.op != op || e.backend != backend) continue;
    if (e.dtype == dtype) return &e.info;
    if (e.dtype == DataType::Undefined) any = &e.info;
  }
  return any;
}

bool KernelRegistry::has_backend(PlaceKind backend) const {
  for (const auto& e : entries_)
    if (e.backend == backend) return true;
  return false;
}

// In DataType's order, not registration order: that is static
// initialization's, which follows the link order of the kernels' files (an
// error's list of the dtypes that have kernels read differently when a file
// moved to another library).
std::vector<DataType> KernelRegistry::dtypes_for(TypeId op, PlaceKind backend) const {
  std::vector<DataType> out;
  for (const auto& e : entries_)
    if (e.op == op && e.backend == backend) out.push_back(e.dtype);
  std::sort(out.begin(), out.end());
  return out;
}

const KernelInfo& KernelRegistry::get(const Operation& op, PlaceKind backend, DataType dtype) const {
  if (const KernelInfo* k = find(op.info().id(), backend, dtype)) return *k;
  auto have = dtypes_for(op.info().id(), backend);
  std::string where = Place{backend, 0}.to_string();
  if (have.empty())
    throw_error(ErrorKind::NotFound, "op '", op.name(), "' has no kernel on ", where);
  std::ostringstream list;
  for (std::size_t i = 0; i < have.size(); ++i) list << (i ? ", " : "") << to_string(have[i]);
  throw_error(ErrorKind::Unimplemented, "op '", op.name(), "' has no ", to_string(dtype),
              " kernel on ", where, " (kernels exist for: ", list.str(), ")");
}

DataType kernel_dtype(const Operation& op) {
  if (op.num_operands() && is_shaped(op.operand_source(0).type()))
    return shaped_data_type(op.operand_source(0).type());
  if (op.num_results() && is_shaped(op.result_type(0))) return shaped_data_type(op.result_type(0));
  return DataType::Float32;
}

[[gnu::cold]] void KernelContext::throw_missing_input(std::uint32_t i) const {
  throw_error(ErrorKind::PreconditionNotMet, "op '", op_ ? op_->name() : "(a copy between places)",
              "' input #", i, " holds no tensor");
}

void throw_input_dtype(const KernelContext& ctx, std::uint32_t i, DataType want) {
  throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' input #", i, " is ",
              to_string(ctx.input(i).dtype()), ", the kernel expects ", to_string(want));
}

Tensor& KernelContext::alloc_output(std::uint32_t i, const Dims& dims, DataType dtype) const {
  Tensor& t = outputs_[i]->get_mutable<Tensor>();
  // Reuse the buffer when the shape did not change and nobody else holds it
  // (the common case between runs of a static graph).
  if (t.is_initialized() && t.place() == place_ && t.dtype() == dtype && t.dims() == dims &&
      t.use_count() == 1)
    return t;
  if (!t.is_initialized() && outputs_[i]->has_spare()) {
    // A small temporary the executor's GC recycled (Variable::recycle).
    BufferRef spare = outputs_[i]->take_spare();
    if (spare->allocator() == allocator_ && spare->place() == place_ &&
        t.adopt_buffer(spare, dims, dtype, place_))
      return t;
  }
  t = Tensor::empty(dims, dtype, place_, allocator_);
  return t;
}

}  // namespace kiln
