// CPU kernels of the tensor-array ops (kiln/dialect/tensor_array_ops.h). A
// Variable holds the array (a std::vector<Tensor>); an element is a tensor
// handle sharing its buffer, or an uninitialized tensor where the element is
// missing. The in-place ops (write, add, erase) update their output
// variable, which is their input's unless the plan gave them a copy.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "cpu_kernel_util.h"
#include "kiln/dialect/tensor_array_ops.h"

namespace kiln::cpu {
namespace {

// Input i's array; kiln::Error naming the op when it holds none.
const TensorArray& input_array(const KernelContext& ctx, std::uint32_t i) {
  const Variable& v = ctx.input_var(i);
  if (!v.is<TensorArray>())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' input #", i,
                " must hold a tensor_array, holds ", to_string(v.kind()));
  return v.get<TensorArray>();
}

// The array an in-place op updates: output 0, which starts as input 0.
TensorArray& updated_array(KernelContext& ctx) {
  const TensorArray& in = input_array(ctx, 0);
  Variable& out = ctx.output_var(0);
  if (&out != &ctx.input_var(0)) {
    out.clear();
    out.set(in);
  }
  return out.get<TensorArray>();
}

// Input i as an index: an i32 / i64 tensor of one element, >= 0.
std::int64_t input_index(const KernelContext& ctx, std::uint32_t i) {
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1 || (t.dtype() != DataType::Int64 && t.dtype() != DataType::Int32))
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' index (input #", i,
                ") must be an i32 or i64 tensor of one element, got ", t.type_string());
  const std::int64_t k = t.dtype() == DataType::Int64 ? *t.data<std::int64_t>()
                                                      : *t.data<std::int32_t>();
  if (k < 0)
    throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(), "' index ", k, " is negative");
  return k;
}

// Element dims and dtype every element of `a` shares; kiln::Error naming
// the op when they differ or one is missing.
const Tensor& uniform_elements(const KernelContext& ctx, const TensorArray& a) {
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (!a[k].is_initialized())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' element ", k,
                  " of the array was never written");
    if (a[k].dims() != a[0].dims() || a[k].dtype() != a[0].dtype())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' element ", k, " is ",
                  a[k].type_string(), ", element 0 is ", a[0].type_string(),
                  ": stacked elements must have one type");
  }
  return a[0];
}

// Copies element `e` (dims without the axis) into slot k of `out`, which
// stacks n elements along `axis`: out viewed as [outer, n, inner].
void copy_into(Tensor& out, const Tensor& e, std::int64_t axis, std::int64_t k, std::int64_t n) {
  const std::size_t esize = size_of(out.dtype());
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < axis; ++d) outer *= out.dims()[static_cast<int>(d)];
  const std::size_t inner = static_cast<std::size_t>(e.numel() / std::max<std::int64_t>(outer, 1)) * esize;
  char* dst = static_cast<char*>(out.raw_data());
  const char* src = static_cast<const char*>(e.raw_data());
  for (std::int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + (static_cast<std::size_t>(o * n + k)) * inner, src + o * inner, inner);
}

Dims stacked_dims(const Dims& element, std::int64_t axis, std::int64_t n) {
  std::vector<std::int64_t> d(element.begin(), element.end());
  d.insert(d.begin() + axis, n);
  return Dims(d);
}

std::int64_t stack_axis(std::int64_t axis, int element_rank) {
  return axis < 0 ? axis + element_rank + 1 : axis;
}

void array_create_kernel(KernelContext& ctx) {
  Variable& out = ctx.output_var(0);
  if (out.is<TensorArray>()) out.get<TensorArray>().clear();
  else {
    out.clear();
    out.set(TensorArray{});
  }
}

void array_length_kernel(KernelContext& ctx) {
  const TensorArray& a = input_array(ctx, 0);
  Tensor& n = ctx.alloc_output(0, Dims({1}), DataType::Int64);
  *n.data<std::int64_t>() = static_cast<std::int64_t>(a.size());
}

void array_write_kernel(KernelContext& ctx) {
  const std::int64_t k = input_index(ctx, 1);
  const Tensor& x = ctx.input(2);
  const auto t = ctx.op()->operand_source(0).type().cast<TensorArrayType>();
  if (x.dtype() != t.data_type())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' writes ", x.type_string(),
                " into an array of ", to_string(t.data_type()));
  TensorArray& a = updated_array(ctx);
  if (static_cast<std::size_t>(k) >= a.size()) a.resize(static_cast<std::size_t>(k) + 1);
  a[static_cast<std::size_t>(k)] = x;
}

