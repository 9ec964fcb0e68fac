// The text IR parser (kiln/ir/parser.h): hand-written recursive descent over
// the grammar IrPrinter writes. Lexing is done in place by the grammar
// functions (a shaped type's "16x1xf32" is not a stream of ordinary tokens).
#include "kiln/ir/parser.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/ir/builtin_attributes.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/ir_context.h"
#include "kiln/ir/op.h"
#include "kiln/ir/region.h"
#include "kiln/ir/tensor_array_type.h"
#include "kiln/ir/tensor_attribute.h"
#include "kiln/ir/text_form.h"
#include "kiln/ir/traits.h"
#include "kiln/support/nesting_guard.h"
#include "tensor_storage_type.h"

namespace kiln {

namespace {

// A rejection that already starts with "source:line:column: ".
struct LocatedError : Error {
  using Error::Error;
};

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9') || c == '.'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  Parser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  Program program();

 private:
  // ---- lexing ----
  void skip_space();
  bool at_end() {
    skip_space();
    return pos_ >= text_.size();
  }
  // The next character after white space and comments ('\0' at the end).
  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  // The character right at the cursor, no skipping ('\0' at the end).
  char here() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool consume(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c, std::string_view context);
  void expect_arrow(std::string_view context);
  // [A-Za-z_][A-Za-z0-9_.]* at the cursor (after white space); empty if none.
  std::string_view name();
  // The name at the cursor without consuming it.
  std::string_view peek_name();
  std::string string_literal();
  // "%12" at the cursor; returns "12".
  std::string value_name(std::string_view context);
  // What is at the cursor, for "found …": 'x', 'kiln.add', a string, end of input.
  std::string found();

  // ---- errors ----
  std::string location(std::size_t at) const;
  template <typename... Args>
  [[noreturn]] void fail(std::size_t at, ErrorKind kind, const Args&... args) const {
    throw LocatedError(kind, location(at) + ": " + detail::str_cat(args...));
  }

  // ---- grammar ----
  void parameter(Program& p);
  void operation(Block& block);
  // The phases of operation(): result names, operands, the signature.
  std::vector<std::pair<std::string, std::size_t>> result_names();
  std::vector<Value> operands(const std::string& op_name, const detail::OpInfoImpl* impl);
  std::vector<Type> signature(const std::string& op_name, const detail::OpInfoImpl* impl,
                              const std::vector<Value>& args, std::size_t num_result_names);
  std::vector<std::unique_ptr<Block>> region(const std::string& op_name, OpInfo info,
                                             std::size_t op_at, std::uint32_t index);
  void block_arguments(Block& b);
  Type type();
  template <typename C>
  C shaped_type(std::size_t at);
  Attribute attribute();
  DictionaryAttribute dictionary(std::string_view context);
  Attribute number_attribute();
  TensorAttribute tensor_values(TensorType type, std::size_t at);
  // A number's text: [-](digits[.digits][e[+-]digits] | nan | inf).
  std::string_view number_text(std::string_view context);
  template <typename T>
  T convert_number(std::string_view s, std::size_t at, std::string_view what);

  // ---- values ----
  struct Definition {
    Value value;
    std::size_t at;                // where its name is defined
    std::size_t scope;             // index in scopes_ of the region that holds it
    std::size_t closed_at = 0;     // where that region ends
    bool visible = true;
  };
  Value use(const std::string& name, std::size_t at);
  void define(const std::string& name, Value v, std::size_t at);

  std::string_view text_;
  std::string_view source_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  // Where a kiln::Error thrown by the IR itself (a type or attribute get, an
  // op's creation or verification) is reported.
  std::size_t where_ = 0;
  std::unordered_map<std::string, Definition> values_;
  std::vector<std::vector<std::string>> scopes_;  // names defined in each open region
  // Values of scopes below this index are out of reach: the innermost open
  // region belongs to an IsolatedFromAbove op (kiln.if, kiln.while).
  std::size_t isolated_floor_ = 0;
  std::string isolated_op_;
  std::size_t isolated_at_ = 0;
  // Every op with where its name is, verified once the whole program is read
  // (an op such as kiln.yield checks the op its block belongs to).
  std::vector<std::pair<Operation*, std::size_t>> created_;
};

// ---- lexing ----

void Parser::skip_space() {
  while (pos_ < text_.size()) {
    char c = text_[pos_];
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      ++pos_;
    } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
      while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
    } else {
      break;
    }
  }
}

