#include "kiln/io/file.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln/support/error.h"

namespace kiln {

namespace {

// A unique temporary name beside `path` (per process and call, so concurrent
// saves never share one).
std::string temporary_name(const std::string& path, std::string_view kind) {
  static std::atomic<unsigned> counter{0};
  return path + "." + std::string(kind) + "." + std::to_string(::getpid()) + "." +
         std::to_string(counter++);
}

// Writes and syncs `bytes` into a new temporary beside `path` and returns
// its name; on failure removes it and throws naming `path`.
std::string write_temporary(const std::string& path, std::string_view bytes, std::string_view what) {
  std::string tmp = temporary_name(path, "tmp");
  // `err`: the errno of the failed step, read before close() may change it.
  auto fail = [&](const char* step, int err) {
    std::remove(tmp.c_str());
    throw_error(ErrorKind::Unavailable, "cannot save ", what, " '", path, "': ", step, " '", tmp,
                "' failed: ", std::strerror(err));
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    int err = errno;
    throw_error(ErrorKind::Unavailable, "cannot save ", what, " '", path, "': creating '", tmp,
                "' failed: ", std::strerror(err));
  }
  for (std::size_t done = 0; done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n == 0 ? EIO : errno;
      ::close(fd);
      fail("writing", err);
    }
    done += static_cast<std::size_t>(n);
  }
  // Durable before it becomes visible: a crash leaves the old file or the new one.
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("syncing", err);
  }
  if (::close(fd) != 0) fail("closing", errno);
  return tmp;
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes, std::string_view what) {
  const std::string tmp = write_temporary(path, bytes, what);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw_error(ErrorKind::Unavailable, "cannot save ", what, " '", path, "': renaming '", tmp,
                "' failed: ", std::strerror(err));
  }
}

void write_files_atomic(const std::vector<FileWrite>& files) {
  struct Staged {
    std::string tmp;     // the new content, until renamed
    std::string backup;  // a hard link to the old file; empty when there was none
    bool renamed = false;
  };
  std::vector<Staged> staged(files.size());
  // Undoes everything done so far: renamed files get their old content back
  // (or disappear when they did not exist), temporaries and links go.
  auto roll_back = [&] {
    for (std::size_t i = 0; i < files.size(); ++i) {
      Staged& s = staged[i];
      if (s.renamed) {
        if (!s.backup.empty()) {
          if (std::rename(s.backup.c_str(), files[i].path.c_str()) == 0) s.backup.clear();
        } else {
          std::remove(files[i].path.c_str());
        }
      }
      if (!s.tmp.empty() && !s.renamed) std::remove(s.tmp.c_str());
      if (!s.backup.empty()) std::remove(s.backup.c_str());
    }
  };
  try {
    for (std::size_t i = 0; i < files.size(); ++i)
      staged[i].tmp = write_temporary(files[i].path, files[i].bytes, files[i].what);
    for (std::size_t i = 0; i < files.size(); ++i) {
      const FileWrite& f = files[i];
      struct stat st {};
      if (::stat(f.path.c_str(), &st) != 0) continue;  // nothing to keep
      if (!S_ISREG(st.st_mode)) continue;              // rename fails below, naming it
      const std::string backup = temporary_name(f.path, "bak");
      if (::link(f.path.c_str(), backup.c_str()) != 0) {
        const int err = errno;
        throw_error(ErrorKind::Unavailable, "cannot save ", f.what, " '", f.path,
                    "': keeping the old file as '", backup, "' failed: ", std::strerror(err));
      }
      staged[i].backup = backup;
    }
    for (std::size_t i = 0; i < files.size(); ++i) {
      const FileWrite& f = files[i];
      if (std::rename(staged[i].tmp.c_str(), f.path.c_str()) != 0) {
        const int err = errno;
        throw_error(ErrorKind::Unavailable, "cannot save ", f.what, " '", f.path, "': renaming '",
                    staged[i].tmp, "' failed: ", std::strerror(err));
      }
      staged[i].renamed = true;
    }
  } catch (...) {
    roll_back();
    throw;
  }
  for (const Staged& s : staged)
    if (!s.backup.empty()) std::remove(s.backup.c_str());
}

std::string read_whole_file(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw_error(ErrorKind::InvalidArgument, "cannot read ", what, " '", path, "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    throw_error(ErrorKind::NotFound, "cannot open ", what, " '", path, "': ", std::strerror(err));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw_error(ErrorKind::Unavailable, "cannot read ", what, " '", path, "'");
  return ss.str();
}

}  // namespace kiln