void array_read_kernel(KernelContext& ctx) {
  const TensorArray& a = input_array(ctx, 0);
  const std::int64_t k = input_index(ctx, 1);
  if (static_cast<std::size_t>(k) >= a.size())
    throw_error(ErrorKind::OutOfRange, "op '", ctx.op()->name(), "' reads element ", k,
                " of an array of length ", a.size());
  const Tensor& e = a[static_cast<std::size_t>(k)];
  if (!e.is_initialized())
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' reads element ", k,
                ", which was never written");
  ctx.output(0) = e;
}

void array_read_or_zeros_kernel(KernelContext& ctx) {
  const TensorArray& a = input_array(ctx, 0);
  const std::int64_t k = input_index(ctx, 1);
  const Tensor& like = ctx.input(2);
  if (static_cast<std::size_t>(k) < a.size() && a[static_cast<std::size_t>(k)].is_initialized()) {
    const Tensor& e = a[static_cast<std::size_t>(k)];
    if (e.dims() != like.dims())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' element ", k, " is ",
                  e.type_string(), ", expected the shape of ", like.type_string());
    ctx.output(0) = e;
    return;
  }
  Tensor& out = ctx.alloc_output(0, like.dims(), like.dtype());
  if (out.bytes()) std::memset(out.raw_data(), 0, out.bytes());
}

void array_stack_kernel(KernelContext& ctx) {
  const TensorArray& a = input_array(ctx, 0);
  const auto t = ctx.op()->operand_source(0).type().cast<TensorArrayType>();
  const std::int64_t axis = stack_axis(ctx.attrs<ArrayStackOp>().axis, static_cast<int>(t.rank()));
  if (a.empty()) {
    if (!t.has_static_shape())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(),
                  "' stacks an empty array whose element dims are not all known (",
                  Type(t).to_string(), ")");
    ctx.alloc_output(0, stacked_dims(Dims(t.dims()), axis, 0), t.data_type());
    return;
  }
  const Tensor& e0 = uniform_elements(ctx, a);
  const auto n = static_cast<std::int64_t>(a.size());
  Tensor& out = ctx.alloc_output(0, stacked_dims(e0.dims(), axis, n), e0.dtype());
  for (std::int64_t k = 0; k < n; ++k) copy_into(out, a[static_cast<std::size_t>(k)], axis, k, n);
}

void array_from_tensor_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::int64_t axis = ctx.attrs<ArrayFromTensorOp>().axis < 0
                                ? ctx.attrs<ArrayFromTensorOp>().axis + x.rank()
                                : ctx.attrs<ArrayFromTensorOp>().axis;
  const std::int64_t n = x.dim(static_cast<int>(axis));
  std::vector<std::int64_t> ed(x.dims().begin(), x.dims().end());
  ed.erase(ed.begin() + axis);
  const Dims edims(ed);
  Variable& out = ctx.output_var(0);
  if (!out.is<TensorArray>()) {
    out.clear();
    out.set(TensorArray{});
  }
  TensorArray& a = out.get<TensorArray>();
  a.assign(static_cast<std::size_t>(n), Tensor());
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < axis; ++d) outer *= x.dim(static_cast<int>(d));
  for (std::int64_t k = 0; k < n; ++k) {
    if (axis == 0) {  // a view of row k
      a[static_cast<std::size_t>(k)] = x.slice(k, k + 1).reshape(edims);
      continue;
    }
    Tensor e = Tensor::empty(edims, x.dtype(), x.place(), &ctx.allocator());
    const std::size_t inner = static_cast<std::size_t>(e.numel() / std::max<std::int64_t>(outer, 1)) *
                              size_of(x.dtype());
    const char* src = static_cast<const char*>(x.raw_data());
    for (std::int64_t o = 0; o < outer; ++o)
      std::memcpy(static_cast<char*>(e.raw_data()) + o * inner,
                  src + static_cast<std::size_t>(o * n + k) * inner, inner);
    a[static_cast<std::size_t>(k)] = std::move(e);
  }
}

