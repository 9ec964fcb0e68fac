#include "random_program.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace kiln::test {

KILN_REGISTER_OP(ScopeOp);

void ScopeOp::build(Builder&, OperationArgument& arg, const std::vector<Value>& operands,
                    const std::vector<Type>& result_types) {
  arg.add_operands(operands);
  arg.result_types = result_types;
}

namespace {

constexpr DataType kAllDtypes[] = {DataType::Float16, DataType::BFloat16, DataType::Float32,
                                   DataType::Float64, DataType::Int8,     DataType::Int32,
                                   DataType::Int64,   DataType::Bool};
constexpr DataType kFloatDtypes[] = {DataType::Float16, DataType::BFloat16, DataType::Float32,
                                     DataType::Float64};

// Pieces of names and strings: quotes, escapes, control characters, unicode.
const char* const kStringPieces[] = {
    "x", "w_0", "linear_0.b_0", "\"quoted\"", "line\nbreak", "tab\there", "back\\slash",
    "ünïcödé", "日本語", "🔥", "\x01\x1f", "", "nan", "inf", "{\"json\": [1]}", "/*", " ",
    "\u2028", "%0", "op #1"};

class Generator {
 public:
  Generator(std::uint64_t seed, const RandomProgramOptions& o) : rng_(seed), opt_(o) {}

  Program run() {
    Program p;
    program_ = &p;
    for (int i = uniform(0, 2); i > 0; --i) new_parameter(random_type(1));
    fill_block(p.block(), 0);
    p.verify();
    return p;
  }

 private:
  // ---- randomness ----
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <typename C> auto pick(const C& c) {
    return c[static_cast<std::size_t>(uniform(0, static_cast<int>(std::size(c)) - 1))];
  }

  std::string random_string() {
    std::string s;
    for (int i = uniform(1, 3); i > 0; --i) s += pick(kStringPieces);
    return s;
  }

  std::int64_t random_dim() {
    int r = uniform(0, 99);
    if (r < 12) return -1;
    if (r < 15) return 0;
    if (r < 17) return std::int64_t(1) << uniform(20, 40);
    return uniform(1, 8);
  }
  std::vector<std::int64_t> random_dims(int min_rank = 0, int max_rank = 3) {
    std::vector<std::int64_t> d(static_cast<std::size_t>(uniform(min_rank, max_rank)));
    for (auto& x : d) x = random_dim();
    return d;
  }
  // Small static dims only: shapes ops compute with.
  std::vector<std::int64_t> small_dims(int min_rank, int max_rank) {
    std::vector<std::int64_t> d(static_cast<std::size_t>(uniform(min_rank, max_rank)));
    for (auto& x : d) x = chance(0.1) ? -1 : uniform(1, 6);
    return d;
  }

  Type random_type(int depth) {
    int r = uniform(0, depth > 0 ? 11 : 9);
    if (r < 4) return scalar_type(pick(kAllDtypes));
    if (r < 8) return TensorType::get(pick(kAllDtypes), random_dims());
    if (r < 10) return VTensorType::get(pick(kAllDtypes), random_dims());
    std::vector<Type> elems;
    for (int i = uniform(0, 3); i > 0; --i) elems.push_back(random_type(depth - 1));
    return VectorType::get(std::move(elems));
  }
  Type random_shaped_type() {
    auto dims = small_dims(0, 3);
    return chance(0.7) ? Type(TensorType::get(pick(kAllDtypes), dims))
                       : Type(VTensorType::get(pick(kAllDtypes), dims));
  }

