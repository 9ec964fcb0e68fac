// The ops of kiln/dialect/control_flow_ops.h: build, verify, registration.
#include "kiln/dialect/control_flow_ops.h"
#include "kiln/dialect/tensor_array_ops.h"

#include <string>

#include "kiln/support/error.h"

namespace kiln {

KILN_REGISTER_OP(YieldOp, IfOp, WhileOp);

namespace {
// A tensor, vtensor or tensor_array type's dtype and dims (null for others).
struct ShapeOf {
  DataType dtype = DataType::Undefined;
  const std::vector<std::int64_t>* dims = nullptr;
};
ShapeOf shape_of(Type t) {
  if (is_shaped(t)) return {shaped_data_type(t), &shaped_dims(t)};
  if (is_tensor_array(t)) {
    auto a = t.cast<TensorArrayType>();
    return {a.data_type(), &a.dims()};
  }
  return {};
}
}  // namespace

bool type_fits(Type value, Type declared) {
  if (value == declared) return true;
  const ShapeOf v = shape_of(value), d = shape_of(declared);
  if (!v.dims || !d.dims || value.type_id() != declared.type_id() || v.dtype != d.dtype ||
      v.dims->size() != d.dims->size())
    return false;
  for (std::size_t i = 0; i < v.dims->size(); ++i)
    if ((*d.dims)[i] != -1 && (*v.dims)[i] != (*d.dims)[i]) return false;
  return true;
}

Type join_types(Type a, Type b) {
  if (a == b) return a;
  const ShapeOf sa = shape_of(a), sb = shape_of(b);
  if (!sa.dims || !sb.dims || a.type_id() != b.type_id() || sa.dtype != sb.dtype ||
      sa.dims->size() != sb.dims->size())
    return Type();
  std::vector<std::int64_t> dims = *sa.dims;
  for (std::size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != (*sb.dims)[i]) dims[i] = -1;
  if (a.isa<VTensorType>()) return VTensorType::get(sa.dtype, dims);
  if (a.isa<TensorArrayType>()) return TensorArrayType::get(sa.dtype, dims);
  return TensorType::get(sa.dtype, dims);
}

bool is_condition_type(Type t) {
  if (!is_shaped(t) || shaped_data_type(t) != DataType::Bool) return false;
  for (std::int64_t d : shaped_dims(t))
    if (d != 1 && d != -1) return false;
  return true;
}

namespace {

void check_condition(std::string_view op, Type t, const char* what) {
  if (!is_condition_type(t))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what,
                " must be a bool tensor of one element, got ", t ? t.to_string() : "no type");
}

// The one block of a region, ending in kiln.yield; its arguments' types are
// `arg_types`.
YieldOp region_yield(std::string_view op, const Region& r, const char* region,
                     const std::vector<Type>& arg_types) {
  if (r.size() != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' region '", region,
                "' must have one block, has ", r.size());
  const Block& b = r.front();
  if (b.num_arguments() != arg_types.size())
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' region '", region, "' block has ",
                b.num_arguments(), " arguments, expected ", arg_types.size());
  for (std::uint32_t i = 0; i < b.num_arguments(); ++i)
    if (b.argument(i).type() != arg_types[i])
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' region '", region, "' argument #", i,
                  " is ", b.argument(i).type().to_string(), ", expected ",
                  arg_types[i].to_string());
  YieldOp y = b.empty() ? YieldOp(nullptr) : YieldOp::dyn_cast(b.back());
  if (!y)
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' region '", region,
                "' must end in kiln.yield");
  return y;
}

void check_yield(std::string_view op, const char* region, YieldOp y, std::uint32_t first,
                 const std::vector<Type>& want) {
  Operation* yo = y.operation();
  if (yo->num_operands() != first + want.size())
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' region '", region, "' yields ",
                yo->num_operands(), " values, expected ", first + want.size());
  for (std::uint32_t i = 0; i < want.size(); ++i) {
    Type t = yo->operand_source(first + i).type();
    if (!type_fits(t, want[i]))
      throw_error(ErrorKind::InvalidArgument, "op '", op, "' region '", region, "' yields ",
                  t.to_string(), " as value #", i, ", which does not fit the result type ",
                  want[i].to_string());
  }
}

}  // namespace

void YieldOp::build(Builder&, OperationArgument& arg, const std::vector<Value>& values) {
  arg.add_operands(values);
}

void IfOp::build(Builder&, OperationArgument& arg, Value pred, const std::vector<Value>& captures,
                 const std::vector<Type>& result_types) {
  arg.add_operand(pred);
  arg.add_operands(captures);
  arg.result_types = result_types;
  arg.num_regions = 2;
}

void IfOp::verify() const {
  Operation* op = op_;
  if (op->num_operands() < 1)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' needs a condition operand");
  check_condition(name, op->operand_source(0).type(), "condition (operand #0)");
  std::vector<Type> caps, results;
  for (std::uint32_t i = 1; i < op->num_operands(); ++i) caps.push_back(op->operand_source(i).type());
  for (std::uint32_t i = 0; i < op->num_results(); ++i) results.push_back(op->result_type(i));
  check_yield(name, "then", region_yield(name, then_region(), "then", caps), 0, results);
  // A result-less if may leave its else region empty.
  if (else_region().empty() && results.empty()) return;
  check_yield(name, "else", region_yield(name, else_region(), "else", caps), 0, results);
}

void WhileOp::build(Builder&, OperationArgument& arg, Value cond, const std::vector<Value>& inits,
                    const std::vector<Value>& captures, std::int64_t max_iterations,
                    const std::vector<Type>& result_types) {
  arg.add_operand(cond);
  arg.add_operands(inits);
  arg.add_operands(captures);
  if (result_types.empty())
    for (Value v : inits) arg.add_result(v.type());
  else
    arg.result_types = result_types;
  arg.attributes = to_named_attributes(Attributes{max_iterations});
  arg.num_regions = 1;
}

void WhileOp::verify() const {
  Operation* op = op_;
  const std::uint32_t n = op->num_results();
  if (op->num_operands() < 1 + n)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' has ", n,
                " results, so it needs a condition and ", n, " initial values; it has ",
                op->num_operands(), " operands");
  check_condition(name, op->operand_source(0).type(), "condition (operand #0)");
  const auto max = attrs().max_iterations;
  if (max < -1)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' max_iterations is ", max,
                ", expected -1 (unbounded) or a count >= 0");
  std::vector<Type> args, results;
  for (std::uint32_t j = 0; j < n; ++j) {
    Type init = op->operand_source(1 + j).type();
    if (!type_fits(init, op->result_type(j)))
      throw_error(ErrorKind::InvalidArgument, "op '", name, "' initial value #", j, " is ",
                  init.to_string(), ", which does not fit the result type ",
                  op->result_type(j).to_string());
    args.push_back(op->result_type(j));
    results.push_back(op->result_type(j));
  }
  for (std::uint32_t i = 1 + n; i < op->num_operands(); ++i)
    args.push_back(op->operand_source(i).type());
  YieldOp y = region_yield(name, body_region(), "body", args);
  if (y.operation()->num_operands() < 1)
    throw_error(ErrorKind::InvalidArgument, "op '", name,
                "' region 'body' must yield the next condition first");
  check_condition(name, y.operation()->operand_source(0).type(),
                  "body's next condition (yield operand #0)");
  check_yield(name, "body", y, 1, results);
}

}  // namespace kiln
