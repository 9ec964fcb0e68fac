// inplace_pairs (kiln/ir/inplace_pairs.h): the op's InplaceMapInterface when
// it has one, else its type's static inplace_map.
#include "kiln/ir/inplace_pairs.h"

#include "kiln/ir/traits.h"

namespace kiln {

InplacePairs inplace_pairs(const Operation& op) {
  const OpInfo info = op.info();
  if (!info.has_trait<Inplace>()) return InplacePairs(std::span<const AliasPair>{});
  if (const void* c = info.interface_concept(InplaceMapInterface::interface_id())) {
    std::vector<AliasPair> out;
    static_cast<const InplaceMapInterface::Concept*>(c)->inplace_pairs(op, out);
    return InplacePairs(std::move(out));
  }
  return InplacePairs(std::span<const AliasPair>(info.impl()->inplace_map));
}

}  // namespace kiln
