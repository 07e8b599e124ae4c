#include "compute/constrain/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <tuple>
#include <map>
#include <set>

#include "compute/constrain/json_ranges.h"
#include "compute/constrain/json_syntax.h"
#include "shared/util/error.h"

namespace waste::constrain {

namespace {

using ojson = nlohmann::ordered_json;

// Keywords that do not change validity.
const std::set<std::string, std::less<>> kAnnotations = {
    "title",    "description", "$schema",  "$id",      "$comment",         "default",         "examples",
    "deprecated", "readOnly",  "writeOnly", "$anchor", "contentMediaType", "contentEncoding", "$defs",
    "definitions"};
// Keywords this compiler enforces.
const std::set<std::string, std::less<>> kSupported = {
    "type",     "enum",      "const",     "properties", "required",  "additionalProperties", "items",
    "minItems", "maxItems",  "minLength", "maxLength",  "format",    "anyOf",                "oneOf",
    "allOf",    "$ref",      "uniqueItems", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

std::string pointer_escape(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const ojson& root, std::string where) : root_(root), where_(where), b_(std::move(where)) {}

  std::shared_ptr<const Grammar> compile() {
    const uint32_t root = ref_rule("", "", 0);
    return b_.finish(root);
  }

  // The grammar of {"type": "json_object"} / any value: the rule bodies below, no schema.
  std::shared_ptr<const Grammar> any_object() {
    const uint32_t r = b_.declare_rule("json_object");
    b_.define_rule(r, map_expr(e_call(any_rule())));
    return b_.finish(r);
  }
  std::shared_ptr<const Grammar> any_value() { return b_.finish(any_rule()); }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& msg) const {
    throw Error(where_ + path + ": " + msg);
  }

  uint32_t count(const ojson& s, const std::string& path, const char* key, uint32_t bound, uint32_t dflt) const {
    auto it = s.find(key);
    if (it == s.end()) return dflt;
    const std::string p = path + "/" + key;
    const double v = it->is_number() ? it->get<double>() : -1;
    if (v < 0 || v != std::floor(v)) fail(p, std::string("\"") + key + "\" must be a non-negative integer");
    if (v > bound) fail(p, std::string("\"") + key + "\" of " + it->dump() + " is above the supported " + std::to_string(bound));
    return uint32_t(v);
  }

  // The JSON value any schema node allows.
  ExprPtr value(const ojson& s, const std::string& path, uint32_t depth) {
    if (depth > kMaxSchemaDepth) fail(path, "the schema is nested deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
    if (++nodes_ > kMaxSchemaNodes) fail(path, "the schema has more than " + std::to_string(kMaxSchemaNodes) + " nodes");
    if (s.is_boolean()) return s.get<bool>() ? e_call(any_rule()) : e_nothing();
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean, not " + std::string(s.type_name()));
    std::vector<std::string> validity;  // validity keywords present, for the "beside" checks
    for (const auto& [k, v] : s.items()) {
      if (kAnnotations.count(k) || k.rfind("x-", 0) == 0) continue;
      if (!kSupported.count(k)) fail(path, "unsupported keyword \"" + k + "\"");
      validity.push_back(k);
    }
    if (validity.empty()) return e_call(any_rule());  // {} and annotations only: any value
    auto alone = [&](const char* kw) {
      for (const std::string& k : validity)
        if (k != kw) fail(path, "keyword \"" + k + "\" beside \"" + kw + "\" is not supported");
    };
    if (s.contains("$ref")) {
      alone("$ref");
      const ojson& r = s["$ref"];
      if (!r.is_string()) fail(path + "/$ref", "\"$ref\" must be a string");
      return e_call(ref_rule(r.get<std::string>(), path + "/$ref", depth));
    }
    if (s.contains("allOf")) {
      alone("allOf");
      const ojson& a = s["allOf"];
      if (!a.is_array() || a.empty()) fail(path + "/allOf", "\"allOf\" must be a non-empty array");
      if (a.size() > 1) fail(path + "/allOf", "\"allOf\" with more than one schema is not supported");
      return value(a[0], path + "/allOf/0", depth + 1);
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (!s.contains(kw)) continue;
      // oneOf is generated as anyOf: an output matching two branches would break oneOf, so
      // overlapping branches are the schema author's responsibility (docs/CONSTRAIN.md).
      alone(kw);
      const ojson& a = s[kw];
      const std::string p = path + "/" + kw;
      if (!a.is_array() || a.empty()) fail(p, std::string("\"") + kw + "\" must be a non-empty array");
      std::vector<ExprPtr> alts;
      for (size_t i = 0; i < a.size(); ++i) alts.push_back(value(a[i], p + "/" + std::to_string(i), depth + 1));
      return e_alt(std::move(alts));
    }
    const std::vector<std::string> types = type_list(s, path);
    if (s.contains("enum") || s.contains("const")) return enum_expr(s, path, types, validity);
    std::vector<ExprPtr> alts;
    for (const std::string& t : types) alts.push_back(type_expr(t, s, path, depth));
    return e_alt(std::move(alts));
  }

  // "type" as a list; without it, the types whose keywords appear (any type if none do).
  std::vector<std::string> type_list(const ojson& s, const std::string& path) const {
    static const std::vector<std::string> kAll = {"object", "array", "string", "number", "boolean", "null"};
    std::vector<std::string> out;
    auto it = s.find("type");
    if (it != s.end()) {
      std::vector<ojson> names;
      if (it->is_string()) names.push_back(*it);
      else if (it->is_array() && !it->empty()) names.assign(it->begin(), it->end());
      else fail(path + "/type", "\"type\" must be a type name or a non-empty array of them");
      for (const ojson& n : names) {
        static const std::set<std::string> known = {"object", "array", "string", "number", "integer", "boolean", "null"};
        if (!n.is_string() || !known.count(n.get<std::string>()))
          fail(path + "/type", "unknown type " + n.dump());
        out.push_back(n.get<std::string>());
      }
      // "number" covers "integer".
      if (std::count(out.begin(), out.end(), "number")) std::erase(out, std::string("integer"));
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
      return out;
    }
    if (s.contains("enum") || s.contains("const")) return kAll;
    for (const char* k : {"properties", "required", "additionalProperties"})
      if (s.contains(k)) out.push_back("object");
    for (const char* k : {"items", "minItems", "maxItems", "uniqueItems"})
      if (s.contains(k)) out.push_back("array");
    for (const char* k : {"minLength", "maxLength", "format"})
      if (s.contains(k)) out.push_back("string");
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(k)) out.push_back("number");
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out.empty() ? kAll : out;
  }

