// The weights file (seed 001 §3.1: parameters live in the root
// Scope, persistable): a binary file of a program's parameter tensors, each
// with its name, dtype, shape and an xxh64 checksum. Saving is atomic; loading
// validates the whole file against the program before it writes anything.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/ir/program.h"
#include "kiln/runtime/scope.h"

namespace kiln {

// Format (all integers little-endian):
//   magic "KILNWTS\0" (8 bytes), version u32, tensor count u64, then per
//   tensor, sorted by name: name length u32, name bytes, dtype u8 (DataType),
//   rank u8, dims i64 × rank, data size u64 (= numel × dtype size), data,
//   checksum u64 = xxh64 of the tensor's record from its name length through
//   its data. Nothing may follow the last tensor.
inline constexpr std::string_view kWeightsMagic{"KILNWTS\0", 8};
inline constexpr std::uint32_t kWeightsFormatVersion = 1;

// Writes every parameter of `program` (Program::parameters()), its tensor
// taken by name from `scope` (find_var: the scope or its ancestors — the
// executor keeps parameters in its root scope, Executor::scope()), to `path`
// atomically (temporary + rename: a failed save leaves an existing file
// untouched). kiln::Error naming the parameter when the scope lacks it, holds
// no initialized tensor under its name, or holds one whose dtype or shape
// differs from the program's; naming the file when it cannot be written. A
// tensor on a CUDA device is saved from a copy on the host.
void save_weights(const std::string& path, const Scope& scope, const Program& program);

// Reads `path` and sets each parameter of `program` in `scope` (its variable
// created in `scope` when absent) to a new tensor with the file's data. The
// whole file is checked first — magic, version, truncation, checksums, every
// program parameter present in the file, dtypes and shapes equal to the
// program's — so on any kiln::Error the scope is unchanged. A tensor is
// loaded on the CPU, or on the CUDA device of the tensor it replaces (as
// PyTorch's load_state_dict keeps each parameter's device). Tensors of the
// file that are not parameters of the program (e.g. optimizer state in a
// file saved from the training program) are not loaded: one warning
// (kiln/support/warning.h) names them after the load. Errors name the file
// and, where one is involved, the tensor: NotFound (missing file, parameter
// missing from the file), InvalidArgument (not a weights file, dtype or
// shape mismatch), Unimplemented (another version), DataLoss (truncated or
// corrupt).
void load_weights(const std::string& path, Scope& scope, const Program& program);

// The same as bytes in memory (what the file functions write and read).
std::string save_weights_bytes(const Scope& scope, const Program& program);
// `source` names the bytes in error messages (the file's path).
void load_weights_bytes(std::string_view bytes, Scope& scope, const Program& program,
                        std::string_view source = "<memory>");

}  // namespace kiln
