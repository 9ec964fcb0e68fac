// The JSON form of types and attributes (nlohmann_json): a type is its kind's
// name, or {"kind": parameters} for a parametric one; an attribute is
// {"kind": value}. Each kind saves and loads its own parameters
// (TypeStorage / AttributeStorage's save and load, kiln/ir/storage.h); the
// program format (kiln/io/json.h) is built on these. Loading reports bad
// input as kiln::Error naming what was wrong.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "kiln/ir/attribute.h"
#include "kiln/ir/type.h"

namespace kiln {

nlohmann::json type_to_json(Type t);
Type type_from_json(const nlohmann::json& j);
nlohmann::json attribute_to_json(Attribute a);
Attribute attribute_from_json(const nlohmann::json& j);

// A short description of a JSON value for error messages (never the whole
// document).
std::string json_brief(const nlohmann::json& j);

// How deep the JSON loaders of this thread are in nested types, attributes
// and regions (kiln/support/nesting_guard.h bounds it; the program loader
// shares it).
int& json_load_depth();

}  // namespace kiln
