// The one place kiln's tests include Catch2 from. Debian 12 ships Catch2 2.13
// (single header); a move to Catch2 v3 changes only this file (and main.cc).
#pragma once

#include <catch2/catch.hpp>
