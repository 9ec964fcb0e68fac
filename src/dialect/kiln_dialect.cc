// The kiln dialect object; its ops register themselves in their own files
// (KILN_REGISTER_OP).
#include "kiln/dialect/kiln_dialect.h"

namespace kiln {

KilnDialect::KilnDialect() : Dialect("kiln", TypeId::get<KilnDialect>()) {}

void register_kiln_dialect(IrContext* ctx) { ctx->get_or_register_dialect<KilnDialect>(); }

}  // namespace kiln