std::string_view Parser::peek_name() {
  skip_space();
  std::size_t end = pos_;
  if (end < text_.size() && is_name_start(text_[end])) {
    while (end < text_.size() && is_name_char(text_[end])) ++end;
  }
  return text_.substr(pos_, end - pos_);
}

std::string_view Parser::name() {
  std::string_view n = peek_name();
  pos_ += n.size();
  return n;
}

std::string Parser::found() {
  if (at_end()) return "end of input";
  const char c = text_[pos_];
  if (is_name_start(c)) {
    std::string_view n = peek_name();
    if (n.size() > 40) return "'" + std::string(n.substr(0, 40)) + "...'";
    return "'" + std::string(n) + "'";
  }
  if (c == '"') return "a string";
  if (c == '-' || is_digit(c)) {
    std::size_t end = pos_ + 1;
    while (end < text_.size() && end - pos_ < 40 &&
           (is_name_char(text_[end]) || text_[end] == '+' || text_[end] == '-'))
      ++end;
    return "'" + std::string(text_.substr(pos_, end - pos_)) + "'";
  }
  const auto u = static_cast<unsigned char>(c);
  if (u < 0x20 || u >= 0x7f) {
    const char* hex = "0123456789abcdef";
    return std::string("byte 0x") + hex[u >> 4] + hex[u & 15];
  }
  return std::string("'") + c + "'";
}

void Parser::expect(char c, std::string_view context) {
  if (consume(c)) return;
  fail(pos_, ErrorKind::InvalidArgument, "expected '", c, "' ", context, ", found ", found());
}

void Parser::expect_arrow(std::string_view context) {
  if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '>') {
    pos_ += 2;
    return;
  }
  fail(pos_, ErrorKind::InvalidArgument, "expected '->' ", context, ", found ", found());
}

std::string Parser::string_literal() {
  skip_space();
  const std::size_t open = pos_;
  if (here() != '"')
    fail(pos_, ErrorKind::InvalidArgument, "expected a string, found ", found());
  ++pos_;
  std::string out;
  for (;;) {
    if (pos_ >= text_.size())
      fail(open, ErrorKind::InvalidArgument, "unterminated string: no closing '\"' before the "
           "end of input");
    const char c = text_[pos_];
    if (c == '"') {
      ++pos_;
      return out;
    }
    if (c == '\n')
      fail(open, ErrorKind::InvalidArgument, "unterminated string: it reaches the end of the "
           "line (write a newline inside a string as \\n)");
    if (c != '\\') {
      out += c;
      ++pos_;
      continue;
    }
    const std::size_t esc = pos_;
    const char e = pos_ + 1 < text_.size() ? text_[pos_ + 1] : '\0';
    pos_ += 2;
    switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'x': {
        auto hex = [](char h) {
          if (h >= '0' && h <= '9') return h - '0';
          if (h >= 'a' && h <= 'f') return h - 'a' + 10;
          if (h >= 'A' && h <= 'F') return h - 'A' + 10;
          return -1;
        };
        const int hi = pos_ < text_.size() ? hex(text_[pos_]) : -1;
        const int lo = pos_ + 1 < text_.size() ? hex(text_[pos_ + 1]) : -1;
        if (hi < 0 || lo < 0)
          fail(esc, ErrorKind::InvalidArgument, "expected two hex digits after \\x in a string");
        out += static_cast<char>(hi * 16 + lo);
        pos_ += 2;
        break;
      }
      default:
        fail(esc, ErrorKind::InvalidArgument, "unknown escape in a string (known: \\\" \\\\ \\n "
             "\\t \\r \\xNN)");
    }
  }
}

