// Random ops: uniform_random, gaussian_random, random_key and dropout. All carry the
// Random trait, so the executor keeps them in program order among themselves
// (seed 001 §3.3.1: a random op missing from that order broke convergence).
// Numbers are deterministic: see kiln/kernel/random.h for how `seed` is used
// (seed != 0: that seed, the same numbers every run; seed == 0: the next key
// of the process-wide generator, reset by kiln::set_random_seed).
#pragma once

#include "kiln/dialect/grad_op.h"

namespace kiln {

// Uniform in [min, max) (up to rounding of the dtype).
struct UniformRandomOp : Op<UniformRandomOp, Random, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.uniform_random";
  static constexpr int num_operands = 0, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, shape), (double, min), (double, max), (std::int64_t, seed), (DataType, dtype), (Place, place));
  static void build(Builder& b, OperationArgument& arg, const std::vector<std::int64_t>& shape,
                    double min = -1.0, double max = 1.0, std::int64_t seed = 0,
                    DataType dtype = DataType::Float32, Place place = Place::cpu());
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  void verify() const;
};

// Normal(mean, std^2); std >= 0.
struct GaussianRandomOp : Op<GaussianRandomOp, Random, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.gaussian_random";
  static constexpr int num_operands = 0, num_results = 1;
  KILN_ATTRIBUTES((std::vector<std::int64_t>, shape), (double, mean), (double, std), (std::int64_t, seed), (DataType, dtype), (Place, place));
  static void build(Builder& b, OperationArgument& arg, const std::vector<std::int64_t>& shape,
                    double mean = 0.0, double std = 1.0, std::int64_t seed = 0,
                    DataType dtype = DataType::Float32, Place place = Place::cpu());
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  void verify() const;
};

// key = kiln.random_key() {seed, place}: the u64 [1] key one run of a
// random kernel would draw (random_key(seed) of kiln/kernel/random.h: seed
// != 0 the same key every run, 0 the process-wide generator's next), as a
// value, for draws that more than one op must repeat: attention dropout's
// forward and gradient ops read it as their dropout_key, and a recomputed
// forward reads the same one. is_test (the for-test clone sets it): no key
// is drawn (the process-wide generator does not move) and the result is 0.
struct RandomKeyOp : Op<RandomKeyOp, Random, InferMetaInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.random_key";
  static constexpr int num_operands = 0, num_results = 1;
  KILN_ATTRIBUTES((std::int64_t, seed), (bool, is_test), (Place, place));
  static void build(Builder& b, OperationArgument& arg, std::int64_t seed = 0, Place place = Place::cpu());
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
};

// dropout(x) -> (out, mask), "upscale_in_train" as PyTorch: in training each
// element is kept with probability 1 - p and scaled by 1 / (1 - p), else 0;
// mask (bool, x's dims) is true where kept. p == 0 or is_test: out = x and
// mask is all true. p must lie in [0, 1) (kiln::Error otherwise).
struct DropoutOp : Op<DropoutOp, ReadOnly, Random, InferMetaInterface, VjpInterface> {
  using Op::Op;
  static constexpr std::string_view name = "kiln.dropout";
  static std::vector<Value> vjp(Builder& b, Operation* op, const std::vector<Value>& out_grads);
  static constexpr int num_operands = 1, num_results = 2;
  KILN_ATTRIBUTES((double, p), (bool, is_test), (std::int64_t, seed));
  static void build(Builder& b, OperationArgument& arg, Value x, double p = 0.5,
                    bool is_test = false, std::int64_t seed = 0);
  static std::vector<Type> infer_meta(const std::vector<Type>& in, DictionaryAttribute attrs);
  // dropout_grad(dout, mask) {p, is_test}: dout · mask / (1 - p) in
  // training, dout when is_test or p == 0.
  struct Grad : GradSpec<2, 0> {
    static void check(std::string_view op, const std::vector<Type>& in, DictionaryAttribute attrs);
  };
  void verify() const;
};

}  // namespace kiln
