// The headers nearly every test file reads, parsed once per test binary
// (meson's cpp_pch): the standard library's common parts, Catch2 and kiln's
// public API. Each test file still includes what it uses, so it builds
// without this header too (-Db_pch=false).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "kiln/exec/interpreter_core.h"
#include "kiln/extension.h"
