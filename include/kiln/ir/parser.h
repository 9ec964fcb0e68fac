// The parser of kiln's text IR (seed 002's text form, DESIGN.md "The IR"):
// reads exactly what IrPrinter::print(const Program&) writes — the
// `program { … }` wrapper (`program(%0: type) { … }` with top-block arguments), `parameter "name" : type {mutable = false}` lines,
// ops `%0, %1 = dialect.op(%a, %b) {attrs} : (types) -> types`, nested
// regions of `^bbN(%k: type):` blocks, every builtin type and attribute — so
// that print → parse → print gives the same text and a structurally equal
// program. Ops are created through the op registry by name and verified.
#pragma once

#include <string_view>

#include "kiln/ir/program.h"

namespace kiln {

// Parses one program. Every rejection is a kiln::Error whose message starts
// with "source:line:column: " and says what was expected and what was found:
// a syntax error, an unknown op or type (NotFound), an undefined value, a
// value or parameter defined twice (AlreadyExists), an operand whose type is
// not the one the signature gives, a wrong operand or result count, an op or
// a program that does not verify, text after the program, nesting deeper
// than kMaxInputNesting. Between values, whitespace is free and `//` starts
// a comment to the end of the line. A user-defined type without parameters
// is read by its name; user-defined parametric types and attribute kinds have
// no text reader and are rejected (the JSON format keeps them).
Program parse_program(std::string_view text, std::string_view source = "<text>");

}  // namespace kiln
