// Constant folding ("fold"): an op whose operands are all constants —
// builtin.constant holding a tensor, or kiln.full (on the CPU) — is run
// once, at compile time, with its own CPU kernel (the kernel registry: no
// second implementation of any op's math), and replaced by a
// builtin.constant holding the result tensor (whose kernel copies it out
// each run); the constants it read go too when nothing else reads them
// (else they would still run each step). Never folded: Random, SideEffect, Communication and Inplace
// ops, ops with regions, ops without a synchronous CPU kernel, results of
// unknown (-1) dims, and tensors above the size cap. It folds nothing when
// the PassContext's target place is a device (builtin.constant has no
// device kernel yet).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include "kiln/ir/tensor_attribute.h"
#include "kiln/passes/pass.h"
#include "kiln/runtime/tensor.h"

namespace kiln {

struct ConstantFoldOptions {
  // Largest tensor (operand or result) folding materialises, in bytes.
  std::size_t max_bytes = 64 * 1024;
};

std::unique_ptr<Pass> create_constant_fold_pass(ConstantFoldOptions options = {});

// Runs `op` once with its synchronous CPU kernel on `operands` (a tensor
// for each) and returns its results: what the pass computes for an op it
// folds, for a caller that knows the operands' values itself (the ONNX
// importer folds exporters' shape arithmetic with it). Empty when `op` is
// not an op folding may run (regions; neither ReadOnly nor ViewLike;
// Random, SideEffect, Communication, Inplace, a terminator), has no such
// kernel, throws kiln::Error, or gives a result whose dtype or rank differs
// from its result type, or a dim the type knows (a -1 dim matches any).
std::vector<Tensor> evaluate_on_cpu(Operation* op, const std::vector<Tensor>& operands);

// A tensor attribute's values as a new CPU tensor, and a CPU tensor's values
// as a tensor attribute (builtin.constant's value): the bytes copied; a
// large one is held (TensorAttribute::get_or_hold).
Tensor tensor_from_attribute(TensorAttribute a);
TensorAttribute attribute_from_tensor(const Tensor& t);

// Whether `v` is a compile-time constant folding can read: a result of
// builtin.constant holding a tensor, or of kiln.full on the CPU, that no op
// updates in place.
bool is_constant_value(Value v, const PassContext* ctx = nullptr);
// When every element of constant `v` is one number: that number (read as
// double). Empty for non-constants and for constants of mixed elements.
std::optional<double> constant_splat_value(Value v, const PassContext* ctx = nullptr);

}  // namespace kiln
