// Variable's and Scalar's members that copy, swap or print what they hold
// (std::variant's visits), compiled once here.
#include "kiln/runtime/variable.h"

#include <sstream>
#include <utility>

namespace kiln {

std::string Scalar::to_string() const {
  switch (value_.index()) {
    case 0: {
      std::ostringstream os;
      os << std::get<0>(value_);
      return os.str() + " : f64";
    }
    case 1: return std::to_string(std::get<1>(value_)) + " : i64";
    default: return std::get<2>(value_) ? "true : bool" : "false : bool";
  }
}

std::string_view to_string(VariableKind kind) {
  switch (kind) {
    case VariableKind::Empty: return "empty";
    case VariableKind::Tensor: return "tensor";
    case VariableKind::TensorArray: return "tensor_array";
    case VariableKind::Scalar: return "scalar";
  }
  return "unknown";
}

void Variable::swap_content(Variable& other) noexcept {
  content_.swap(other.content_);
  std::swap(parked_, other.parked_);
}

void Variable::share_content(const Variable& other) {
  if (other.parked_) {
    clear();
    return;
  }
  content_ = other.content_;
  parked_ = false;
}

void Variable::take_content(Variable& other) noexcept {
  content_ = std::move(other.content_);
  parked_ = other.parked_;
  other.clear();
}

}  // namespace kiln
