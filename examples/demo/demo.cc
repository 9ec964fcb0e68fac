// Placeholder demo: replaced by a real program (build, save, run) by the IR work.
#include <iostream>

#include "kiln/support/error.h"

int main() {
  try {
    kiln::throw_error(kiln::ErrorKind::Unimplemented, "the kiln demo program is not written yet");
  } catch (const kiln::Error& e) {
    std::cout << "kiln demo: " << e.what() << "\n";
  }
  return 0;
}
