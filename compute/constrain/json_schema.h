// JSON schema -> grammar, for OpenAI's response_format {"type": "json_schema"} and
// {"type": "json_object"}, and for tool-call arguments. What is supported, refused and why:
// docs/CONSTRAIN.md.
//
// Every keyword that changes which documents are valid is either enforced or refused with a
// waste::Error naming `where`, the JSON pointer of the schema node and the keyword, e.g.
//   response_format.json_schema.schema/properties/age: unsupported keyword "multipleOf"
// Annotations (title, description, $schema, default, examples, ...) are ignored.
// Generation may produce a subset of the valid documents, never a document outside them:
// only the listed properties (additionalProperties absent, true or a schema is treated as false
// when "properties" is given), in the schema's order, compact numbers, bounded whitespace.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "compute/constrain/grammar.h"

namespace waste::constrain {

// Bounds on a schema (each an error past it).
inline constexpr uint32_t kMaxSchemaDepth = 64;       // nested schema objects
inline constexpr uint32_t kMaxSchemaNodes = 10000;    // schema objects compiled
inline constexpr uint32_t kMaxProperties = 256;       // per object
inline constexpr uint32_t kMaxEnumValues = 4096;
inline constexpr uint32_t kMaxEnumBytes = 1u << 20;   // their JSON text together
inline constexpr uint32_t kMaxLengthBound = 4096;     // minLength / maxLength
inline constexpr uint32_t kMaxItemsBound = 1024;      // minItems / maxItems

// Throws Error naming `where` + the schema path for anything unsupported or malformed.
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const std::string& where);
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::json& schema, const std::string& where);
// Any JSON object ({"type": "json_object"}); any JSON value. Built once, shared.
std::shared_ptr<const Grammar> any_json_object();
std::shared_ptr<const Grammar> any_json_value();

}  // namespace waste::constrain