  template <typename F>
  F random_float() {
    using L = std::numeric_limits<F>;
    switch (uniform(0, 15)) {
      case 0: return L::quiet_NaN();
      case 1: return L::infinity();
      case 2: return -L::infinity();
      case 3: return F(-0.0);
      case 4: return L::denorm_min();
      case 5: return L::max();
      case 6: return L::lowest();
      case 7: return L::min();
      case 8: return F(0.1);
      case 9: return F(1) / F(3);
      case 10: {  // any bit pattern (NaN payloads print and save as "nan")
        if constexpr (sizeof(F) == 4) return std::bit_cast<F>(static_cast<std::uint32_t>(rng_()));
        else return std::bit_cast<F>(static_cast<std::uint64_t>(rng_()));
      }
      case 11: return F(uniform(-1000, 1000));
      default: return std::uniform_real_distribution<F>(F(-1e6), F(1e6))(rng_);
    }
  }

  Attribute random_attribute(int depth) {
    int r = uniform(0, depth > 0 ? 12 : 10);
    switch (r) {
      case 0: return BoolAttribute::get(chance(0.5));
      case 1: {
        static constexpr std::int32_t edge[] = {0, -1, 1, std::numeric_limits<std::int32_t>::min(),
                                                std::numeric_limits<std::int32_t>::max()};
        return Int32Attribute::get(chance(0.3) ? pick(edge) : static_cast<std::int32_t>(rng_()));
      }
      case 2: {
        static constexpr std::int64_t edge[] = {0, -1, 1, std::numeric_limits<std::int64_t>::min(),
                                                std::numeric_limits<std::int64_t>::max()};
        return Int64Attribute::get(chance(0.3) ? pick(edge) : static_cast<std::int64_t>(rng_()));
      }
      case 3: return Float32Attribute::get(random_float<float>());
      case 4: return Float64Attribute::get(random_float<double>());
      case 5:
      case 6: return StrAttribute::get(random_string());
      case 7: return TypeAttribute::get(random_type(2));
      case 8: return DataTypeAttribute::get(pick(kAllDtypes));
      case 9: {
        int kind = uniform(0, 2);
        auto id = static_cast<std::int16_t>(uniform(0, 3) == 0 ? 32767 : uniform(0, 7));
        return PlaceAttribute::get(kind == 0 ? Place::cpu()
                                   : kind == 1 ? Place::host_stream(id)
                                               : Place::cuda(id));
      }
      case 10: return make_i64_array(random_dims());
      case 11: {
        std::vector<Attribute> elems;
        for (int i = uniform(0, 4); i > 0; --i) elems.push_back(random_attribute(depth - 1));
        return ArrayAttribute::get(std::move(elems));
      }
      default: {
        std::vector<NamedAttribute> entries;
        for (int i = uniform(0, 4); i > 0; --i) {
          std::string key = random_string();
          bool dup = false;
          for (const auto& [k, v] : entries) dup |= k == key;
          if (!dup) entries.emplace_back(std::move(key), random_attribute(depth - 1));
        }
        return DictionaryAttribute::get(std::move(entries));
      }
    }
  }

  // ---- values ----
  std::vector<Value> shaped_values(bool tensors_only = false) const {
    std::vector<Value> out;
    for (Value v : visible_)
      if (tensors_only ? v.type().isa<TensorType>() : is_shaped(v.type())) out.push_back(v);
    return out;
  }
  void define(Value v) { visible_.push_back(v); }

  // A tensor of exactly `dims` and `dtype`: a full, data or uniform_random op.
  Value make_tensor(Builder& b, DataType dtype, const std::vector<std::int64_t>& dims) {
    bool known = std::none_of(dims.begin(), dims.end(), [](auto d) { return d < 0; });
    int r = uniform(0, 2);
    Value v;
    if (r == 0 && known) {
      v = b.create<FullOp>(dims, random_float<double>(), dtype, random_place()).result();
    } else if (r == 1 && known && is_floating(dtype)) {
      double lo = uniform(-5, 0), hi = lo + uniform(0, 5);
      v = b.create<UniformRandomOp>(dims, lo, hi, static_cast<std::int64_t>(rng_()), dtype,
                                    random_place())
              .result();
    } else {
      v = b.create<DataOp>(random_string() + std::to_string(counter_++), dims, dtype,
                           random_place())
              .result();
    }
    define(v);
    return v;
  }
  Place random_place() {
    int r = uniform(0, 5);
    if (r < 3) return Place::cpu();
    if (r < 5) return Place::cuda(static_cast<std::int16_t>(uniform(0, 3)));
    return Place::host_stream(static_cast<std::int16_t>(uniform(0, 3)));
  }
  Value any_shaped(Builder& b) {
    auto vs = shaped_values();
    if (vs.empty() || chance(0.15)) return make_tensor(b, pick(kAllDtypes), small_dims(0, 3));
    return pick(vs);
  }

