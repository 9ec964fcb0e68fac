#include "kiln/frontend/op_role.h"

#include <string>

#include "kiln/ir/block.h"

namespace kiln {

void set_op_role(Operation* op, OpRole role) {
  if (role == OpRole::Forward) op->erase_attribute(kOpRoleAttr);
  else op->set_attribute(kOpRoleAttr, StrAttribute::get(std::string(to_string(role))));
}

OpRole op_role(const Operation* op) {
  auto s = op->attribute(kOpRoleAttr).dyn_cast<StrAttribute>();
  if (!s) return OpRole::Forward;
  if (s.value() == to_string(OpRole::Backward)) return OpRole::Backward;
  if (s.value() == to_string(OpRole::Optimize)) return OpRole::Optimize;
  return OpRole::Forward;
}

void set_op_role_after(Block& block, Operation* mark, OpRole role) {
  for (Operation* op = mark ? mark->next_in_block() : block.front(); op; op = op->next_in_block())
    set_op_role(op, role);
}

}  // namespace kiln
