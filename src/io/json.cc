#include "kiln/io/json.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "kiln/io/file.h"
#include "kiln/ir/builtin_attributes.h"
#include "kiln/ir/builtin_types.h"
#include "kiln/ir/ir_context.h"
#include "kiln/ir/op.h"
#include "kiln/ir/region.h"
#include "kiln/support/hash.h"
#include "kiln/support/nesting_guard.h"

namespace kiln {

using nlohmann::json;

// ---- programs ----

namespace {

struct Saver {
  std::unordered_map<const detail::ValueImpl*, std::size_t> ids;

  std::size_t define(Value v) {
    std::size_t id = ids.size();
    ids.emplace(v.impl(), id);
    return id;
  }

  json block(const Block& b) {
    json args = json::array();
    for (std::uint32_t a = 0; a < b.num_arguments(); ++a) {
      define(b.argument(a));
      args.push_back(type_to_json(b.argument(a).type()));
    }
    json ops = json::array();
    for (Operation* op : b) ops.push_back(operation(*op));
    return json{{"args", std::move(args)}, {"ops", std::move(ops)}};
  }

  json operation(const Operation& op) {
    json j;
    j["op"] = op.name();
    json operands = json::array();
    for (std::uint32_t i = 0; i < op.num_operands(); ++i) {
      auto it = ids.find(op.operand_source(i).impl());
      if (it == ids.end())
        throw_error(ErrorKind::InvalidArgument, "cannot save op '", op.name(), "': operand #", i,
                    " is not defined before it");
      operands.push_back(it->second);
    }
    j["operands"] = std::move(operands);
    if (op.num_regions()) {
      json regions = json::array();
      for (std::uint32_t r = 0; r < op.num_regions(); ++r) {
        json blocks = json::array();
        for (Block* b : op.region(r)) blocks.push_back(block(*b));
        regions.push_back(std::move(blocks));
      }
      j["regions"] = std::move(regions);
    }
    json results = json::array();
    for (std::uint32_t i = 0; i < op.num_results(); ++i) {
      define(op.result(i));
      results.push_back(type_to_json(op.result_type(i)));
    }
    j["results"] = std::move(results);
    json attrs;
    op.attributes().save(attrs);
    j["attrs"] = std::move(attrs);
    return j;
  }
};

const json& field(const json& obj, const char* key, std::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end())
    throw_error(ErrorKind::InvalidArgument, where, " has no \"", key, "\" field");
  return *it;
}

const json& array_field(const json& obj, const char* key, std::string_view where) {
  const json& v = field(obj, key, where);
  if (!v.is_array())
    throw_error(ErrorKind::InvalidArgument, where, " field \"", key, "\" must be an array, got ",
                json_brief(v));
  return v;
}

struct Loader {
  std::vector<Value> values;  // by id, in definition order
  std::size_t op_count = 0;

  void block(const json& j, Block& b) {
    NestingGuard guard(json_load_depth(), "region");
    if (!j.is_object())
      throw_error(ErrorKind::InvalidArgument, "a block must be an object, got ", json_brief(j));
    for (const json& t : array_field(j, "args", "block")) values.push_back(b.add_argument(type_from_json(t)));
    for (const json& o : array_field(j, "ops", "block")) b.push_back(operation(o));
  }

  Operation* operation(const json& j) {
    std::size_t index = op_count++;
    std::string where = "op #" + std::to_string(index);
    if (!j.is_object())
      throw_error(ErrorKind::InvalidArgument, where, " must be an object, got ", json_brief(j));
    const json& name_j = field(j, "op", where);
    if (!name_j.is_string())
      throw_error(ErrorKind::InvalidArgument, where, " \"op\" must be a string, got ",
                  json_brief(name_j));
    std::string name = name_j.get<std::string>();
    where += " '" + name + "'";
    OpInfo info = IrContext::instance()->find_op(name);
    if (!info) throw_error(ErrorKind::NotFound, where, ": op is not registered");
    try {
      std::vector<Value> operands;
      for (const json& id : array_field(j, "operands", where)) {
        if (!id.is_number_unsigned() || id.get<std::uint64_t>() >= values.size())
          throw_error(ErrorKind::InvalidArgument, "operand #", operands.size(), " refers to value ",
                      json_brief(id), ", which is not defined before it (dangling reference)");
        operands.push_back(values[id.get<std::size_t>()]);
      }
      std::uint32_t num_regions = 0;
      const json* regions = nullptr;
      if (auto it = j.find("regions"); it != j.end()) {
        if (!it->is_array())
          throw_error(ErrorKind::InvalidArgument, "\"regions\" must be an array, got ",
                      json_brief(*it));
        regions = &*it;
        num_regions = static_cast<std::uint32_t>(it->size());
      }
      std::vector<Type> result_types;
      for (const json& t : array_field(j, "results", where)) result_types.push_back(type_from_json(t));
      DictionaryAttribute attrs = DictionaryAttribute::get();
      if (auto it = j.find("attrs"); it != j.end() && !it->is_null())
        attrs = DictionaryAttribute::load(*it);

      attrs = with_attribute_defaults(info, attrs);
      Operation* op = Operation::create(operands, result_types, attrs, info, num_regions);
      struct Owner {  // frees the op if the rest of its loading fails
        Operation* op;
        ~Owner() {
          if (op) {
            op->drop_all_references();
            for (std::uint32_t i = 0; i < op->num_results(); ++i)
              while (auto* u = op->result(i).impl()->first_use()) u->unlink();
            op->erase();
          }
        }
      } owner{op};
      for (std::uint32_t r = 0; r < num_regions; ++r) {
        const json& blocks = (*regions)[r];
        if (!blocks.is_array())
          throw_error(ErrorKind::InvalidArgument, "region #", r, " must be an array of blocks");
        for (const json& b : blocks) block(b, op->region(r).emplace_block());
      }
      for (std::uint32_t i = 0; i < op->num_results(); ++i) values.push_back(op->result(i));
      op->verify();
      owner.op = nullptr;
      return op;
    } catch (const Error& e) {
      if (e.message().rfind("op #", 0) == 0) throw;  // already names an inner op
      throw Error(e.kind(), where + ": " + e.message());
    }
  }
};

}  // namespace

