// Program: a whole model (seed 002 §2.1.4, §2.4) — a top-level Block of ops
// and the named parameters. Parameter data is not in the IR: the Program
// records each parameter's name, type and whether runs change it; ops
// `builtin.parameter` / `builtin.set_parameter` refer to them by name, and
// the executor keeps their data in the root Scope.
#pragma once

#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "kiln/ir/type.h"

namespace kiln {

class Block;  // kiln/ir/block.h

struct Parameter {
  Type type;
  // False when no op of the program writes it (e.g. inference weights):
  // passes may then treat it as a constant (seed 002 §2.1.4).
  bool is_mutable = true;

  bool operator==(const Parameter&) const = default;
};

class Program {
 public:
  Program();
  ~Program();
  Program(Program&&) noexcept;
  Program& operator=(Program&&) noexcept;

  Block& block() const { return *block_; }

  // ---- parameters ----
  // Adds or replaces.
  void set_parameter(const std::string& name, Parameter p);
  // Null when absent.
  const Parameter* get_parameter(std::string_view name) const;
  // Throws kiln::Error(NotFound) naming the parameter.
  const Parameter& parameter(std::string_view name) const;
  bool has_parameter(std::string_view name) const { return get_parameter(name) != nullptr; }
  // False when absent.
  bool erase_parameter(std::string_view name);
  // Sorted by name.
  const std::map<std::string, Parameter, std::less<>>& parameters() const { return params_; }

  // Deep copy: same ops, attributes, types and parameters.
  Program clone() const;
  // Verifies every op, recursively; throws kiln::Error naming the first bad op.
  void verify() const;
  // Number of ops, nested ones included.
  std::size_t num_ops() const;

  void print(std::ostream& os) const;
  std::string to_string() const;

 private:
  std::unique_ptr<Block> block_;
  std::map<std::string, Parameter, std::less<>> params_;
};

std::ostream& operator<<(std::ostream& os, const Program& p);

}  // namespace kiln
