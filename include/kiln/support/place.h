// Place: where a tensor lives or a kernel runs — the CPU, a host stream (the
// CPU implementation of an in-order stream, seed 001 §3.3.1.2), or a CUDA
// device (reserved). Shared by the IR (PlaceAttribute) and the runtime.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

enum class PlaceKind : std::uint8_t { Undefined = 0, Cpu, HostStream, Cuda };

struct Place {
  PlaceKind kind = PlaceKind::Cpu;
  std::int16_t device = 0;

  static constexpr Place cpu() { return {PlaceKind::Cpu, 0}; }
  static constexpr Place host_stream(std::int16_t id = 0) { return {PlaceKind::HostStream, id}; }
  static constexpr Place cuda(std::int16_t id = 0) { return {PlaceKind::Cuda, id}; }

  bool is_cpu() const { return kind == PlaceKind::Cpu; }
  auto operator<=>(const Place&) const = default;

  // "cpu", "host_stream:1", "cuda:0"
  std::string to_string() const;
  static std::optional<Place> parse(std::string_view s);
};

inline std::string Place::to_string() const {
  switch (kind) {
    case PlaceKind::Cpu: return "cpu";
    case PlaceKind::HostStream: return "host_stream:" + std::to_string(device);
    case PlaceKind::Cuda: return "cuda:" + std::to_string(device);
    case PlaceKind::Undefined: break;
  }
  return "undefined";
}

inline std::optional<Place> Place::parse(std::string_view s) {
  if (s == "cpu") return cpu();
  auto colon = s.find(':');
  if (colon == std::string_view::npos || colon + 1 >= s.size() || s.size() - colon > 6)
    return std::nullopt;
  int id = 0;
  for (char c : s.substr(colon + 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + (c - '0');
  }
  if (id > 32767) return std::nullopt;
  auto head = s.substr(0, colon);
  if (head == "host_stream") return host_stream(static_cast<std::int16_t>(id));
  if (head == "cuda") return cuda(static_cast<std::int16_t>(id));
  return std::nullopt;
}

}  // namespace kiln
