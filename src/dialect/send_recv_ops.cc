// kiln.send and kiln.recv (kiln/dialect/send_recv_ops.h).
#include "kiln/dialect/send_recv_ops.h"

#include "kiln/dialect/infer_meta_util.h"
#include "kiln/dialect/rendezvous_key.h"

namespace kiln {

KILN_REGISTER_OP(SendOp, RecvOp);

namespace {

// The key the op's attributes make: kiln::Error naming the op when the
// name or a place cannot form one.
void check_key(std::string_view op, const std::string& tensor_name, Place src, Place dst) {
  try {
    RendezvousKey(src, dst, tensor_name);
  } catch (const Error& e) {
    throw Error(e.kind(), "op '" + std::string(op) + "' tensor_name '" + tensor_name + "': " + e.message());
  }
}

}  // namespace

void SendOp::build(Builder&, OperationArgument& arg, Value x, const std::string& tensor_name,
                   Place src_place, Place dst_place) {
  arg.add_operand(x);
  arg.attributes = to_named_attributes(Attributes{tensor_name, src_place, dst_place});
}

std::vector<Type> SendOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  const auto a = from_attributes<Attributes>(attrs, name);
  check_key(name, a.tensor_name, a.src_place, a.dst_place);
  meta::require_count(name, in, 1);
  meta::tensor_operand(name, in, 0);
  return {};
}

void RecvOp::build(Builder&, OperationArgument& arg, const std::string& tensor_name, DataType dtype,
                   const std::vector<std::int64_t>& shape, Place src_place, Place dst_place,
                   bool passes_dead) {
  arg.attributes =
      to_named_attributes(Attributes{tensor_name, src_place, dst_place, dtype, shape, passes_dead});
}

std::vector<Type> RecvOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  const auto a = from_attributes<Attributes>(attrs, name);
  check_key(name, a.tensor_name, a.src_place, a.dst_place);
  meta::require_count(name, in, 0);
  meta::check_shape_attr(name, a.shape);
  if (a.dtype == DataType::Undefined)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' tensor_name '", a.tensor_name,
                "' needs a dtype");
  return {TensorType::get(a.dtype, a.shape)};
}

}  // namespace kiln
