// Parameter initializers (seed 001 §1.1: the startup program holds "the
// trainable parameters and how they are initialized"). Each emits, into a
// builder (the startup program), the op making a tensor of the given shape:
// `kiln.full` for Constant, `kiln.uniform_random` / `kiln.gaussian_random`
// (seeded, see kiln/kernel/random.h) for the rest. Fans follow Paddle.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ir/value.h"
#include "kiln/support/data_type.h"

namespace kiln {
class Builder;  // kiln/ir/builder.h: an initializer's own emit() builds through it
}  // namespace kiln

namespace kiln::init {

// (fan_in, fan_out) of a parameter shape, Paddle's rule (weights are
// [in, out] for Linear, [out_c, in_c, k…] for convolutions):
//   rank 0: (1, 1); rank 1: (d0, d0); rank 2: (d0, d1);
//   rank > 2: (d1 · r, d0 · r) with r = Π d2…
std::pair<double, double> compute_fans(const std::vector<std::int64_t>& shape);

class Initializer {
 public:
  virtual ~Initializer() = default;
  // Builds the op making the initial value; returns its result.
  virtual Value emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const = 0;
  // E.g. "XavierUniform(gain=1)", for messages.
  virtual std::string describe() const = 0;
};

using InitializerPtr = std::shared_ptr<const Initializer>;

// Every element = value.
class Constant : public Initializer {
 public:
  explicit Constant(double value = 0.0) : value_(value) {}
  Value emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const override;
  std::string describe() const override;

 private:
  double value_;
};

// U[low, high); low <= high (kiln::Error otherwise). seed 0: the process
// generator (kiln::set_random_seed); else that fixed seed.
class Uniform : public Initializer {
 public:
  Uniform(double low = -1.0, double high = 1.0, std::int64_t seed = 0);
  Value emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const override;
  std::string describe() const override;

 private:
  double low_, high_;
  std::int64_t seed_;
};

// N(mean, std²); std >= 0 (kiln::Error otherwise).
class Normal : public Initializer {
 public:
  Normal(double mean = 0.0, double std = 1.0, std::int64_t seed = 0);
  Value emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const override;
  std::string describe() const override;

 private:
  double mean_, std_;
  std::int64_t seed_;
};

// Glorot: U(±gain·√(6 / (fan_in + fan_out))).
class XavierUniform : public Initializer {
 public:
  explicit XavierUniform(double gain = 1.0, std::int64_t seed = 0) : gain_(gain), seed_(seed) {}
  Value emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const override;
  std::string describe() const override;

 private:
  double gain_;
  std::int64_t seed_;
};

// Glorot: N(0, (gain·√(2 / (fan_in + fan_out)))²).
class XavierNormal : public Initializer {
 public:
  explicit XavierNormal(double gain = 1.0, std::int64_t seed = 0) : gain_(gain), seed_(seed) {}
  Value emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const override;
  std::string describe() const override;

 private:
  double gain_;
  std::int64_t seed_;
};

enum class FanMode { FanIn, FanOut };

// He, PyTorch's kaiming_*_(a, mode, nonlinearity='leaky_relu'):
// gain = √(2 / (1 + a²)) (a = 0: ReLU's √2), fan = fan_in or fan_out.
// KaimingUniform: U(±gain·√(3 / fan)); KaimingNormal: N(0, (gain / √fan)²).
// KaimingUniform(√5) is PyTorch's Linear weight init: U(±1/√fan_in).
class KaimingUniform : public Initializer {
 public:
  explicit KaimingUniform(double a = 0.0, FanMode mode = FanMode::FanIn, std::int64_t seed = 0)
      : a_(a), mode_(mode), seed_(seed) {}
  Value emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const override;
  std::string describe() const override;

 private:
  double a_;
  FanMode mode_;
  std::int64_t seed_;
};

class KaimingNormal : public Initializer {
 public:
  explicit KaimingNormal(double a = 0.0, FanMode mode = FanMode::FanIn, std::int64_t seed = 0)
      : a_(a), mode_(mode), seed_(seed) {}
  Value emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const override;
  std::string describe() const override;

 private:
  double a_;
  FanMode mode_;
  std::int64_t seed_;
};

}  // namespace kiln::init