  std::string new_parameter(Type type) {
    std::string name = random_string() + "." + std::to_string(counter_++);
    program_->set_parameter(name, {type, chance(0.7)});
    return name;
  }

  // ---- ops ----
  void fill_block(Block& block, int depth) {
    Builder b(block);
    for (int n = uniform(1, opt_.max_ops); n > 0; --n) {
      int kind = uniform(0, depth < opt_.max_region_depth ? 13 : 12);
      switch (kind) {
        case 0: make_tensor(b, pick(kAllDtypes), random_dims(0, 3)); break;
        case 1: make_tensor(b, pick(kFloatDtypes), small_dims(0, 4)); break;
        case 2: add(b); break;
        case 3: matmul(b); break;
        case 4: define(b.create<ReluOp>(any_shaped(b)).result()); break;
        case 5: {
          auto ts = shaped_values(true);
          if (!ts.empty()) define(b.create<Relu_Op>(pick(ts)).result());
          break;
        }
        case 6: reshape(b); break;
        case 7: {
          Value v = visible_.empty() ? any_shaped(b) : pick(visible_);
          b.create<FetchOp>(v, random_string(), static_cast<std::int32_t>(uniform(-1, 9)));
          break;
        }
        case 8: {
          const auto& params = program_->parameters();
          std::string name;
          if (!params.empty() && chance(0.5)) {
            auto it = params.begin();
            std::advance(it, uniform(0, static_cast<int>(params.size()) - 1));
            name = it->first;
          } else {
            name = new_parameter(chance(0.8) ? random_shaped_type() : random_type(1));
          }
          define(b.create<ParameterOp>(name, program_->parameter(name).type).result());
          break;
        }
        case 9: {
          Value v = visible_.empty() ? any_shaped(b) : pick(visible_);
          std::string name = new_parameter(v.type());
          b.create<SetParameterOp>(v, name);
          break;
        }
        case 10:
        case 11: {
          Type t = chance(0.5) ? random_type(2) : random_shaped_type();
          define(b.create<ConstantOp>(random_attribute(opt_.max_attribute_depth), t).result());
          break;
        }
        case 12: {  // the same constant twice: uniqued attributes, two ops
          Attribute a = random_attribute(1);
          Type t = random_type(1);
          define(b.create<ConstantOp>(a, t).result());
          define(b.create<ConstantOp>(a, t).result());
          break;
        }
        default: scope(b, depth); break;
      }
    }
  }

  void add(Builder& b) {
    Value x = any_shaped(b);
    DataType dt = shaped_data_type(x.type());
    const auto& xs = shaped_dims(x.type());
    if (chance(0.4)) {  // an existing value that happens to broadcast
      for (Value y : shaped_values()) {
        if (shaped_data_type(y.type()) != dt || !chance(0.3)) continue;
        try {
          (void)broadcast_shapes("kiln.add", xs, shaped_dims(y.type()));
        } catch (const Error&) {
          continue;
        }
        define(b.create<AddOp>(x, y).result());
        return;
      }
    }
    // A suffix of x's dims, some set to 1.
    std::vector<std::int64_t> ys(xs.end() - uniform(0, static_cast<int>(xs.size())), xs.end());
    for (auto& d : ys) {
      if (chance(0.3)) d = 1;
      else if (d < 0) d = uniform(1, 4);
      else if (d > 64) d = 1;
    }
    Value y = make_tensor(b, dt, ys);
    define(chance(0.5) ? b.create<AddOp>(x, y).result() : b.create<AddOp>(y, x).result());
  }

