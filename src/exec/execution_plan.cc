#include "kiln/exec/execution_plan.h"

namespace kiln {

namespace {
// -1 in `dims` matches any extent.
bool shape_matches(const PlanFeed& f, const Tensor& t) {
  if (!f.shaped || f.dtype != t.dtype() || static_cast<int>(f.dims.size()) != t.rank()) return false;
  for (std::size_t i = 0; i < f.dims.size(); ++i)
    if (f.dims[i] >= 0 && f.dims[i] != t.dims()[static_cast<int>(i)]) return false;
  return true;
}
}  // namespace

void ExecutionPlan::check_feeds(std::span<Tensor* const> given) const {
  if (given.size() != feeds.size())
    throw_error(ErrorKind::InvalidArgument, "expected ", feeds.size(), " feeds, got ", given.size());
  for (std::size_t k = 0; k < given.size(); ++k) {
    const Tensor& t = *given[k];
    if (!t.is_initialized())
      throw_error(ErrorKind::InvalidArgument, "feed '", feeds[k].name, "' holds no tensor");
    if (!shape_matches(feeds[k], t))
      throw_error(ErrorKind::InvalidArgument, "feed '", feeds[k].name, "': expected ",
                  feeds[k].type.to_string(), ", got ", t.type_string());
    // Host places share memory; a device's tensors are its own.
    const Place want = slots[feeds[k].slot].place;
    const bool host_want = want.kind != PlaceKind::Cuda, host_got = t.place().kind != PlaceKind::Cuda;
    if (host_want != host_got || (!host_want && want != t.place()))
      throw_error(ErrorKind::InvalidArgument, "feed '", feeds[k].name, "' is a tensor on ",
                  t.place().to_string(), "; the program's data op takes it on ", want.to_string(),
                  " (copy it with copy_to_place, or give the data op that place)");
  }
}

std::string ExecutionPlan::describe(std::uint32_t i) const {
  const PlanInstruction& in = instructions.at(i);
  std::string s = "op ";
  if (in.op_index != kNoIndex) s += "#" + std::to_string(in.op_index) + " ";
  s += "'" + in.name + "'";
  if (in.lane.is_stream) s += " on stream '" + stream_names[static_cast<std::size_t>(in.lane.stream)] + "'";
  return s;
}

std::string ExecutionPlan::label(std::uint32_t i) const {
  const PlanInstruction& in = instructions.at(i);
  std::string_view name = in.name;
  if (auto dot = name.find('.'); dot != std::string_view::npos && in.op) name.remove_prefix(dot + 1);
  std::string s(name);
  if (in.op_index != kNoIndex) s += "#" + std::to_string(in.op_index);
  return s;
}

}  // namespace kiln