std::string Parser::value_name(std::string_view context) {
  skip_space();
  if (here() != '%')
    fail(pos_, ErrorKind::InvalidArgument, "expected a value %N ", context, ", found ", found());
  std::size_t end = pos_ + 1;
  while (end < text_.size() && (is_name_start(text_[end]) || is_digit(text_[end]))) ++end;
  if (end == pos_ + 1)
    fail(pos_, ErrorKind::InvalidArgument, "expected a value name after '%' ", context);
  std::string n(text_.substr(pos_ + 1, end - pos_ - 1));
  pos_ = end;
  return n;
}

std::string Parser::location(std::size_t at) const {
  at = std::min(at, text_.size());
  std::size_t line = 1, line_start = 0;
  for (std::size_t i = 0; i < at; ++i)
    if (text_[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  return detail::str_cat(source_, ':', line, ':', at - line_start + 1);
}

// ---- values ----

Value Parser::use(const std::string& name, std::size_t at) {
  auto it = values_.find(name);
  if (it == values_.end())
    fail(at, ErrorKind::InvalidArgument, "undefined value %", name);
  if (!it->second.visible)
    fail(at, ErrorKind::InvalidArgument, "value %", name, " is not visible here: it is defined at ",
         location(it->second.at), " inside a region that ends at ", location(it->second.closed_at));
  if (it->second.scope < isolated_floor_)
    fail(at, ErrorKind::InvalidArgument, "value %", name, " (defined at ", location(it->second.at),
         ") is used inside ", isolated_op_, " at ", location(isolated_at_),
         ", whose regions are isolated from above: pass it to ", isolated_op_, " as an operand");
  return it->second.value;
}

void Parser::define(const std::string& name, Value v, std::size_t at) {
  auto [it, fresh] = values_.try_emplace(name, Definition{v, at, scopes_.size() - 1});
  if (!fresh)
    fail(at, ErrorKind::AlreadyExists, "value %", name, " is defined twice (first at ",
         location(it->second.at), ")");
  scopes_.back().push_back(name);
}

// ---- program ----

Program Parser::program() {
  try {
    Program p;
    skip_space();
    const std::size_t start = pos_;
    if (peek_name() != "program")
      fail(start, ErrorKind::InvalidArgument, "expected 'program' at the start, found ", found());
    name();
    scopes_.emplace_back();
    if (consume('(')) block_arguments(p.block());
    expect('{', "after 'program'");
    for (;;) {
      const char c = peek();
      if (c == '}') break;
      if (c == '\0')
        fail(pos_, ErrorKind::InvalidArgument, "expected '}' to close the program opened at ",
             location(start), ", found end of input");
      const std::size_t save = pos_;
      if (name() == "parameter" && peek() == '"') {
        pos_ = save;
        parameter(p);
      } else {
        pos_ = save;
        operation(p.block());
      }
    }
    ++pos_;  // '}'
    if (!at_end())
      fail(pos_, ErrorKind::InvalidArgument, "expected the end of input after the program, found ",
           found());
    for (auto [op, at] : created_) {
      where_ = at;
      op->verify();
    }
    try {
      p.verify();
    } catch (const Error& e) {
      fail(start, e.kind(), "the program does not verify: ", e.message());
    }
    return p;
  } catch (const LocatedError& e) {
    throw Error(e.kind(), e.message());
  } catch (const Error& e) {
    throw Error(e.kind(), location(where_) + ": " + e.message());
  }
}

void Parser::parameter(Program& p) {
  name();  // "parameter"
  skip_space();
  const std::size_t at = pos_;
  std::string n = string_literal();
  if (n.empty()) fail(at, ErrorKind::InvalidArgument, "a parameter name must not be empty");
  if (p.has_parameter(n))
    fail(at, ErrorKind::AlreadyExists, "parameter \"", n, "\" is declared twice");
  const std::string context = "after parameter \"" + n + "\"";
  expect(':', context);
  Parameter param;
  param.type = type();
  if (consume('{')) {
    skip_space();
    const std::size_t key_at = pos_;
    if (name() != "mutable")
      fail(key_at, ErrorKind::InvalidArgument, "expected 'mutable' in the options of parameter \"",
           n, "\", found ", found());
    expect('=', "after 'mutable'");
    skip_space();
    const std::size_t value_at = pos_;
    std::string_view v = name();
    if (v != "true" && v != "false") {
      pos_ = value_at;
      fail(value_at, ErrorKind::InvalidArgument, "expected true or false for 'mutable', found ",
           found());
    }
    param.is_mutable = v == "true";
    expect('}', "after the options of parameter \"" + n + "\"");
  }
  p.set_parameter(n, param);
}

// %a, %b =
std::vector<std::pair<std::string, std::size_t>> Parser::result_names() {
  std::vector<std::pair<std::string, std::size_t>> results;
  if (peek() == '%') {
    do {
      skip_space();
      const std::size_t at = pos_;
      results.emplace_back(value_name("as a result name"), at);
    } while (consume(','));
    expect('=', "after the result names");
  }
  return results;
}

// (%x, %y)
std::vector<Value> Parser::operands(const std::string& op_name, const detail::OpInfoImpl* impl) {
  skip_space();
  const std::size_t operands_at = pos_;
  expect('(', "after the op name " + op_name);
  std::vector<Value> out;
  if (!consume(')')) {
    do {
      skip_space();
      const std::size_t at = pos_;
      out.push_back(use(value_name("as an operand of " + op_name), at));
    } while (consume(','));
    expect(')', "after the operands of " + op_name);
  }
  if (!impl->takes_operands(out.size()))
    fail(operands_at, ErrorKind::InvalidArgument, op_name, " takes ", impl->operand_count(),
         " operand(s), found ", out.size());
  return out;
}

// : (operand types) -> result type(s); the operand types must be the
// operands' own. Returns the result types.
std::vector<Type> Parser::signature(const std::string& op_name, const detail::OpInfoImpl* impl,
                                    const std::vector<Value>& args, std::size_t num_result_names) {
  expect(':', "before the signature of " + op_name);
  skip_space();
  const std::size_t signature_at = pos_;
  expect('(', "to open the operand types of " + op_name);
  std::vector<std::pair<Type, std::size_t>> operand_types;
  if (!consume(')')) {
    do {
      skip_space();
      const std::size_t at = pos_;
      operand_types.emplace_back(type(), at);
    } while (consume(','));
    expect(')', "after the operand types of " + op_name);
  }
  if (operand_types.size() != args.size())
    fail(signature_at, ErrorKind::InvalidArgument, "the signature of ", op_name, " lists ",
         operand_types.size(), " operand type(s), but it has ", args.size(), " operand(s)");
  for (std::size_t i = 0; i < args.size(); ++i)
    if (args[i].type() != operand_types[i].first)
      fail(operand_types[i].second, ErrorKind::InvalidArgument, "operand #", i, " of ", op_name,
           " is defined as ", args[i].type().to_string(), ", but the signature says ",
           operand_types[i].first.to_string());
  expect_arrow("after the operand types of " + op_name);
  skip_space();
  const std::size_t results_at = pos_;
  std::vector<Type> result_types;
  if (consume('(')) {
    if (!consume(')')) {
      do result_types.push_back(type());
      while (consume(','));
      expect(')', "after the result types of " + op_name);
    }
  } else {
    result_types.push_back(type());
  }
  if (result_types.size() != num_result_names)
    fail(results_at, ErrorKind::InvalidArgument, op_name, " has ", result_types.size(),
         " result type(s) but ", num_result_names, " result name(s)");
  if (impl->num_results >= 0 && result_types.size() != std::size_t(impl->num_results))
    fail(results_at, ErrorKind::InvalidArgument, op_name, " has ", impl->num_results,
         " result(s), found ", result_types.size());
  return result_types;
}

void Parser::operation(Block& block) {
  const std::vector<std::pair<std::string, std::size_t>> results = result_names();
  // dialect.op
  skip_space();
  const std::size_t name_at = pos_;
  const std::string op_name(name());
  if (op_name.empty())
    fail(name_at, ErrorKind::InvalidArgument, "expected an op name, found ", found());
  OpInfo info = IrContext::instance()->find_op(op_name);
  if (!info) fail(name_at, ErrorKind::NotFound, "unknown op '", op_name, "' (not registered)");
  const auto* impl = info.impl();
  const std::vector<Value> args = operands(op_name, impl);
  // {attributes}
  DictionaryAttribute attrs = DictionaryAttribute::get();
  if (peek() == '{') attrs = dictionary("of " + op_name);
  const std::vector<Type> result_types = signature(op_name, impl, args, results.size());

  // { ^bb0(...): ... } per region
  std::vector<std::vector<std::unique_ptr<Block>>> regions;
  while (peek() == '{')
    regions.push_back(region(op_name, info, name_at, static_cast<std::uint32_t>(regions.size())));

  where_ = name_at;
  attrs = with_attribute_defaults(info, attrs);
  Operation* op = Operation::create(args, result_types, attrs, info,
                                    static_cast<std::uint32_t>(regions.size()));
  block.push_back(op);  // the block owns it from here, whatever happens next
  for (std::uint32_t r = 0; r < regions.size(); ++r)
    for (auto& b : regions[r]) op->region(r).push_back(b.release());
  for (std::uint32_t i = 0; i < results.size(); ++i)
    define(results[i].first, op->result(i), results[i].second);
  created_.emplace_back(op, name_at);
}

std::vector<std::unique_ptr<Block>> Parser::region(const std::string& op_name, OpInfo info,
                                                   std::size_t op_at, std::uint32_t index) {
  skip_space();
  const std::size_t open = pos_;
  where_ = open;
  NestingGuard guard(depth_, "region");
  ++pos_;  // '{'
  scopes_.emplace_back();
  const auto saved_floor = isolated_floor_;
  const auto saved_op = isolated_op_;
  const auto saved_at = isolated_at_;
  if (info.has_trait<IsolatedFromAbove>()) {
    isolated_floor_ = scopes_.size() - 1;
    isolated_op_ = op_name;
    isolated_at_ = op_at;
  }
  std::vector<std::unique_ptr<Block>> blocks;
  for (;;) {
    const char c = peek();
    if (c == '}') break;
    if (c == '\0')
      fail(pos_, ErrorKind::InvalidArgument, "expected '}' to close region #", index, " of ",
           op_name, " opened at ", location(open), ", found end of input");
    if (c != '^')
      fail(pos_, ErrorKind::InvalidArgument, "expected a block label ^bbN or '}' in region #",
           index, " of ", op_name, ", found ", found());
    ++pos_;
    const std::size_t label_at = pos_;
    if (name().empty())
      fail(label_at, ErrorKind::InvalidArgument, "expected a block name after '^', found ",
           found());
    auto b = std::make_unique<Block>();
    if (consume('(')) block_arguments(*b);
    expect(':', "after the block label");
    for (char k = peek(); k != '^' && k != '}' && k != '\0'; k = peek()) operation(*b);
    blocks.push_back(std::move(b));
  }
  ++pos_;  // '}'
  for (const auto& n : scopes_.back()) {
    auto& d = values_.at(n);
    d.visible = false;
    d.closed_at = pos_ - 1;
  }
  scopes_.pop_back();
  isolated_floor_ = saved_floor;
  isolated_op_ = saved_op;
  isolated_at_ = saved_at;
  return blocks;
}

// (%0: type, %1: type) after a block label or 'program', the '(' read.
void Parser::block_arguments(Block& b) {
  do {
    skip_space();
    const std::size_t at = pos_;
    std::string n = value_name("as a block argument");
    expect(':', "after block argument %" + n);
    define(n, b.add_argument(type()), at);
  } while (consume(','));
  expect(')', "after the block arguments");
}

// ---- types ----

Type Parser::type() {
  skip_space();
  const std::size_t at = pos_;
  where_ = at;
  NestingGuard guard(depth_, "type");
  const std::string_view n = name();
  if (n.empty()) fail(at, ErrorKind::InvalidArgument, "expected a type, found ", found());
  if (here() == '<') {
    if (n == TensorType::name) return shaped_type<TensorType>(at);
    if (n == VTensorType::name) return shaped_type<VTensorType>(at);
    if (n == TensorArrayType::name) return shaped_type<TensorArrayType>(at);
    if (n == VectorType::name) {
      ++pos_;
      std::vector<Type> elements;
      if (!consume('>')) {
        do elements.push_back(type());
        while (consume(','));
        expect('>', "after the element types of a vector type");
      }
      return VectorType::get(std::move(elements));
    }
  }
  const auto* kind = IrContext::instance()->find_type_kind(n);
  if (!kind) fail(at, ErrorKind::NotFound, "unknown type '", n, "'");
  if (kind->parametric) {
    if (n == TensorType::name || n == VTensorType::name || n == TensorArrayType::name ||
        n == VectorType::name)
      fail(pos_, ErrorKind::InvalidArgument, "expected '<' after '", n, "', found ", found());
    fail(at, ErrorKind::Unimplemented, "type '", n, "' has parameters, and its text form cannot "
         "be parsed (only builtin parametric types can)");
  }
  static const nlohmann::json no_params;
  return Type(static_cast<const TypeStorage*>(kind->load(no_params)));
}

// tensor<16x1xf32>, vtensor<-1x4xf32>, tensor_array<?x8xf32>, tensor<f32>:
// each dim (an integer, -1 or ? for unknown) followed by 'x', then the
// element type. Written without spaces, as the printer writes it.
template <typename C>
C Parser::shaped_type(std::size_t at) {
  ++pos_;  // '<'
  std::vector<std::int64_t> dims;
  for (;;) {
    const std::size_t dim_at = pos_;
    const char c = here();
    if (c == '?') {
      ++pos_;
      dims.push_back(-1);
    } else if (c == '-' || is_digit(c)) {
      std::size_t end = pos_ + 1;
      while (end < text_.size() && is_digit(text_[end])) ++end;
      dims.push_back(convert_number<std::int64_t>(text_.substr(pos_, end - pos_), dim_at,
                                                  "a dim of " + std::string(C::name)));
      pos_ = end;
    } else {
      break;
    }
    if (here() != 'x')
      fail(pos_, ErrorKind::InvalidArgument, "expected 'x' after a dim of ", C::name, "<...>, found ",
           found());
    ++pos_;
  }
  if (!is_name_start(here()))
    fail(pos_, ErrorKind::InvalidArgument, "expected a dim or the element type in ", C::name,
         "<...>, found ", found());
  Type element = type();
  expect('>', "after the element type of " + std::string(C::name) + "<...>");
  where_ = at;
  return C::get(element, std::move(dims));
}

// ---- attributes ----

Attribute Parser::attribute() {
  skip_space();
  const std::size_t at = pos_;
  where_ = at;
  NestingGuard guard(depth_, "attribute");
  const char c = here();
  if (c == '"') return StrAttribute::get(string_literal());
  if (c == '[') {
    ++pos_;
    std::vector<Attribute> elements;
    if (!consume(']')) {
      do elements.push_back(attribute());
      while (consume(','));
      expect(']', "after the elements of an array");
    }
    return ArrayAttribute::get(std::move(elements));
  }
  if (c == '{') return dictionary("in a dictionary attribute");
  if (c == '-' || is_digit(c)) return number_attribute();
  const std::string_view n = peek_name();
  if (n.empty()) fail(at, ErrorKind::InvalidArgument, "expected an attribute, found ", found());
  if (n == "true" || n == "false") {
    pos_ += n.size();
    return BoolAttribute::get(n == "true");
  }
  if (n == "nan" || n == "inf") return number_attribute();
  if ((n == "dtype" || n == "place") && pos_ + n.size() < text_.size() &&
      text_[pos_ + n.size()] == '<') {
    pos_ += n.size() + 1;
    const std::size_t end = text_.find('>', pos_);
    const std::size_t nl = text_.find('\n', pos_);
    if (end == std::string_view::npos || (nl != std::string_view::npos && nl < end))
      fail(pos_, ErrorKind::InvalidArgument, "expected '>' to close ", n, "<...>");
    const std::string_view inner = text_.substr(pos_, end - pos_);
    if (n == "dtype") {
      auto dt = parse_data_type(inner);
      if (!dt || *dt == DataType::Undefined)
        fail(pos_, ErrorKind::InvalidArgument, "unknown data type '", inner, "' in dtype<...>");
      pos_ = end + 1;
      return DataTypeAttribute::get(*dt);
    }
    auto place = Place::parse(inner);
    if (!place)
      fail(pos_, ErrorKind::InvalidArgument, "expected cpu, host_stream:N or cuda:N in place<...>, "
           "found '", inner, "'");
    pos_ = end + 1;
    return PlaceAttribute::get(*place);
  }
  // A type; tensor<…> followed by [values] is a tensor constant.
  Type t = type();
  if (t.isa<TensorType>() && peek() == '[') return tensor_values(t.cast<TensorType>(), at);
  return TypeAttribute::get(t);
}

DictionaryAttribute Parser::dictionary(std::string_view context) {
  skip_space();
  const std::size_t open = pos_;
  where_ = open;
  NestingGuard guard(depth_, "dictionary");
  ++pos_;  // '{'
  std::vector<NamedAttribute> entries;
  std::unordered_map<std::string, std::size_t> seen;
  if (!consume('}')) {
    do {
      skip_space();
      const std::size_t key_at = pos_;
      std::string key = here() == '"' ? string_literal() : std::string(name());
      if (key_at == pos_)
        fail(key_at, ErrorKind::InvalidArgument, "expected an attribute name ", context,
             ", found ", found());
      if (auto [it, fresh] = seen.try_emplace(key, key_at); !fresh)
        fail(key_at, ErrorKind::AlreadyExists, "attribute '", key, "' is given twice (first at ",
             location(it->second), ")");
      expect('=', "after attribute name '" + key + "'");
      entries.emplace_back(std::move(key), attribute());
    } while (consume(','));
    if (peek() != '}')
      fail(pos_, ErrorKind::InvalidArgument, "expected ',' or '}' after attribute '",
           entries.back().first, "' ", context, ", found ", found());
    ++pos_;
  }
  where_ = open;
  return DictionaryAttribute::get(std::move(entries));
}

std::string_view Parser::number_text(std::string_view context) {
  skip_space();
  const std::size_t start = pos_;
  std::size_t i = pos_;
  if (i < text_.size() && text_[i] == '-') ++i;
  for (std::string_view word : {"nan", "inf"})
    if (text_.substr(i, 3) == word && !(i + 3 < text_.size() && is_name_char(text_[i + 3]))) {
      pos_ = i + 3;
      // nan(0x7fc00001): a NaN's bit pattern.
      if (word == "nan" && here() == '(') {
        const std::size_t close = text_.find(')', pos_);
        if (close == std::string_view::npos || close - pos_ > 20)
          fail(pos_, ErrorKind::InvalidArgument, "expected nan(0x<hex bits>) ", context);
        pos_ = close + 1;
      }
      return text_.substr(start, pos_ - start);
    }
  const std::size_t digits = i;
  while (i < text_.size() && is_digit(text_[i])) ++i;
  if (i == digits)
    fail(start, ErrorKind::InvalidArgument, "expected a number ", context, ", found ", found());
  if (i < text_.size() && text_[i] == '.') {
    ++i;
    while (i < text_.size() && is_digit(text_[i])) ++i;
  }
  if (i < text_.size() && (text_[i] == 'e' || text_[i] == 'E')) {
    ++i;
    if (i < text_.size() && (text_[i] == '+' || text_[i] == '-')) ++i;
    const std::size_t exp = i;
    while (i < text_.size() && is_digit(text_[i])) ++i;
    if (i == exp)
      fail(i, ErrorKind::InvalidArgument, "expected the digits of an exponent ", context);
  }
  pos_ = i;
  return text_.substr(start, i - start);
}

// The number `s` as a T; a kiln::Error at `at` when it is not one or is out
// of T's range.
template <typename T>
T Parser::convert_number(std::string_view s, std::size_t at, std::string_view what) {
  if constexpr (std::is_floating_point_v<T>) {
    if (s.find_first_of("ni") != std::string_view::npos) {
      auto special = parse_special_float<T>(s);
      if (!special)
        fail(at, ErrorKind::InvalidArgument, "'", s, "' is not a number (", what, ")");
      return *special;
    }
    T v{};
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec == std::errc::result_out_of_range) {
      // Past the largest finite value, or so small it rounds to zero (the
      // printer writes neither: an infinity is "inf", a zero "0").
      fail(at, ErrorKind::OutOfRange, "'", s, "' is out of range for ", what,
           " (it rounds to an infinity or to zero)");
    } else if (r.ec != std::errc() || r.ptr != s.data() + s.size()) {
      fail(at, ErrorKind::InvalidArgument, "'", s, "' is not a number (", what, ")");
    }
    return v;
  } else {
    if (s.find_first_of(".eEni") != std::string_view::npos)
      fail(at, ErrorKind::InvalidArgument, "expected an integer for ", what, ", found '", s, "'");
    T v{};
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec == std::errc::result_out_of_range || (r.ec != std::errc() && !s.empty() && s[0] == '-'
                                                    && std::is_unsigned_v<T>))
      fail(at, ErrorKind::OutOfRange, "'", s, "' is out of range for ", what);
    if (r.ec != std::errc() || r.ptr != s.data() + s.size())
      fail(at, ErrorKind::InvalidArgument, "'", s, "' is not an integer (", what, ")");
    return v;
  }
}