  void matmul(Builder& b) {
    std::vector<Value> cands;
    for (Value v : shaped_values())
      if (shaped_dims(v.type()).size() >= 2) cands.push_back(v);
    DataType dt = pick(kAllDtypes);
    Value x = cands.empty() || chance(0.2) ? make_tensor(b, dt, small_dims(2, 4)) : pick(cands);
    dt = shaped_data_type(x.type());
    const auto& xs = shaped_dims(x.type());
    bool tx = chance(0.3), ty = chance(0.3);
    std::int64_t k = tx ? xs[xs.size() - 2] : xs.back();
    if (k < 0) k = chance(0.5) ? -1 : uniform(1, 6);
    if (k > 64) k = -1;
    std::int64_t n = uniform(1, 6);
    std::vector<std::int64_t> ys;
    if (chance(0.3) && xs.size() > 2) ys.push_back(1);  // broadcast batch dim
    ys.push_back(ty ? n : k);
    ys.push_back(ty ? k : n);
    Value y = make_tensor(b, dt, ys);
    define(b.create<MatmulOp>(x, y, tx, ty).result());
  }

  void reshape(Builder& b) {
    Value x = any_shaped(b);
    const auto& xs = shaped_dims(x.type());
    std::int64_t total = 1;
    for (auto d : xs) {
      if (d < 0 || total < 0 || (d > 0 && total > (std::int64_t(1) << 40) / d)) total = -1;
      else total *= d;
    }
    std::vector<std::int64_t> shape;
    if (total < 0) {
      if (chance(0.5)) shape = {-1};
      else shape.assign(xs.size(), 0);  // copy every dim
    } else if (total == 0) {
      shape = {-1};
    } else {
      std::int64_t rest = total;
      while (rest > 1 && shape.size() < 4) {
        std::int64_t f = 1;
        for (std::int64_t c = 2; c <= rest; ++c)
          if (rest % c == 0) {
            f = c;
            if (chance(0.5)) break;
          }
        shape.push_back(f);
        rest /= f;
      }
      if (rest > 1) shape.push_back(rest);
      if (chance(0.3)) shape.insert(shape.begin() + uniform(0, int(shape.size())), 1);
      if (!shape.empty() && chance(0.5)) shape[uniform(0, int(shape.size()) - 1)] = -1;
      for (std::size_t i = 0; i < shape.size() && i < xs.size(); ++i)
        if (shape[i] == xs[i] && chance(0.3)) shape[i] = 0;
    }
    define(b.create<ReshapeOp>(x, shape).result());
  }

  void scope(Builder& b, int depth) {
    std::vector<Value> operands;
    for (int i = uniform(0, 3); i > 0 && !visible_.empty(); --i) operands.push_back(pick(visible_));
    std::vector<Type> results;
    for (int i = chance(0.2) ? uniform(7, 10) : uniform(0, 3); i > 0; --i)
      results.push_back(random_type(1));
    Operation* op = b.create<ScopeOp>(operands, results).operation();
    for (int nb = uniform(0, 2); nb > 0; --nb) {
      Block& block = op->region(0).emplace_block();
      std::size_t mark = visible_.size();
      for (int a = uniform(0, 3); a > 0; --a) define(block.add_argument(random_type(1)));
      fill_block(block, depth + 1);
      visible_.resize(mark);
    }
    for (std::uint32_t i = 0; i < op->num_results(); ++i) define(op->result(i));
  }

  std::mt19937_64 rng_;
  RandomProgramOptions opt_;
  Program* program_ = nullptr;
  std::vector<Value> visible_;
  int counter_ = 0;
};

}  // namespace

Program random_program(std::uint64_t seed, const RandomProgramOptions& options) {
  return Generator(seed, options).run();
}

}  // namespace kiln::test
