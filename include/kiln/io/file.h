// Whole-file I/O shared by kiln's on-disk formats (program JSON, weights):
// an atomic write (temporary file in the same directory, fsync, rename — a
// crash or a failed save leaves the old file or the new one, never a mix) and
// a whole-file read. Errors are kiln::Error naming the file.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// Writes `bytes` to `path` atomically. `what` names the kind of file in
// errors ("cannot save <what> '<path>': …"); kiln::Error (Unavailable) when
// the temporary cannot be created, written, synced or renamed — `path` is
// then untouched and no temporary is left behind.
void write_file_atomic(const std::string& path, std::string_view bytes, std::string_view what);

// The whole content of `path`; kiln::Error (NotFound) naming `what` and the
// path when it cannot be opened, (Unavailable) when reading fails.
std::string read_whole_file(const std::string& path, std::string_view what);

}  // namespace kiln
