// Successor kinds (seed 001 §3.3.1.2): where an instruction runs (its lane:
// the host, or an in-order stream) decides how each successor may follow it —
// direct (same thread or same stream, no synchronisation), event (the next
// instruction's stream waits on an event recorded after this one) or sync
// (the host blocks on the stream before running the next instruction).
#pragma once

#include <cstdint>
#include <string_view>

#include "kiln/support/place.h"

namespace kiln {

struct Lane {
  bool is_stream = false;
  std::int16_t stream = 0;

  static constexpr Lane host() { return {false, 0}; }
  static constexpr Lane on_stream(std::int16_t s) { return {true, s}; }
  // CPU kernels run on the host; host-stream and CUDA kernels are launched
  // onto the place's stream.
  static constexpr Lane of(Place p) {
    return p.kind == PlaceKind::Cpu ? host() : on_stream(p.device);
  }
  bool operator==(const Lane&) const = default;
};

enum class SuccessorKind : std::uint8_t { Direct, Event, Sync };

constexpr std::string_view to_string(SuccessorKind k) {
  switch (k) {
    case SuccessorKind::Direct: return "direct";
    case SuccessorKind::Event: return "event";
    case SuccessorKind::Sync: return "sync";
  }
  return "?";
}

// host → host / host → stream / same stream: direct; stream s → stream t:
// event; stream → host: sync.
constexpr SuccessorKind successor_kind(Lane from, Lane to) {
  if (!from.is_stream) return SuccessorKind::Direct;
  if (!to.is_stream) return SuccessorKind::Sync;
  return from.stream == to.stream ? SuccessorKind::Direct : SuccessorKind::Event;
}

}  // namespace kiln
