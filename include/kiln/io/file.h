// Whole-file I/O shared by kiln's on-disk formats (program JSON, weights):
// an atomic write (temporary file in the same directory, fsync, rename — a
// crash or a failed save leaves the old file or the new one, never a mix), the
// same for several files saved together, and a whole-file read. Errors are
// kiln::Error naming the file.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// Writes `bytes` to `path` atomically. `what` names the kind of file in
// errors ("cannot save <what> '<path>': …"); kiln::Error (Unavailable) when
// the temporary cannot be created, written, synced or renamed — `path` is
// then untouched and no temporary is left behind.
void write_file_atomic(const std::string& path, std::string_view bytes, std::string_view what);

// One file of write_files_atomic: its path, its bytes, and what it is (for
// errors, as in write_file_atomic).
struct FileWrite {
  std::string path;
  std::string_view bytes;
  std::string_view what;
};

// Writes several files as one save: every temporary is written and synced
// first, then each is renamed over its path; when a step fails, the files
// already replaced get their old content back (from a hard link taken before
// the renames) and the error names the file — so a failed save leaves every
// file as it was and no temporary behind. A crash between the renames can
// leave some files new and others old (and a "<path>.bak.*" link).
// kiln::Error (Unavailable) as in write_file_atomic.
void write_files_atomic(const std::vector<FileWrite>& files);

// The whole content of `path`; kiln::Error (NotFound) naming `what` and the
// path when it cannot be opened, (Unavailable) when reading fails.
std::string read_whole_file(const std::string& path, std::string_view what);

}  // namespace kiln
