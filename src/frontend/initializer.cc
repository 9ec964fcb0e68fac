// Parameter initializers (include/kiln/frontend/initializer.h).
#include <cmath>
#include <sstream>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/initializer.h"

namespace kiln::init {

std::pair<double, double> compute_fans(const std::vector<std::int64_t>& shape) {
  if (shape.empty()) return {1.0, 1.0};
  if (shape.size() == 1) return {double(shape[0]), double(shape[0])};
  if (shape.size() == 2) return {double(shape[0]), double(shape[1])};
  double receptive = 1.0;
  for (std::size_t i = 2; i < shape.size(); ++i) receptive *= double(shape[i]);
  return {double(shape[1]) * receptive, double(shape[0]) * receptive};
}

namespace {

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A fan of 0 (an empty dim) would divide by zero: kiln::Error naming the init.
double checked_fan(std::string_view init, double fan, const std::vector<std::int64_t>& shape) {
  if (!(fan > 0))
    throw_error(ErrorKind::InvalidArgument, init, ": cannot compute fans of shape ",
                meta::dims_string(shape), " (a fan is 0)");
  return fan;
}

Value uniform(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype, double low,
              double high, std::int64_t seed) {
  return b.create<UniformRandomOp>(shape, low, high, seed, dtype).result();
}

Value normal(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype, double mean,
             double std, std::int64_t seed) {
  return b.create<GaussianRandomOp>(shape, mean, std, seed, dtype).result();
}

double leaky_relu_gain(double a) { return std::sqrt(2.0 / (1.0 + a * a)); }

}  // namespace

Value Constant::emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const {
  return b.create<FullOp>(shape, value_, dtype).result();
}
std::string Constant::describe() const { return "Constant(" + fmt(value_) + ")"; }

Uniform::Uniform(double low, double high, std::int64_t seed) : low_(low), high_(high), seed_(seed) {
  if (!(low <= high))
    throw_error(ErrorKind::InvalidArgument, "Uniform initializer: low ", low,
                " must be <= high ", high);
}
Value Uniform::emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const {
  return uniform(b, shape, dtype, low_, high_, seed_);
}
std::string Uniform::describe() const {
  return "Uniform(" + fmt(low_) + ", " + fmt(high_) + ")";
}

Normal::Normal(double mean, double std, std::int64_t seed) : mean_(mean), std_(std), seed_(seed) {
  if (!(std >= 0))
    throw_error(ErrorKind::InvalidArgument, "Normal initializer: std ", std, " must be >= 0");
}
Value Normal::emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const {
  return normal(b, shape, dtype, mean_, std_, seed_);
}
std::string Normal::describe() const { return "Normal(" + fmt(mean_) + ", " + fmt(std_) + ")"; }

Value XavierUniform::emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const {
  auto [fi, fo] = compute_fans(shape);
  const double limit = gain_ * std::sqrt(6.0 / checked_fan("XavierUniform", fi + fo, shape));
  return uniform(b, shape, dtype, -limit, limit, seed_);
}
std::string XavierUniform::describe() const { return "XavierUniform(gain=" + fmt(gain_) + ")"; }

Value XavierNormal::emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const {
  auto [fi, fo] = compute_fans(shape);
  const double std = gain_ * std::sqrt(2.0 / checked_fan("XavierNormal", fi + fo, shape));
  return normal(b, shape, dtype, 0.0, std, seed_);
}
std::string XavierNormal::describe() const { return "XavierNormal(gain=" + fmt(gain_) + ")"; }

Value KaimingUniform::emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const {
  auto [fi, fo] = compute_fans(shape);
  const double fan = checked_fan("KaimingUniform", mode_ == FanMode::FanIn ? fi : fo, shape);
  const double bound = leaky_relu_gain(a_) * std::sqrt(3.0 / fan);
  return uniform(b, shape, dtype, -bound, bound, seed_);
}
std::string KaimingUniform::describe() const {
  return "KaimingUniform(a=" + fmt(a_) + (mode_ == FanMode::FanIn ? ", fan_in)" : ", fan_out)");
}

Value KaimingNormal::emit(Builder& b, const std::vector<std::int64_t>& shape, DataType dtype) const {
  auto [fi, fo] = compute_fans(shape);
  const double fan = checked_fan("KaimingNormal", mode_ == FanMode::FanIn ? fi : fo, shape);
  const double std = leaky_relu_gain(a_) / std::sqrt(fan);
  return normal(b, shape, dtype, 0.0, std, seed_);
}
std::string KaimingNormal::describe() const {
  return "KaimingNormal(a=" + fmt(a_) + (mode_ == FanMode::FanIn ? ", fan_in)" : ", fan_out)");
}

}  // namespace kiln::init