json program_to_json(const Program& p) {
  json params = json::array();
  for (const auto& [name, param] : p.parameters())
    params.push_back(json{{"name", name}, {"type", type_to_json(param.type)}, {"mutable", param.is_mutable}});
  Saver s;
  return json{{"format", "kiln.program"},
              {"version", kProgramFormatVersion},
              {"parameters", std::move(params)},
              {"body", s.block(p.block())}};
}

Program program_from_json(const json& j) {
  if (!j.is_object())
    throw_error(ErrorKind::InvalidArgument, "a program must be a JSON object, got ", json_brief(j));
  auto fmt = j.find("format");
  if (fmt == j.end() || *fmt != "kiln.program")
    throw_error(ErrorKind::InvalidArgument, "not a kiln program: \"format\" should be \"kiln.program\"");
  auto ver = j.find("version");
  if (ver == j.end() || !ver->is_number_integer())
    throw_error(ErrorKind::InvalidArgument, "program has no integer \"version\"");
  if (*ver != kProgramFormatVersion)
    throw_error(ErrorKind::Unimplemented, "program format version ", ver->dump(),
                " is not supported (this kiln reads version ", kProgramFormatVersion, ")");
  Program p;
  for (const json& param : array_field(j, "parameters", "program")) {
    if (!param.is_object())
      throw_error(ErrorKind::InvalidArgument, "a parameter must be an object, got ", json_brief(param));
    const json& name = field(param, "name", "parameter");
    if (!name.is_string() || name.get_ref<const std::string&>().empty())
      throw_error(ErrorKind::InvalidArgument, "parameter name must be a non-empty string, got ",
                  json_brief(name));
    const std::string& n = name.get_ref<const std::string&>();
    if (p.has_parameter(n))
      throw_error(ErrorKind::AlreadyExists, "parameter '", n, "' is listed twice");
    Parameter pr;
    try {
      pr.type = type_from_json(field(param, "type", "parameter '" + n + "'"));
    } catch (const Error& e) {
      throw Error(e.kind(), "parameter '" + n + "': " + e.message());
    }
    if (auto m = param.find("mutable"); m != param.end()) {
      if (!m->is_boolean())
        throw_error(ErrorKind::InvalidArgument, "parameter '", n, "' \"mutable\" must be a bool");
      pr.is_mutable = m->get<bool>();
    }
    p.set_parameter(n, pr);
  }
  Loader l;
  const json& body = field(j, "body", "program");
  l.block(body, p.block());
  p.verify();
  return p;
}

std::string save_program_json(const Program& p, int indent) {
  json j = program_to_json(p);
  try {
    return j.dump(indent, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception& e) {  // JSON strings must be UTF-8
    throw_error(ErrorKind::InvalidArgument,
                "cannot save program: a string (attribute, dictionary key or parameter name) is "
                "not valid UTF-8: ", e.what());
  }
}

Program load_program_json(std::string_view text) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw_error(ErrorKind::InvalidArgument, "malformed program JSON: ", e.what());
  }
  try {
    return program_from_json(j);
  } catch (const json::exception& e) {  // a JSON access we did not guard
    throw_error(ErrorKind::InvalidArgument, "bad program JSON: ", e.what());
  }
}

void save_program_file(const Program& p, const std::string& path) {
  std::string text = save_program_json(p, 1);  // may throw: nothing is written yet
  write_file_atomic(path, text, "program file");
}

Program load_program_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorKind::NotFound, "cannot open program file '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return load_program_json(ss.str());
  } catch (const Error& e) {
    throw Error(e.kind(), "program file '" + path + "': " + e.message());
  }
}

std::uint64_t content_hash(const Program& p) { return xxh64(save_program_json(p)); }

}  // namespace kiln
