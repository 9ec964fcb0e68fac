// The ops of kiln/dialect/signal_ops.h: InferMeta and registration.
#include "kiln/dialect/signal_ops.h"

#include "kiln/dialect/infer_meta_util.h"

namespace kiln {

KILN_REGISTER_OP(StftOp, MelWeightMatrixOp);

namespace {
// Operand i: one value (rank 0 or [1]) of an integer dtype, or of a float one.
void require_scalar(std::string_view op, const std::vector<Type>& in, std::size_t i, const char* what,
                    bool integer) {
  Type t = meta::tensor_operand(op, in, i);
  const auto& d = shaped_dims(t);
  const DataType dt = shaped_data_type(t);
  const bool ok_dtype = integer ? meta::is_index_dtype(dt) : dt == DataType::Float32 || dt == DataType::Float64;
  if (!ok_dtype || !(d.empty() || (d.size() == 1 && (d[0] == 1 || d[0] < 0))))
    throw_error(ErrorKind::InvalidArgument, "op '", op, "' ", what, " must be one ",
                integer ? "i32 or i64" : "f32 or f64", " value, got ", to_string(dt), " ", meta::dims_string(d));
}
}  // namespace

void StftOp::build(Builder&, OperationArgument& arg, Value signal, Value frame_step, Value window, bool onesided) {
  arg.add_operands({signal, frame_step, window});
  arg.attributes = to_named_attributes(Attributes{onesided});
}

std::vector<Type> StftOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  meta::require_count(name, in, 3);
  const bool onesided = from_attributes<Attributes>(attrs, name).onesided;
  Type s = meta::float_operand(name, in, 0);
  const auto& sd = shaped_dims(s);
  if (sd.size() != 3 || (sd[2] >= 0 && sd[2] != 1 && sd[2] != 2))
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' signal must be [B, L, 1] (real) or [B, L, 2] (complex), got ",
                meta::dims_string(sd));
  if (onesided && sd[2] == 2)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' a onesided transform takes a real signal [B, L, 1], got ",
                meta::dims_string(sd));
  require_scalar(name, in, 1, "frame_step", true);
  Type w = meta::tensor_operand(name, in, 2);
  meta::require_same_dtype(name, shaped_data_type(s), shaped_data_type(w), 0, 2);
  const auto& wd = shaped_dims(w);
  if (wd.size() != 1)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' window must be 1-D [N], got ", meta::dims_string(wd));
  const std::int64_t bins = wd[0] < 0 ? -1 : onesided ? wd[0] / 2 + 1 : wd[0];
  return {meta::result_like(in, shaped_data_type(s), {sd[0], -1, bins, 2})};
}

void MelWeightMatrixOp::build(Builder&, OperationArgument& arg, Value num_mel_bins, Value dft_length,
                              Value sample_rate, Value lower_edge_hertz, Value upper_edge_hertz, DataType dtype) {
  arg.add_operands({num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz});
  arg.attributes = to_named_attributes(Attributes{dtype});
}

std::vector<Type> MelWeightMatrixOp::infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs) {
  meta::require_count(name, in, 5);
  const DataType dt = from_attributes<Attributes>(attrs, name).dtype;
  if (dt != DataType::Float32 && dt != DataType::Float64)
    throw_error(ErrorKind::InvalidArgument, "op '", name, "' makes f32 or f64, got ", to_string(dt));
  const char* what[] = {"num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz"};
  for (std::size_t i = 0; i < 5; ++i) require_scalar(name, in, i, what[i], i < 3);
  return {meta::result_like(in, dt, {-1, -1})};
}

}  // namespace kiln
