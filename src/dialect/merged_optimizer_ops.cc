// Definitions of the merged optimizer update ops declared in
// kiln/dialect/merged_optimizer_ops.h: the operand layout, the alias pairs
// and InferMeta (each parameter's operands checked by the single op's
// InferMeta).
#include "kiln/dialect/merged_optimizer_ops.h"

#include <string>

namespace kiln {

KILN_REGISTER_OP(MergedSgd_Op, MergedMomentum_Op, MergedAdam_Op, MergedAdamW_Op);

template <typename Merged, typename Single>
std::uint32_t MergedUpdateBase<Merged, Single>::parameter_count(std::size_t n) {
  const std::size_t groups = n - (has_skip(n) ? 2 : 1);
  if (n < 1 + Layout::operands || groups % Layout::operands != 0)
    throw_error(ErrorKind::InvalidArgument, "op '", Merged::name, "' takes the learning rate and ",
                Layout::operands, " operands per parameter, then optionally '", kSkipOperandName,
                "' (1 + ", Layout::operands, "·k operands, or 2 + ", Layout::operands,
                "·k, k >= 1), got ", n, " operands");
  return static_cast<std::uint32_t>(groups / Layout::operands);
}

template <typename Merged, typename Single>
void MergedUpdateBase<Merged, Single>::inplace_pairs(const Operation& op, std::vector<AliasPair>& out) {
  // A malformed op (its InferMeta reports it) has no whole groups: only
  // the pairs of the groups it has, so that the pairs stay in range.
  const std::uint32_t n = op.num_operands();
  const std::uint32_t k = n < 1 ? 0 : (n - 1) / Layout::operands;
  const std::uint32_t groups = std::min<std::uint32_t>(k, op.num_results() / Layout::results);
  out.reserve(out.size() + groups * Single::inplace_map.size());
  for (std::uint32_t p = 0; p < groups; ++p)
    for (auto [r, i] : Single::inplace_map) out.emplace_back(Layout::result(p, r), Layout::operand(p, i));
}

template <typename Merged, typename Single>
std::vector<Type> MergedUpdateBase<Merged, Single>::infer_meta(const std::vector<Type>& in,
                                                              DictionaryAttribute attrs) {
  const std::uint32_t k = parameter_count(in.size());
  const bool skip = has_skip(in.size());
  std::vector<Type> out;
  out.reserve(std::size_t{k} * Layout::results);
  std::vector<Type> one(Single::num_operands + (skip ? 1 : 0));
  for (std::uint32_t p = 0; p < k; ++p) {
    for (std::uint32_t i = 0; i < Single::num_operands; ++i) one[i] = in[Layout::operand(p, i)];
    if (skip) one.back() = in.back();
    std::vector<Type> r;
    try {
      r = Single::infer_meta(one, attrs);
    } catch (const Error& e) {
      // The single op's message names the operand; its index there is
      // the single op's, so the merged op's operands are named too.
      throw Error(e.kind(), "op '" + std::string(Merged::name) + "' parameter #" + std::to_string(p) +
                                " (operands #" + std::to_string(1 + p * Layout::operands) + "..#" +
                                std::to_string((p + 1) * Layout::operands) +
                                ", learning rate #0), checked as " + std::string(Single::name) + ": " +
                                e.message());
    }
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

template struct MergedUpdateBase<MergedSgd_Op, Sgd_Op>;
template struct MergedUpdateBase<MergedMomentum_Op, Momentum_Op>;
template struct MergedUpdateBase<MergedAdam_Op, Adam_Op>;
template struct MergedUpdateBase<MergedAdamW_Op, AdamW_Op>;

namespace {
void add_operands(OperationArgument& arg, std::string_view name, std::uint32_t per, Value lr,
                  const std::vector<Value>& members, Value skip) {
  if (members.empty() || members.size() % per != 0)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' build: ", per,
                " operands per parameter, got ", members.size());
  arg.add_operands({lr});
  for (Value v : members) arg.add_operands({v});
  if (skip) arg.add_operands({skip});
}
}  // namespace

void MergedSgd_Op::build(Builder&, OperationArgument& arg, Value lr, const std::vector<Value>& members,
                         Value skip) {
  add_operands(arg, name, Layout::operands, lr, members, skip);
}

void MergedMomentum_Op::build(Builder&, OperationArgument& arg, Value lr,
                              const std::vector<Value>& members, const Attributes& attrs, Value skip) {
  add_operands(arg, name, Layout::operands, lr, members, skip);
  arg.attributes = to_named_attributes(attrs);
}

void MergedAdam_Op::build(Builder&, OperationArgument& arg, Value lr, const std::vector<Value>& members,
                          const Attributes& attrs, Value skip) {
  add_operands(arg, name, Layout::operands, lr, members, skip);
  arg.attributes = to_named_attributes(attrs);
}

void MergedAdamW_Op::build(Builder&, OperationArgument& arg, Value lr, const std::vector<Value>& members,
                           const Attributes& attrs, Value skip) {
  add_operands(arg, name, Layout::operands, lr, members, skip);
  arg.attributes = to_named_attributes(attrs);
}

}  // namespace kiln
