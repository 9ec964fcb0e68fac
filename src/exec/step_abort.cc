// abort_step (step_abort.h).
#include "step_abort.h"

#include "kiln/runtime/rendezvous.h"
#include "kiln/support/error.h"

namespace kiln {

void abort_step(LocalRendezvous& rendezvous, std::int64_t step_id, const std::string& where,
                const std::exception_ptr& cause) noexcept {
  if (rendezvous.is_aborted()) return;  // an abort came first (perhaps this failure's cause)
  try {
    std::string why;
    try {
      std::rethrow_exception(cause);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
      why = "an unknown exception";
    }
    const std::string step = step_id ? " of step " + std::to_string(step_id) : std::string();
    rendezvous.abort(make_error(ErrorKind::Aborted, "the rendezvous", step, " was aborted: ", where,
                                " failed: ", why));
  } catch (...) {
    try {  // out of memory for the message: a plain one
      rendezvous.abort(Error(ErrorKind::Aborted, "the rendezvous was aborted: a run of its step failed"));
    } catch (...) {
    }
  }
}

}  // namespace kiln
