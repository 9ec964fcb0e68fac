// RendezvousKey: what a rendezvous send and its recv agree on (seed 003:
// Rendezvous::ParsedKey) — source place, destination place, a name, and the
// loop frame and iteration the value belongs to. Its text form is TensorFlow's
// "src;dst;name;frame:iter" (e.g. "cpu;cuda:0;grad/w;0:3"); the text and its
// xxHash are computed once, when the key is built, so the rendezvous never
// touches strings on its hot path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/support/place.h"

namespace kiln {

class RendezvousKey {
 public:
  // kiln::Error (InvalidArgument) when `name` is empty or holds ';', or a
  // place is undefined, naming the key.
  RendezvousKey(Place src, Place dst, std::string_view name, std::uint64_t frame_id = 0,
                std::int64_t iteration = 0);

  // The inverse of to_string(). kiln::Error (InvalidArgument) naming `text`
  // and what is wrong with it when it is not "src;dst;name;frame:iter" with
  // places as Place::parse reads them, a non-empty name and decimal numbers
  // (the iteration non-negative).
  static RendezvousKey parse(std::string_view text);

  Place src() const noexcept { return src_; }
  Place dst() const noexcept { return dst_; }
  std::string_view name() const noexcept;
  std::uint64_t frame_id() const noexcept { return frame_id_; }
  std::int64_t iteration() const noexcept { return iteration_; }
  // "src;dst;name;frame:iter", built once.
  const std::string& to_string() const noexcept { return text_; }
  // XXH64 of to_string(), computed once.
  std::uint64_t hash() const noexcept { return hash_; }

  friend bool operator==(const RendezvousKey& a, const RendezvousKey& b) noexcept;

 private:
  Place src_;
  Place dst_;
  std::uint64_t frame_id_;
  std::int64_t iteration_;
  std::string text_;
  std::uint64_t hash_ = 0;
  std::uint32_t name_begin_ = 0;
  std::uint32_t name_size_ = 0;
};

// For unordered containers: the precomputed hash.
struct RendezvousKeyHash {
  std::size_t operator()(const RendezvousKey& key) const noexcept { return key.hash(); }
};

// ---------------------------------------------------------------------------

inline std::string_view RendezvousKey::name() const noexcept {
  return std::string_view(text_).substr(name_begin_, name_size_);
}

inline bool operator==(const RendezvousKey& a, const RendezvousKey& b) noexcept {
  // The text holds every field; the hash rejects nearly every mismatch first.
  return a.hash_ == b.hash_ && a.text_ == b.text_;
}

}  // namespace kiln
