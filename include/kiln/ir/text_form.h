// The lexical pieces of kiln's text IR (printer.h, parser.h) that the
// printer, the attributes' print() and the parser share, so that what one
// writes the other reads: quoted strings with escapes, bare names, and
// floating point in the shortest form that reads back to the same bits.
#pragma once

#include <optional>
#include <ostream>
#include <string_view>

namespace kiln {

// `s` in double quotes; '"', '\\', newline and tab escaped as \" \\ \n \t,
// other control bytes as \xNN; every other byte as is.
void print_quoted_string(std::ostream& os, std::string_view s);

// True when `s` can be printed without quotes as a dictionary key or name:
// [A-Za-z_][A-Za-z0-9_.]*.
bool is_bare_name(std::string_view s);

// The shortest digits that read back to the same value (std::to_chars), or
// inf / -inf, or nan / -nan for the quiet NaN of either sign, or
// nan(0x7fc00001) (the whole bit pattern in hex) for any other NaN, so that
// every value reads back bit for bit. F is float or double.
template <typename F>
void print_shortest_float(std::ostream& os, F v);

// Reads what print_shortest_float writes for infinities and NaNs; nullopt for
// anything else (plain numbers are std::from_chars' job).
template <typename F>
std::optional<F> parse_special_float(std::string_view s);

}  // namespace kiln
