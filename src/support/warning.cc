// The process-wide warning handler of kiln/support/warning.h.
#include "kiln/support/warning.h"

#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

namespace kiln {

namespace {

void write_to_stderr(std::string_view message) {
  std::string line = "kiln warning: ";
  line.append(message);
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stderr);
}

struct HandlerSlot {
  std::mutex mutex;  // guards handler and serializes the calls
  WarningHandler handler = write_to_stderr;
};

HandlerSlot& slot() {
  static HandlerSlot s;
  return s;
}

}  // namespace

WarningHandler set_warning_handler(WarningHandler handler) {
  HandlerSlot& s = slot();
  std::lock_guard lock(s.mutex);
  WarningHandler previous = std::move(s.handler);
  s.handler = handler ? std::move(handler) : WarningHandler(write_to_stderr);
  return previous;
}

void warn(std::string_view message) {
  HandlerSlot& s = slot();
  std::lock_guard lock(s.mutex);
  s.handler(message);
}

}  // namespace kiln
