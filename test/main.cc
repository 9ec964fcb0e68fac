// Catch2's main(), compiled once: the Catch2 v2 single header is slow to
// compile with CATCH_CONFIG_MAIN, so no other test file defines it.
#define CATCH_CONFIG_MAIN
#include "catch.hpp"