  static bool has_type(const ojson& v, const std::vector<std::string>& types) {
    for (const std::string& t : types) {
      if (t == "null" && v.is_null()) return true;
      if (t == "boolean" && v.is_boolean()) return true;
      if (t == "string" && v.is_string()) return true;
      if (t == "number" && v.is_number()) return true;
      if (t == "integer" && (v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()))))
        return true;
      if (t == "object" && v.is_object()) return true;
      if (t == "array" && v.is_array()) return true;
    }
    return false;
  }

  ExprPtr enum_expr(const ojson& s, const std::string& path, const std::vector<std::string>& types,
                    const std::vector<std::string>& validity) {
    for (const std::string& k : validity)
      if (k != "enum" && k != "const" && k != "type")
        fail(path, "keyword \"" + k + "\" beside \"enum\"/\"const\" is not supported");
    std::vector<ojson> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      const ojson& e = s["enum"];
      if (!e.is_array() || e.empty()) fail(path + "/enum", "\"enum\" must be a non-empty array");
      if (e.size() > kMaxEnumValues) fail(path + "/enum", "more than " + std::to_string(kMaxEnumValues) + " enum values");
      if (s.contains("const")) {
        // Both: the const, if the enum has it.
        bool in = false;
        for (const ojson& v : e) in = in || v == s["const"];
        if (!in) values.clear();
      } else {
        values.assign(e.begin(), e.end());
      }
    }
    std::vector<ExprPtr> alts;
    size_t bytes = 0;
    for (const ojson& v : values) {
      if (!has_type(v, types)) continue;  // "type" excludes it
      std::string text;
      try {
        text = v.dump();
      } catch (const nlohmann::json::exception&) {
        fail(path, "an enum/const value is not valid UTF-8");
      }
      bytes += text.size();
      if (bytes > kMaxEnumBytes) fail(path + "/enum", "enum values longer than " + std::to_string(kMaxEnumBytes) + " bytes");
      alts.push_back(e_literal(text));
    }
    return e_alt(std::move(alts));
  }

  ExprPtr type_expr(const std::string& t, const ojson& s, const std::string& path, uint32_t depth) {
    if (t == "null") return e_literal("null");
    if (t == "boolean") return e_alt({e_literal("true"), e_literal("false")});
    if (t == "integer" || t == "number") return number_expr(t == "integer", s, path);
    if (t == "string") return string_expr(s, path);
    if (t == "array") return array_expr(s, path, depth);
    return object_expr(s, path, depth);
  }

  // minimum / maximum / exclusive*: integers take any bounds (rounded inwards); numbers take
  // integer minimum / maximum (then no exponent is generated).
  ExprPtr number_expr(bool integer, const ojson& s, const std::string& path) {
    std::optional<double> lo, hi;
    bool lo_excl = false, hi_excl = false;
    auto num = [&](const char* k) -> std::optional<double> {
      if (!s.contains(k)) return std::nullopt;
      const ojson& v = s[k];
      if (v.is_boolean()) return std::nullopt;  // draft 4 exclusive flags, read below
      if (!v.is_number()) fail(path + "/" + k, std::string("\"") + k + "\" must be a number");
      return v.get<double>();
    };
    lo = num("minimum");
    hi = num("maximum");
    for (auto [k, bound, excl, is_lo] : {std::tuple{"exclusiveMinimum", &lo, &lo_excl, true},
                                         std::tuple{"exclusiveMaximum", &hi, &hi_excl, false}}) {
      if (!s.contains(k)) continue;
      const ojson& v = s[k];
      if (v.is_boolean()) {
        *excl = *excl || v.get<bool>();
        continue;
      }
      const std::optional<double> x = num(k);
      // The stricter of minimum and exclusiveMinimum (maximum and exclusiveMaximum).
      if (!*bound || (is_lo ? *x >= **bound : *x <= **bound)) {
        *bound = x;
        *excl = true;
      }
    }
    if (!lo && !hi) return integer ? json::integer() : json::number();
    const double big = double(json::kMaxAbsInteger) + 1;
    auto clamp = [&](double v) { return int64_t(std::max(-big, std::min(big, v))); };
    if (integer) {
      std::optional<int64_t> a, b;
      if (lo) a = clamp(lo_excl ? std::floor(*lo) + 1 : std::ceil(*lo));
      if (hi) b = clamp(hi_excl ? std::ceil(*hi) - 1 : std::floor(*hi));
      return json::integer_range(a, b);
    }
    if (lo_excl || hi_excl)
      fail(path, "exclusive bounds on a \"number\" are not supported (on an \"integer\" they are)");
    for (const auto& [k, v] : {std::pair{"minimum", lo}, std::pair{"maximum", hi}})
      if (v && *v != std::floor(*v))
        fail(path + "/" + k, std::string("a non-integer \"") + k + "\" on a \"number\" is not supported");
    return json::number_range(lo ? std::optional<int64_t>(clamp(*lo)) : std::nullopt,
                              hi ? std::optional<int64_t>(clamp(*hi)) : std::nullopt);
  }

  ExprPtr string_expr(const ojson& s, const std::string& path) {
    if (s.contains("format")) {
      const ojson& f = s["format"];
      if (!f.is_string()) fail(path + "/format", "\"format\" must be a string");
      const ExprPtr body = json::format_body(f.get<std::string>());
      if (!body) fail(path + "/format", "unsupported format " + f.dump() + " (supported: date, time, date-time, uuid)");
      if (s.contains("minLength") || s.contains("maxLength"))
        fail(path, "\"format\" together with \"minLength\"/\"maxLength\" is not supported");
      return e_seq({e_byte('"'), body, e_byte('"')});
    }
    const uint32_t lo = count(s, path, "minLength", kMaxLengthBound, 0);
    const uint32_t hi = count(s, path, "maxLength", kMaxLengthBound, kUnbounded);
    if (hi != kUnbounded && hi < lo) return e_nothing();
    return e_call(string_rule(lo, hi));
  }

  ExprPtr array_expr(const ojson& s, const std::string& path, uint32_t depth) {
    if (s.contains("uniqueItems")) {
      const ojson& u = s["uniqueItems"];
      if (!u.is_boolean()) fail(path + "/uniqueItems", "\"uniqueItems\" must be a boolean");
      if (u.get<bool>()) fail(path + "/uniqueItems", "\"uniqueItems\": true is not supported");
    }
    const uint32_t lo = count(s, path, "minItems", kMaxItemsBound, 0);
    const uint32_t hi = count(s, path, "maxItems", kMaxItemsBound, kUnbounded);
    if (hi != kUnbounded && hi < lo) return e_nothing();
    ExprPtr item;
    if (!s.contains("items")) {
      item = e_call(any_rule());
    } else {
      const ojson& it = s["items"];
      if (it.is_array()) fail(path + "/items", "\"items\" as an array (a tuple) is not supported");
      item = value(it, path + "/items", depth + 1);
    }
    return array_of(item, lo, hi, path + "/items");
  }

  // "[" items "]": the item inline when small (a bounded repeat copies it), else its own rule.
  ExprPtr array_of(ExprPtr item, uint32_t lo, uint32_t hi, const std::string& name) {
    const ExprPtr ws = json::whitespace();
    if (hi == 0 || item->kind == Expr::Kind::Nothing) {
      if (lo > 0) return e_nothing();
      return e_seq({e_byte('['), ws, e_byte(']')});
    }
    const uint64_t copies = hi == kUnbounded ? uint64_t(lo) + 2 : uint64_t(hi) + 1;
    if (item->kind != Expr::Kind::Call && copies * expr_size(*item) > kInlineItemStates) {
      const uint32_t r = b_.declare_rule(name);
      b_.define_rule(r, item);
      item = e_call(r);
    }
    const ExprPtr more = e_repeat(e_seq({ws, e_byte(','), ws, item}), lo > 0 ? lo - 1 : 0,
                                  hi == kUnbounded ? kUnbounded : hi - 1);
    const ExprPtr elements = e_seq({item, more, ws});
    return e_seq({e_byte('['), ws, lo == 0 ? e_opt(elements) : elements, e_byte(']')});
  }

  ExprPtr object_expr(const ojson& s, const std::string& path, uint32_t depth) {
    std::vector<std::string> required;
    if (s.contains("required")) {
      const ojson& r = s["required"];
      if (!r.is_array()) fail(path + "/required", "\"required\" must be an array of strings");
      for (const ojson& n : r) {
        if (!n.is_string()) fail(path + "/required", "\"required\" must be an array of strings");
        required.push_back(n.get<std::string>());
      }
    }
    const ojson* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (extra && !extra->is_boolean() && !extra->is_object())
      fail(path + "/additionalProperties", "\"additionalProperties\" must be a schema");
    if (!s.contains("properties")) {
      if (!required.empty())
        fail(path + "/required", "required property \"" + required[0] + "\" is not in \"properties\"");
      // No listed properties: any object, or a map of the additionalProperties schema.
      if (extra && extra->is_boolean() && !extra->get<bool>()) return e_object({}, json::whitespace());
      if (!extra || extra->is_boolean()) return map_expr(e_call(any_rule()));
      ExprPtr v = value(*extra, path + "/additionalProperties", depth + 1);
      if (v->kind != Expr::Kind::Call && v->kind != Expr::Kind::Nothing) {
        const uint32_t r = b_.declare_rule(path + "/additionalProperties");
        b_.define_rule(r, v);
        v = e_call(r);
      }
      return map_expr(v);
    }
    const ojson& props = s["properties"];
    if (!props.is_object()) fail(path + "/properties", "\"properties\" must be an object");
    if (props.size() > kMaxProperties)
      fail(path + "/properties", "more than " + std::to_string(kMaxProperties) + " properties");
    for (const std::string& r : required)
      if (!props.contains(r)) fail(path + "/required", "required property \"" + r + "\" is not in \"properties\"");
    // Properties beyond the listed ones are never generated: valid whatever additionalProperties says.
    std::vector<ObjectField> fields;
    for (const auto& [name, sub] : props.items()) {
      ObjectField f;
      try {
        f.key = ojson(name).dump();
      } catch (const nlohmann::json::exception&) {
        fail(path + "/properties", "a property name is not valid UTF-8");
      }
      f.value = value(sub, path + "/properties/" + pointer_escape(name), depth + 1);
      f.required = std::find(required.begin(), required.end(), name) != required.end();
      fields.push_back(std::move(f));
    }
    return e_object(std::move(fields), json::whitespace());
  }

  // "{" ("string": value ("," "string": value)*)? "}" with any keys.
  ExprPtr map_expr(ExprPtr v) {
    const ExprPtr ws = json::whitespace();
    const ExprPtr member = e_seq({e_call(string_rule(0, kUnbounded)), ws, e_byte(':'), ws, v});
    const ExprPtr members = e_seq({member, e_repeat(e_seq({ws, e_byte(','), ws, member}), 0, kUnbounded), ws});
    return e_seq({e_byte('{'), ws, e_opt(members), e_byte('}')});
  }

  // Strings as rules, one per (minLength, maxLength). A bounded one is a chain of one state per
  // character position; its multi-byte characters and escapes (about 30 automaton states each)
  // are a call to one shared rule, so maxLength 4096 costs ~4k states rather than ~150k.
  uint32_t string_rule(uint32_t lo, uint32_t hi) {
    auto it = strings_.find({lo, hi});
    if (it != strings_.end()) return it->second;
    const uint32_t r = b_.declare_rule("string{" + std::to_string(lo) + "," +
                                       (hi == kUnbounded ? std::string() : std::to_string(hi)) + "}");
    strings_.emplace(std::make_pair(lo, hi), r);
    if (lo == 0 && hi == kUnbounded) {
      b_.define_rule(r, json::string_body(0, kUnbounded));
    } else {
      if (long_char_ == kNone) {
        long_char_ = b_.declare_rule("string character");
        b_.define_rule(long_char_, json::long_char());
      }
      const ExprPtr c = e_alt({json::ascii_char(), e_call(long_char_)});
      b_.define_rule(r, e_seq({e_byte('"'), e_repeat(c, lo, hi), e_byte('"')}));
    }
    return r;
  }

  // Any JSON value: objects and arrays call it again for their members (nesting bounded by the
  // parse stack, kMaxStackDepth).
  uint32_t any_rule() {
    if (any_ != kNone) return any_;
    any_ = b_.declare_rule("any value");
    const ExprPtr ws = json::whitespace();
    const ExprPtr v = e_call(any_);
    const ExprPtr arr = e_seq({e_byte('['), ws, e_opt(e_seq({v, e_repeat(e_seq({ws, e_byte(','), ws, v}), 0, kUnbounded), ws})),
                              e_byte(']')});
    b_.define_rule(any_, e_alt({map_expr(v), arr, e_call(string_rule(0, kUnbounded)), json::number(),
                                e_literal("true"), e_literal("false"), e_literal("null")}));
    return any_;
  }

  // A local reference ("#", "#/$defs/x", any "#/json/pointer") as its own rule: compiled once
  // however often it is used, and recursion becomes a call.
  uint32_t ref_rule(const std::string& ref, const std::string& path, uint32_t depth) {
    std::string frag;
    if (!ref.empty()) {
      if (ref[0] != '#') fail(path, "only local references (\"#...\") are supported, not \"" + ref + "\"");
      // URI fragment: percent-decode.
      for (size_t i = 1; i < ref.size(); ++i) {
        if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(uint8_t(ref[i + 1])) && std::isxdigit(uint8_t(ref[i + 2]))) {
          frag += char(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          frag += ref[i];
        }
      }
      if (!frag.empty() && frag[0] != '/') fail(path, "unsupported reference \"" + ref + "\" (anchors are not supported)");
    }
    auto it = refs_.find(frag);
    if (it != refs_.end()) return it->second;
    const ojson* target = &root_;
    if (!frag.empty()) {
      try {
        const ojson::json_pointer p(frag);
        if (!root_.contains(p)) fail(path, "cannot resolve \"" + ref + "\"");
        target = &root_.at(p);
      } catch (const nlohmann::json::exception&) {
        fail(path, "cannot resolve \"" + ref + "\"");
      }
    }
    const uint32_t r = b_.declare_rule("#" + frag);
    refs_.emplace(frag, r);
    b_.define_rule(r, value(*target, frag, depth + 1));
    return r;
  }

  static constexpr uint32_t kNone = UINT32_MAX;
  // Inline an array's item when its copies stay below this many automaton states.
  static constexpr uint64_t kInlineItemStates = 4096;

  const ojson& root_;
  std::string where_;
  GrammarBuilder b_;
  uint32_t nodes_ = 0;
  uint32_t any_ = kNone;
  uint32_t long_char_ = kNone;
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> strings_;
  std::map<std::string, uint32_t> refs_;
};

}  // namespace

std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const std::string& where) {
  return SchemaCompiler(schema, where).compile();
}

std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::json& schema, const std::string& where) {
  return compile_json_schema(nlohmann::ordered_json::parse(schema.dump()), where);
}

std::shared_ptr<const Grammar> any_json_object() {
  static const std::shared_ptr<const Grammar> g = [] {
    static const nlohmann::ordered_json none;
    return SchemaCompiler(none, "json_object").any_object();
  }();
  return g;
}

std::shared_ptr<const Grammar> any_json_value() {
  static const std::shared_ptr<const Grammar> g = [] {
    static const nlohmann::ordered_json none;
    return SchemaCompiler(none, "json value").any_value();
  }();
  return g;
}

}  // namespace waste::constrain
