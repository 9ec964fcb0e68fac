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

void write_file_atomic(const std::string& path, std::string_view bytes, std::string_view what) {
  // Unique per process and call, so concurrent saves never share a temporary.
  static std::atomic<unsigned> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
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
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming", errno);
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
