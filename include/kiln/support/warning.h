// Warnings: what kiln reports when it goes on despite something the user
// should hear about (e.g. a weights file holding tensors the program lacks).
// Each goes to one process-wide, settable handler; the default writes
// "kiln warning: <message>" and a newline to stderr.
#pragma once

#include <functional>
#include <string_view>

namespace kiln {

using WarningHandler = std::function<void(std::string_view message)>;

// Installs `handler` (an empty one restores the default) and returns the
// previous one, so a caller can put it back. Thread-safe: the handler is
// called under a lock, from any thread, one call at a time — so it must not
// call warn() or set_warning_handler() itself.
WarningHandler set_warning_handler(WarningHandler handler);

// Reports `message` (no trailing newline) to the current handler.
void warn(std::string_view message);

}  // namespace kiln
