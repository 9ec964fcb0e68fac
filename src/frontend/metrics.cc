// The metrics of kiln/frontend/metrics.h.
#include "kiln/frontend/metrics.h"

#include <string>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/program_guard.h"
#include "kiln/support/error.h"

namespace kiln::nn::functional {

namespace {

const std::vector<std::int64_t>& checked_dims(std::string_view arg, Value v) {
  if (!v) throw_error(ErrorKind::InvalidArgument, "accuracy: ", arg, " is a null value");
  if (!in_current_program(v))
    throw_error(ErrorKind::InvalidArgument, "accuracy: ", arg,
                " is not a value of the current main program (made under another ProgramGuard?)");
  if (!is_shaped(v.type()))
    throw_error(ErrorKind::InvalidArgument, "accuracy: ", arg, " must be a tensor, got ",
                v.type().to_string());
  return shaped_dims(v.type());
}

bool known_differ(std::int64_t a, std::int64_t b) { return a != -1 && b != -1 && a != b; }

}  // namespace

Value accuracy(Value input, Value label, std::int64_t k) {
  const auto& x = checked_dims("input", input);
  const auto& l = checked_dims("label", label);
  if (x.size() != 2)
    throw_error(ErrorKind::InvalidArgument, "accuracy: input must be [N, C], got ",
                meta::dims_string(x));
  const DataType xt = shaped_data_type(input.type());
  if (xt != DataType::Float32 && xt != DataType::Float64 && xt != DataType::Int32 &&
      xt != DataType::Int64)
    throw_error(ErrorKind::InvalidArgument, "accuracy: input must be f32, f64, i32 or i64, got ",
                to_string(xt));
  const DataType lt = shaped_data_type(label.type());
  if (lt != DataType::Int32 && lt != DataType::Int64)
    throw_error(ErrorKind::InvalidArgument, "accuracy: label must be i32 or i64, got ",
                to_string(lt));
  if (!(l.size() == 1 || (l.size() == 2 && (l[1] == 1 || l[1] == -1))) || known_differ(l[0], x[0]))
    throw_error(ErrorKind::InvalidArgument, "accuracy: label must be [N] or [N, 1] for input ",
                meta::dims_string(x), ", got ", meta::dims_string(l));
  if (k <= 0 || (x[1] != -1 && k > x[1]))
    throw_error(ErrorKind::InvalidArgument, "accuracy: k must be in [1, C = ", x[1], "], got ",
                k);
  Builder b = main_builder();
  Value idx = b.create<TopKOp>(input, k).result(1);  // i64 [N, k]
  Value target = label;
  if (lt != DataType::Int64) target = b.create<CastOp>(target, DataType::Int64).result();
  if (l.size() == 1) target = b.create<ReshapeOp>(target, std::vector<std::int64_t>{-1, 1}).result();
  // [N, k] == [N, 1]: at most one hit per row (the k indices are distinct).
  Value hit = b.create<CastOp>(b.create<EqualOp>(idx, target).result(), DataType::Float32).result();
  Value per_row = b.create<SumOp>(hit, std::vector<std::int64_t>{1}).result();
  return b.create<MeanOp>(per_row).result();
}

}  // namespace kiln::nn::functional