template <typename T>
void add_into(T* dst, const T* a, const T* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
}

void array_add_kernel(KernelContext& ctx) {
  const TensorArray other = input_array(ctx, 1);  // a copy of handles: input 1 may be output 0
  TensorArray& a = updated_array(ctx);
  if (a.size() < other.size()) a.resize(other.size());
  for (std::size_t k = 0; k < other.size(); ++k) {
    const Tensor& b = other[k];
    if (!b.is_initialized()) continue;
    Tensor& e = a[k];
    if (!e.is_initialized()) {
      e = b;
      continue;
    }
    if (e.dims() != b.dims() || e.dtype() != b.dtype())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' adds element ", k, " ",
                  b.type_string(), " to ", e.type_string());
    // In place when the element's buffer is this array's alone.
    Tensor sum = e.use_count() == 1 && e.offset() == 0
                     ? e
                     : Tensor::empty(e.dims(), e.dtype(), e.place(), &ctx.allocator());
    switch (e.dtype()) {
      case DataType::Float32: add_into(sum.data<float>(), e.data<float>(), b.data<float>(), e.numel()); break;
      case DataType::Float64: add_into(sum.data<double>(), e.data<double>(), b.data<double>(), e.numel()); break;
      default:
        throw_error(ErrorKind::Unimplemented, "op '", ctx.op()->name(), "' adds ",
                    to_string(e.dtype()), " elements; it has f32 and f64 kernels");
    }
    e = std::move(sum);
  }
}

void array_erase_kernel(KernelContext& ctx) {
  const std::int64_t k = input_index(ctx, 1);
  TensorArray& a = updated_array(ctx);
  if (static_cast<std::size_t>(k) < a.size()) a[static_cast<std::size_t>(k)] = Tensor();
}

void array_stack_like_kernel(KernelContext& ctx) {
  const TensorArray& a = input_array(ctx, 0);
  const Tensor& like = ctx.input(1);
  const std::int64_t axis = stack_axis(ctx.attrs<ArrayStackLikeOp>().axis, like.rank() - 1);
  const std::int64_t n = like.dim(static_cast<int>(axis));
  if (static_cast<std::int64_t>(a.size()) > n)
    throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' stacks ", a.size(),
                " elements into ", like.type_string(), ", which has room for ", n);
  Tensor& out = ctx.alloc_output(0, like.dims(), like.dtype());
  if (out.bytes()) std::memset(out.raw_data(), 0, out.bytes());
  std::vector<std::int64_t> ed(like.dims().begin(), like.dims().end());
  ed.erase(ed.begin() + axis);
  const Dims edims(ed);
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (!a[k].is_initialized()) continue;
    if (a[k].dims() != edims || a[k].dtype() != like.dtype())
      throw_error(ErrorKind::InvalidArgument, "op '", ctx.op()->name(), "' element ", k, " is ",
                  a[k].type_string(), ", expected [", edims.to_string(), "] ",
                  to_string(like.dtype()));
    copy_into(out, a[k], axis, static_cast<std::int64_t>(k), n);
  }
}

}  // namespace

KILN_REGISTER_KERNEL(ArrayCreateOp, Cpu, Undefined, array_create_kernel);
KILN_REGISTER_KERNEL(ArrayLengthOp, Cpu, Undefined, array_length_kernel);
KILN_REGISTER_KERNEL(ArrayWriteOp, Cpu, Undefined, array_write_kernel);
KILN_REGISTER_KERNEL(ArrayReadOp, Cpu, Undefined, array_read_kernel);
KILN_REGISTER_KERNEL(ArrayReadOrZerosOp, Cpu, Undefined, array_read_or_zeros_kernel);
KILN_REGISTER_KERNEL(ArrayStackOp, Cpu, Undefined, array_stack_kernel);
KILN_REGISTER_KERNEL(ArrayFromTensorOp, Cpu, Undefined, array_from_tensor_kernel);
KILN_REGISTER_KERNEL(ArrayAddOp, Cpu, Undefined, array_add_kernel);
KILN_REGISTER_KERNEL(ArrayEraseOp, Cpu, Undefined, array_erase_kernel);
KILN_REGISTER_KERNEL(ArrayStackLikeOp, Cpu, Undefined, array_stack_like_kernel);

}  // namespace kiln::cpu
