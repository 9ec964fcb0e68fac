#include "kiln/ir/ir_json.h"

#include <nlohmann/json.hpp>

#include "kiln/ir/ir_context.h"
#include "kiln/support/nesting_guard.h"

namespace kiln {

using nlohmann::json;

int& json_load_depth() {
  thread_local int depth = 0;
  return depth;
}

std::string json_brief(const json& j) {
  switch (j.type()) {
    case json::value_t::object: return "an object with " + std::to_string(j.size()) + " keys";
    case json::value_t::array: return "an array of " + std::to_string(j.size()) + " elements";
    case json::value_t::string: {
      const auto& s = j.get_ref<const std::string&>();
      json t = s.size() > 40 ? s.substr(0, 40) + "..." : s;
      return t.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    case json::value_t::discarded: return "nothing";
    default: return j.dump();
  }
}

// ---- types and attributes: {"kind": params}, or "kind" for singletons ----

json type_to_json(Type t) {
  const auto* kind = t.storage()->kind;
  if (!kind->parametric) return kind->name;
  json params;
  kind->save(t.storage(), params);
  return json{{kind->name, std::move(params)}};
}

Type type_from_json(const json& j) {
  NestingGuard guard(json_load_depth(), "type");
  std::string name;
  const json* params = nullptr;
  if (j.is_string()) {
    name = j.get<std::string>();
  } else if (j.is_object() && j.size() == 1) {
    name = j.begin().key();
    params = &j.begin().value();
  } else {
    throw_error(ErrorKind::InvalidArgument,
                "a type is a name or {\"kind\": parameters}, got ", json_brief(j));
  }
  const auto* kind = IrContext::instance()->find_type_kind(name);
  if (!kind) throw_error(ErrorKind::NotFound, "unknown type '", name, "'");
  if (kind->parametric != (params != nullptr))
    throw_error(ErrorKind::InvalidArgument, "type '", name, "' ",
                kind->parametric ? "needs parameters" : "takes no parameters");
  static const json null_json;
  return Type(static_cast<const TypeStorage*>(kind->load(params ? *params : null_json)));
}

json attribute_to_json(Attribute a) {
  const auto* kind = a.storage()->kind;
  json params;
  if (kind->save) kind->save(a.storage(), params);
  return json{{kind->name, std::move(params)}};
}

Attribute attribute_from_json(const json& j) {
  NestingGuard guard(json_load_depth(), "attribute");
  if (!j.is_object() || j.size() != 1)
    throw_error(ErrorKind::InvalidArgument, "an attribute is {\"kind\": value}, got ",
                json_brief(j));
  const std::string& name = j.begin().key();
  const auto* kind = IrContext::instance()->find_attribute_kind(name);
  if (!kind) throw_error(ErrorKind::NotFound, "unknown attribute kind '", name, "'");
  return Attribute(static_cast<const AttributeStorage*>(kind->load(j.begin().value())));
}

}  // namespace kiln