// 5 (i64), 5 : i32, 1.5 (f64), 1.5 : f32, nan, -inf : f32.
Attribute Parser::number_attribute() {
  skip_space();
  const std::size_t at = pos_;
  const std::string_view s = number_text("for an attribute");
  const bool is_float = s.find_first_of(".eEni") != std::string_view::npos;
  std::string_view suffix = is_float ? "f64" : "i64";
  const std::size_t save = pos_;
  if (consume(':')) {
    skip_space();
    const std::size_t suffix_at = pos_;
    suffix = name();
    if (suffix != "i32" && suffix != "i64" && suffix != "f32" && suffix != "f64") {
      pos_ = suffix_at;
      fail(suffix_at, ErrorKind::InvalidArgument, "expected i32, i64, f32 or f64 after '", s,
           " :', found ", found());
    }
    if (is_float && suffix[0] == 'i')
      fail(at, ErrorKind::InvalidArgument, "'", s, "' is not an integer, but its type is ", suffix);
  } else {
    pos_ = save;
  }
  if (suffix == "i32") return Int32Attribute::get(convert_number<std::int32_t>(s, at, "i32"));
  if (suffix == "i64") return Int64Attribute::get(convert_number<std::int64_t>(s, at, "i64"));
  if (suffix == "f32") return Float32Attribute::get(convert_number<float>(s, at, "f32"));
  return Float64Attribute::get(convert_number<double>(s, at, "f64"));
}

