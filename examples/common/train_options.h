// Where an example trains and in what precision, from its command line:
//   --device cpu|cuda|cuda:N   the Executor's place (default cpu)
//   --amp off|o1|o2            mixed precision in bf16 (kiln/frontend/amp.h),
//                              its kernels looked up at the device (default off)
// The other arguments stay positional, in their order. A flag without a
// value, a value not listed, or another argument starting with "--" (as
// --amp=o2) is a kiln::Error naming the flag and what it takes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/frontend/amp.h"
#include "kiln/kiln.h"
#include "kiln/runtime/cuda_context.h"
#include "kiln/support/half.h"

namespace kiln_examples {

struct TrainOptions {
  kiln::Place place = kiln::Place::cpu();
  std::optional<kiln::amp::Options> amp;  // empty: f32
  std::vector<std::string> positional;

  // "cpu, f32" / "cuda:0, amp O2 bf16".
  std::string describe() const {
    std::string s = place.to_string() + ", ";
    if (!amp) return s + "f32";
    return s + (amp->level == kiln::amp::Level::O2 ? "amp O2 bf16" : "amp O1 bf16");
  }

  // The optimizer minimizes `loss`, through amp when it is on.
  void minimize(kiln::optim::Optimizer& opt, kiln::Value loss) const {
    if (amp) kiln::amp::decorate(opt, *amp).minimize(loss);
    else opt.minimize(loss);
  }
};

// A fetched floating tensor's values as floats, wherever it lives: under
// amp a model's output (logits) may be bf16 or f16.
inline std::vector<float> to_floats(const kiln::Tensor& fetched) {
  if (fetched.dtype() != kiln::DataType::BFloat16 && fetched.dtype() != kiln::DataType::Float16)
    return fetched.to_vector<float>();
  const kiln::Tensor t = fetched.place().kind == kiln::PlaceKind::Cpu
                             ? fetched
                             : kiln::copy_to_place(fetched, kiln::Place::cpu());
  const auto* bits = static_cast<const std::uint16_t*>(t.raw_data());
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = t.dtype() == kiln::DataType::BFloat16 ? kiln::bfloat16_to_float(bits[i]) : kiln::half_to_float(bits[i]);
  return out;
}

inline TrainOptions parse_train_options(int argc, char** argv) {
  TrainOptions o;
  auto value_of = [&](int& i, std::string_view flag, std::string_view takes) {
    if (i + 1 >= argc)
      throw kiln::Error(kiln::ErrorKind::InvalidArgument,
                        std::string(flag) + " needs a value: " + std::string(takes));
    return std::string(argv[++i]);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--device") {
      constexpr std::string_view takes = "cpu, cuda or cuda:N";
      const std::string v = value_of(i, a, takes);
      const auto place = v == "cuda" ? kiln::Place::cuda(0) : kiln::Place::parse(v);
      if (!place || place->kind == kiln::PlaceKind::HostStream)
        throw kiln::Error(kiln::ErrorKind::InvalidArgument,
                          "--device '" + v + "': expected " + std::string(takes));
      o.place = *place;
    } else if (a == "--amp") {
      constexpr std::string_view takes = "off, o1 or o2";
      const std::string v = value_of(i, a, takes);
      if (v == "off") {
        o.amp.reset();
      } else if (v == "o1" || v == "o2") {
        o.amp = kiln::amp::Options{};
        o.amp->level = v == "o1" ? kiln::amp::Level::O1 : kiln::amp::Level::O2;
      } else {
        throw kiln::Error(kiln::ErrorKind::InvalidArgument,
                          "--amp '" + v + "': expected " + std::string(takes));
      }
    } else if (a.rfind("--", 0) == 0) {
      throw kiln::Error(kiln::ErrorKind::InvalidArgument,
                        "unknown flag '" + std::string(a) + "': expected --device or --amp, each then its value");
    } else {
      o.positional.emplace_back(a);
    }
  }
  if (o.amp) o.amp->place = o.place;
  return o;
}

}  // namespace kiln_examples
