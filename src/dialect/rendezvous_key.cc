#include "kiln/dialect/rendezvous_key.h"

#include <charconv>
#include <optional>

#include "kiln/support/error.h"
#include "kiln/support/hash.h"

namespace kiln {

namespace {

constexpr std::string_view kKeyForm = "'src;dst;name;frame:iter'";

template <typename Int>
std::optional<Int> parse_decimal(std::string_view s) {
  Int v{};
  if (s.empty() || s.front() == '+' || s.front() == '-') return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

[[noreturn]] void malformed(std::string_view text, std::string_view why) {
  throw_error(ErrorKind::InvalidArgument, "malformed rendezvous key '", text, "': ", why,
              " (expected ", kKeyForm, ")");
}

}  // namespace

RendezvousKey::RendezvousKey(Place src, Place dst, std::string_view name, std::uint64_t frame_id,
                             std::int64_t iteration)
    : src_(src), dst_(dst), frame_id_(frame_id), iteration_(iteration) {
  text_ = src.to_string();
  text_ += ';';
  text_ += dst.to_string();
  text_ += ';';
  name_begin_ = static_cast<std::uint32_t>(text_.size());
  name_size_ = static_cast<std::uint32_t>(name.size());
  text_ += name;
  text_ += ';';
  text_ += std::to_string(frame_id);
  text_ += ':';
  text_ += std::to_string(iteration);
  if (name.empty() || name.find(';') != std::string_view::npos)
    throw_error(ErrorKind::InvalidArgument, "rendezvous key '", text_, "': the name '", name,
                "' must be non-empty and hold no ';'");
  if (src.kind == PlaceKind::Undefined || dst.kind == PlaceKind::Undefined)
    throw_error(ErrorKind::InvalidArgument, "rendezvous key '", text_, "': undefined place");
  if (iteration < 0)
    throw_error(ErrorKind::InvalidArgument, "rendezvous key '", text_,
                "': negative iteration ", iteration);
  hash_ = xxh64(text_);
}

RendezvousKey RendezvousKey::parse(std::string_view text) {
  std::string_view part[4];
  std::size_t begin = 0;
  for (int i = 0; i < 4; ++i) {
    const std::size_t end = i < 3 ? text.find(';', begin) : text.size();
    if (end == std::string_view::npos) malformed(text, "fewer than 4 ';'-separated parts");
    part[i] = text.substr(begin, end - begin);
    begin = end + 1;
  }
  if (part[3].find(';') != std::string_view::npos) malformed(text, "more than 4 parts");
  const auto src = Place::parse(part[0]);
  if (!src) malformed(text, "bad source place '" + std::string(part[0]) + "'");
  const auto dst = Place::parse(part[1]);
  if (!dst) malformed(text, "bad destination place '" + std::string(part[1]) + "'");
  if (part[2].empty()) malformed(text, "empty name");
  const std::size_t colon = part[3].find(':');
  if (colon == std::string_view::npos)
    malformed(text, "no ':' between frame and iteration in '" + std::string(part[3]) + "'");
  const auto frame = parse_decimal<std::uint64_t>(part[3].substr(0, colon));
  const auto iter = parse_decimal<std::int64_t>(part[3].substr(colon + 1));
  if (!frame || !iter)
    malformed(text, "frame and iteration must be decimal numbers, got '" +
                        std::string(part[3]) + "'");
  return RendezvousKey(*src, *dst, part[2], *frame, *iter);
}

}  // namespace kiln
