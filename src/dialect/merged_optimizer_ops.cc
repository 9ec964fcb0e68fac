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
  if (n < 1 + Layout::operands || (n - 1) % Layout::operands != 0)
    throw_error(ErrorKind::InvalidArgument, "op '", Merged::name, "' takes the learning rate and ",
                Layout::operands, " operands per parameter (1 + ", Layout::operands,
                "·k operands, k >= 1), got ", n, " operands");
  return static_cast<std::uint32_t>((n - 1) / Layout::operands);
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
  std::vector<Type> out;
  out.reserve(std::size_t{k} * Layout::results);
  std::vector<Type> one(Single::num_operands);
  for (std::uint32_t p = 0; p < k; ++p) {
    for (std::uint32_t i = 0; i < one.size(); ++i) one[i] = in[Layout::operand(p, i)];
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
                  const std::vector<Value>& members) {
  if (members.empty() || members.size() % per != 0)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' build: ", per,
                " operands per parameter, got ", members.size());
  arg.add_operands({lr});
  for (Value v : members) arg.add_operands({v});
}
}  // namespace

void MergedSgd_Op::build(Builder&, OperationArgument& arg, Value lr, const std::vector<Value>& members) {
  add_operands(arg, name, Layout::operands, lr, members);
}

void MergedMomentum_Op::build(Builder&, OperationArgument& arg, Value lr,
                              const std::vector<Value>& members, const Attributes& attrs) {
  add_operands(arg, name, Layout::operands, lr, members);
  arg.attributes = to_named_attributes(attrs);
}

void MergedAdam_Op::build(Builder&, OperationArgument& arg, Value lr, const std::vector<Value>& members,
                          const Attributes& attrs) {
  add_operands(arg, name, Layout::operands, lr, members);
  arg.attributes = to_named_attributes(attrs);
}

void MergedAdamW_Op::build(Builder&, OperationArgument& arg, Value lr, const std::vector<Value>& members,
                           const Attributes& attrs) {
  add_operands(arg, name, Layout::operands, lr, members);
  arg.attributes = to_named_attributes(attrs);
}

}  // namespace kiln