// Calls f(T{}) with T the C++ type a tensor constant stores a dtype's

// tensor<2x2xf32> [1, 2, 3, 4]: the values, row-major, numel of them.
TensorAttribute Parser::tensor_values(TensorType type, std::size_t at) {
  ++pos_;  // '['
  const DataType dtype = type.data_type();
  const std::string dtype_name(kiln::to_string(dtype));
  std::string bytes;
  std::size_t count = 0;
  detail::with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (consume(']')) return;
    do {
      skip_space();
      const std::size_t value_at = pos_;
      T v{};
      if constexpr (std::is_same_v<T, bool>) {
        const std::string_view w = name();
        if (w != "true" && w != "false") {
          pos_ = value_at;
          fail(value_at, ErrorKind::InvalidArgument, "expected true or false in a bool tensor "
               "constant, found ", found());
        }
        v = w == "true";
      } else {
        v = convert_number<T>(number_text("in a tensor constant"), value_at,
                              "an element of a " + dtype_name + " tensor constant");
      }
      bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
      ++count;
    } while (consume(','));
    expect(']', "after the values of a tensor constant");
  });
  // The element count the dims give (no overflow: checked against the count).
  std::size_t numel = 1;
  bool known = true;
  for (auto d : type.dims()) {
    if (d < 0 || (d && numel > std::numeric_limits<std::size_t>::max() / std::size_t(d))) {
      known = false;
      break;
    }
    numel *= std::size_t(d);
  }
  if (known && numel != count)
    fail(at, ErrorKind::InvalidArgument, "tensor constant ", type.to_string(), " needs ", numel,
         " value(s), found ", count);
  where_ = at;
  return TensorAttribute::get_or_hold(dtype, type.dims(), std::move(bytes));
}

}  // namespace

Program parse_program(std::string_view text, std::string_view source) {
  Parser parser(text, source);
  return parser.program();
}

}  // namespace kiln
