// Place: cpu, host_stream:N or cuda:N; printed and parsed as text.
#include "kiln/support/place.h"

#include <set>

#include "catch.hpp"

using kiln::Place;
using kiln::PlaceKind;

TEST_CASE("a default place is the cpu", "[support][place]") {
  Place p;
  CHECK(p.is_cpu());
  CHECK(p == Place::cpu());
  CHECK(p.to_string() == "cpu");
}

TEST_CASE("places print as cpu, host_stream:N and cuda:N", "[support][place]") {
  CHECK(Place::cpu().to_string() == "cpu");
  CHECK(Place::host_stream().to_string() == "host_stream:0");
  CHECK(Place::host_stream(3).to_string() == "host_stream:3");
  CHECK(Place::cuda(1).to_string() == "cuda:1");
  CHECK(Place{PlaceKind::Undefined, 0}.to_string() == "undefined");
  CHECK_FALSE(Place::cuda(0).is_cpu());
}

TEST_CASE("a printed place parses back to the same place", "[support][place]") {
  for (Place p : {Place::cpu(), Place::host_stream(0), Place::host_stream(12), Place::cuda(0),
                  Place::cuda(7), Place::cuda(32767)}) {
    INFO(p.to_string());
    auto parsed = Place::parse(p.to_string());
    REQUIRE(parsed.has_value());
    CHECK(*parsed == p);
  }
}

TEST_CASE("malformed place strings do not parse", "[support][place]") {
  for (const char* s : {"", "gpu", "gpu:0", "cpu:0", "cuda", "cuda:", "cuda:-1", "cuda:x",
                        "cuda:1a", "cuda:32768", "cuda:1234567", ":0", "CUDA:0", "cuda:0 ",
                        "host_stream", "undefined"}) {
    INFO("'" << s << "'");
    CHECK_FALSE(Place::parse(s).has_value());
  }
}

TEST_CASE("places are ordered and distinct by kind and device", "[support][place]") {
  std::set<Place> places{Place::cpu(), Place::cuda(0), Place::cuda(1), Place::host_stream(0),
                         Place::cuda(0)};
  CHECK(places.size() == 4);
  CHECK(Place::cuda(0) < Place::cuda(1));
  CHECK(Place::cuda(0) != Place::host_stream(0));
}
