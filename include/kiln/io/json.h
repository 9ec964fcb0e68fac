// The JSON form of programs (nlohmann_json; types and attributes:
// kiln/ir/ir_json.h), and the
// content hash: xxh64 of the canonical (sorted-key, compact) JSON, stable
// across runs and processes. Loading validates everything and reports bad
// input as kiln::Error naming what was wrong and where.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "kiln/ir/ir_json.h"  // types and attributes
#include "kiln/ir/program.h"

namespace kiln {

// Version of the program format; loading another version is an error.
inline constexpr int kProgramFormatVersion = 1;

nlohmann::json program_to_json(const Program& p);
Program program_from_json(const nlohmann::json& j);

// Compact canonical text (indent < 0) or pretty-printed.
std::string save_program_json(const Program& p, int indent = -1);
// Throws kiln::Error(InvalidArgument / NotFound / …) for malformed or
// truncated text, unknown ops or types, bad attributes, wrong operand
// counts, dangling value references, a version mismatch.
Program load_program_json(std::string_view text);

// Files: written atomically (temporary file + rename). Errors name the file.
void save_program_file(const Program& p, const std::string& path);
Program load_program_file(const std::string& path);

// xxh64 of the canonical JSON.
std::uint64_t content_hash(const Program& p);

}  // namespace kiln
