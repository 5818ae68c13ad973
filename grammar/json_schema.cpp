// JSON Schema -> grammar: keyword checks, $ref, combinators, enum/const, objects and arrays.
// Strings and numbers: json_schema_scalars.cpp.
#include "grammar/json_schema.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "grammar/json_schema_compiler.hpp"

namespace actorserve::grammar {
namespace detail {
namespace {

/// Nesting of schemas the compiler follows.
constexpr int max_depth = 128;

constexpr std::array<std::string_view, 16> annotations{
    "title",   "description", "default",  "examples",         "$schema",         "$id",     "$comment", "deprecated",
    "readOnly", "writeOnly",  "$defs",    "definitions",      "contentMediaType", "contentEncoding", "$anchor", "example"};

struct refused_keyword {
  std::string_view name;
  std::string_view why;
};
constexpr std::array<refused_keyword, 20> refused{{
    {"not", "negation"},
    {"if", "conditional schemas"},
    {"then", "conditional schemas"},
    {"else", "conditional schemas"},
    {"patternProperties", ""},
    {"propertyNames", ""},
    {"minProperties", ""},
    {"maxProperties", ""},
    {"dependentRequired", ""},
    {"dependentSchemas", ""},
    {"dependencies", ""},
    {"contains", ""},
    {"minContains", ""},
    {"maxContains", ""},
    {"multipleOf", ""},
    {"unevaluatedItems", ""},
    {"$dynamicRef", ""},
    {"$recursiveRef", ""},
    {"$dynamicAnchor", ""},
    {"$recursiveAnchor", ""},
}};

enum class group { none, combinator, object, array, string, number };

group group_of(std::string_view key) {
  for (std::string_view k : {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"})
    if (key == k) return group::combinator;
  for (std::string_view k : {"properties", "required", "additionalProperties", "unevaluatedProperties"})
    if (key == k) return group::object;
  for (std::string_view k : {"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "additionalItems"})
    if (key == k) return group::array;
  for (std::string_view k : {"minLength", "maxLength", "pattern", "format"})
    if (key == k) return group::string;
  for (std::string_view k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
    if (key == k) return group::number;
  return group::none;
}

bool is_annotation(std::string_view key) {
  return std::find(annotations.begin(), annotations.end(), key) != annotations.end();
}

/// Whether a JSON value is an instance of a type name.
bool has_type(element v, std::string_view type) {
  switch (v.type()) {
    case element_type::NULL_VALUE: return type == "null";
    case element_type::BOOL: return type == "boolean";
    case element_type::STRING: return type == "string";
    case element_type::ARRAY: return type == "array";
    case element_type::OBJECT: return type == "object";
    case element_type::INT64:
    case element_type::UINT64: return type == "integer" || type == "number";
    case element_type::DOUBLE: {
      const double d = double(v);
      return type == "number" || (type == "integer" && std::floor(d) == d);
    }
    default: return false;
  }
}

std::string child(const std::string& where, std::string_view key) {
  std::string k;
  for (char c : key) {
    if (c == '~') k += "~0";
    else if (c == '/') k += "~1";
    else k.push_back(c);
  }
  return where + "/" + k;
}

}  // namespace

error schema_compiler::unsupported(const std::string& where, std::string_view keyword, std::string_view why) const {
  return make_error(error_code::unsupported, fmt::format("{}: the keyword '{}' (at {}) is not supported{}{}", field_,
                                                         keyword, where, why.empty() ? "" : ": ", why));
}

error schema_compiler::invalid(const std::string& where, std::string_view keyword, std::string_view why) const {
  return make_error(error_code::invalid_argument, fmt::format("{}: '{}' (at {}): {}", field_, keyword, where, why));
}

result<int64_t> schema_compiler::count(object s, std::string_view keyword, const std::string& where) const {
  element v;
  if (s[keyword].get(v)) return int64_t{-1};
  int64_t n = -1;
  if (v.type() == element_type::INT64) n = int64_t(v);
  else if (v.type() == element_type::UINT64) n = uint64_t(v) > uint64_t{1} << 62 ? int64_t{1} << 62 : int64_t(uint64_t(v));
  else if (v.type() == element_type::DOUBLE && std::floor(double(v)) == double(v) && double(v) < 1e18) n = int64_t(double(v));
  else return invalid(where, keyword, "expected a non-negative integer");
  if (n < 0) return invalid(where, keyword, "expected a non-negative integer");
  if (n > max_schema_bound)
    return unsupported(where, keyword, fmt::format("bounds above {} are not supported", max_schema_bound));
  return n;
}

result<expr> schema_compiler::compile_document(std::string_view text) {
  simdjson::padded_string padded(text);
  if (auto err = parser_.parse(padded).get(root_); err)
    return make_error(error_code::invalid_argument,
                      fmt::format("{}: the schema is not valid JSON ({})", field_, simdjson::error_message(err)));
  // NOTE: `padded` dies here but the parser keeps its own copy of the document's strings.
  return compile(root_, "#", 0);
}

result<expr> schema_compiler::compile(element s, const std::string& where, int depth) {
  if (depth > max_depth) return unsupported(where, "$ref", "schemas nested more than 128 deep");
  if (s.type() == element_type::BOOL) {
    if (bool(s)) return ref(j_.value());
    return invalid(where, "false", "a schema that matches nothing cannot be generated");
  }
  object o;
  if (s.get(o)) return invalid(where, "schema", "a schema must be an object or a boolean");
  return compile_object_schema(o, where, depth);
}

result<expr> schema_compiler::compile_object_schema(object s, const std::string& where, int depth) {
  std::vector<std::string_view> constraining;  // keys other than annotations
  bool groups[6] = {};
  for (auto [key, value] : s) {
    (void)value;
    if (is_annotation(key)) continue;
    for (const auto& r : refused)
      if (r.name == key) return unsupported(where, key, r.why);
    const group g = group_of(key);
    if (g == group::none) return unsupported(where, key, "it is not a keyword this server knows");
    groups[static_cast<int>(g)] = true;
    constraining.push_back(key);
  }
  auto has = [&](std::string_view k) { return std::find(constraining.begin(), constraining.end(), k) != constraining.end(); };
  auto alone = [&](std::string_view k, std::initializer_list<std::string_view> allowed) -> status {
    for (std::string_view other : constraining) {
      if (other == k || std::find(allowed.begin(), allowed.end(), other) != allowed.end()) continue;
      return unsupported(where, k, fmt::format("'{}' beside '{}' is not supported", k, other));
    }
    return {};
  };

  if (has("$ref")) {
    if (auto st = alone("$ref", {}); !st) return st.err();
    std::string_view target;
    if (s["$ref"].get(target)) return invalid(where, "$ref", "expected a string");
    return compile_ref(target, where, depth);
  }
  if (has("allOf")) {
    if (auto st = alone("allOf", {}); !st) return st.err();
    simdjson::dom::array all;
    if (s["allOf"].get(all) || all.size() != 1)
      return unsupported(where, "allOf", "only allOf with exactly one schema is supported");
    return compile(all.at(0).value(), child(where, "allOf") + "/0", depth + 1);
  }
  for (std::string_view comb : {"anyOf", "oneOf"}) {
    if (!has(comb)) continue;
    if (auto st = alone(comb, {}); !st) return st.err();
    simdjson::dom::array branches;
    if (s[comb].get(branches) || branches.size() == 0) return invalid(where, comb, "expected a non-empty array");
    std::vector<expr> alts;
    size_t i = 0;
    for (element b : branches) {
      auto e = compile(b, child(where, comb) + fmt::format("/{}", i++), depth + 1);
      if (!e) return e.err();
      alts.push_back(std::move(*e));
    }
    return alt(std::move(alts));
  }

  // The types this schema allows.
  std::vector<std::string_view> types;
  if (has("type")) {
    element t = s["type"].value();
    if (t.type() == element_type::STRING) {
      types.push_back(std::string_view(t));
    } else if (t.type() == element_type::ARRAY) {
      for (element x : simdjson::dom::array(t)) {
        if (x.type() != element_type::STRING) return invalid(where, "type", "expected a type name or a list of them");
        types.push_back(std::string_view(x));
      }
    } else {
      return invalid(where, "type", "expected a type name or a list of them");
    }
    for (std::string_view t : types)
      if (t != "null" && t != "boolean" && t != "object" && t != "array" && t != "number" && t != "integer" &&
          t != "string")
        return invalid(where, "type", fmt::format("unknown type '{}'", t));
    if (types.empty()) return invalid(where, "type", "an empty list of types matches nothing");
  }

  if (has("const") || has("enum")) {
    const std::string_view k = has("const") ? "const" : "enum";
    if (has("const") && has("enum")) return unsupported(where, "enum", "'enum' beside 'const' is not supported");
    if (auto st = alone(k, {"type"}); !st) return st.err();
    std::vector<element> values;
    if (k == "const") {
      values.push_back(s["const"].value());
    } else {
      simdjson::dom::array arr;
      if (s["enum"].get(arr) || arr.size() == 0) return invalid(where, "enum", "expected a non-empty array");
      for (element v : arr) values.push_back(v);
    }
    std::vector<expr> alts;
    for (element v : values) {
      const bool typed = types.empty() ||
                         std::any_of(types.begin(), types.end(), [&](std::string_view t) { return has_type(v, t); });
      if (!typed) continue;
      auto e = literal(v, where);
      if (!e) return e.err();
      alts.push_back(std::move(*e));
    }
    if (alts.empty()) return invalid(where, k, "no value matches 'type'");
    return alt(std::move(alts));
  }

  if (types.empty()) {
    // No type: the kinds of value the keywords speak of, or any value.
    if (groups[static_cast<int>(group::object)]) types.push_back("object");
    if (groups[static_cast<int>(group::array)]) types.push_back("array");
    if (groups[static_cast<int>(group::string)]) types.push_back("string");
    if (groups[static_cast<int>(group::number)]) types.push_back("number");
    if (types.empty()) return ref(j_.value());
  }
  std::vector<expr> alts;
  for (std::string_view t : types) {
    auto e = compile_type(s, t, where, depth);
    if (!e) return e.err();
    alts.push_back(std::move(*e));
  }
  return alt(std::move(alts));
}

result<expr> schema_compiler::compile_type(object s, std::string_view type, const std::string& where, int depth) {
  if (type == "null") return lit("null");
  if (type == "boolean") return alt({lit("true"), lit("false")});
  if (type == "object") return object_expr(s, where, depth);
  if (type == "array") return array_expr(s, where, depth);
  if (type == "string") return string_expr(s, where);
  return number_expr(s, type == "integer", where);
}

result<expr> schema_compiler::compile_ref(std::string_view target, const std::string& where, int depth) {
  if (target.empty() || target[0] != '#')
    return unsupported(where, "$ref", fmt::format("'{}': only references into the same schema (#...) are supported", target));
  const std::string key(target);
  if (auto it = refs_.find(key); it != refs_.end()) return ref(it->second);
  element resolved;
  if (target == "#") resolved = root_;
  else if (root_.at_pointer(target.substr(1)).get(resolved))
    return invalid(where, "$ref", fmt::format("'{}' does not resolve to a schema", target));
  const rule_id r = b_.declare(fmt::format("ref{}", refs_.size()));
  refs_[key] = r;
  auto body = compile(resolved, key, depth + 1);
  if (!body) return body.err();
  b_.define(r, *body);
  return ref(r);
}

result<expr> schema_compiler::literal(element v, const std::string& where) {
  (void)where;
  return lit(simdjson::minify(v));
}

expr schema_compiler::extra_key(const std::vector<std::string>& known) {
  byte_set alphabet = byte_set::range(0x20, 0x7E);
  alphabet.reset('"');
  alphabet.reset('\\');
  struct trie_node {
    std::map<uint8_t, size_t> children;
    bool terminal = false;
  };
  std::vector<trie_node> trie(1);
  for (const std::string& k : known) {
    if (!std::all_of(k.begin(), k.end(), [&](char c) { return alphabet.test(static_cast<uint8_t>(c)); })) continue;
    size_t at = 0;
    for (char c : k) {
      auto [it, fresh] = trie[at].children.emplace(static_cast<uint8_t>(c), trie.size());
      if (fresh) trie.emplace_back();
      at = it->second;
    }
    trie[at].terminal = true;
  }
  // N(t): the rest of a key (and its closing quote) after the bytes leading to trie node t.
  auto rest = [&](auto&& self, size_t t) -> expr {
    std::vector<expr> alts;
    if (t != 0 && !trie[t].terminal) alts.push_back(byte('"'));
    byte_set other = alphabet;
    for (const auto& [c, next] : trie[t].children) {
      other.reset(c);
      alts.push_back(seq({byte(c), self(self, next)}));
    }
    if (!other.empty()) alts.push_back(seq({bytes(other), star(bytes(alphabet)), byte('"')}));
    return alt(std::move(alts));
  };
  return seq({byte('"'), rest(rest, 0)});
}

result<expr> schema_compiler::object_expr(object s, const std::string& where, int depth) {
  struct property {
    std::string name;
    std::optional<element> schema;  ///< none: any value
    bool required = false;
  };
  std::vector<property> props;
  if (element p; !s["properties"].get(p)) {
    object po;
    if (p.get(po)) return invalid(where, "properties", "expected an object");
    for (auto [name, schema] : po) props.push_back({std::string(name), schema, false});
  }
  enum class extra { none, any, schema } extras = extra::none;
  element extra_schema;
  if (element a; !s["additionalProperties"].get(a)) {
    if (a.type() == element_type::BOOL) extras = bool(a) ? extra::any : extra::none;
    else if (a.type() == element_type::OBJECT) {
      extras = extra::schema;
      extra_schema = a;
    } else {
      return invalid(where, "additionalProperties", "expected a boolean or a schema");
    }
  }
  if (element u; !s["unevaluatedProperties"].get(u)) {
    if (u.type() != element_type::BOOL || bool(u) || extras != extra::none)
      return unsupported(where, "unevaluatedProperties", "only false, without additionalProperties, is supported");
  }
  if (element r; !s["required"].get(r)) {
    simdjson::dom::array ra;
    if (r.get(ra)) return invalid(where, "required", "expected an array of property names");
    for (element n : ra) {
      std::string_view name;
      if (n.get(name)) return invalid(where, "required", "expected an array of property names");
      auto it = std::find_if(props.begin(), props.end(), [&](const property& p) { return p.name == name; });
      if (it != props.end()) {
        it->required = true;
        continue;
      }
      // A required property without a schema of its own: the additional properties' schema.
      if (element a; !s["additionalProperties"].get(a) && a.type() == element_type::BOOL && !bool(a))
        return invalid(where, "required",
                       fmt::format("'{}' is required but not in properties, and additionalProperties is false", name));
      props.push_back({std::string(name), extras == extra::schema ? std::optional<element>(extra_schema) : std::nullopt,
                       true});
    }
  }

  // Members in schema order; an optional member may be left out.
  std::vector<expr> members;
  std::vector<std::string> names;
  for (const property& p : props) {
    expr value = ref(j_.value());
    if (p.schema) {
      auto e = compile(*p.schema, child(child(where, "properties"), p.name), depth + 1);
      if (!e) return e.err();
      value = std::move(*e);
    }
    members.push_back(seq({lit(json_rules::quote(p.name)), json_rules::colon(), std::move(value)}));
    names.push_back(p.name);
  }
  std::optional<expr> extra_member;
  if (extras != extra::none) {
    expr value = ref(j_.value());
    if (extras == extra::schema) {
      auto e = compile(extra_schema, child(where, "additionalProperties"), depth + 1);
      if (!e) return e.err();
      value = std::move(*e);
    }
    extra_member = seq({extra_key(names), json_rules::colon(), std::move(value)});
  }

  const bool all_required = std::all_of(props.begin(), props.end(), [](const property& p) { return p.required; });
  if (all_required && !extra_member) {
    std::vector<expr> items{byte('{')};
    for (size_t i = 0; i < members.size(); ++i) {
      if (i > 0) items.push_back(json_rules::comma());
      items.push_back(members[i]);
    }
    items.push_back(byte('}'));
    return seq(std::move(items));
  }
  // rest_i: members i.. after at least one member; first_i: members i.. with none before.
  expr rest = extra_member ? star(seq({json_rules::comma(), *extra_member})) : empty();
  expr first = extra_member ? opt(seq({*extra_member, rest})) : empty();
  const std::string base = fmt::format("obj{}", next_object_++);
  for (size_t i = members.size(); i-- > 0;) {
    const rule_id rest_rule = b_.add(fmt::format("{}_rest{}", base, i), rest);
    const expr take_rest = seq({json_rules::comma(), members[i], ref(rest_rule)});
    const expr take_first = seq({members[i], ref(rest_rule)});
    if (props[i].required) {
      rest = take_rest;
      first = take_first;
    } else {
      const rule_id first_rule = b_.add(fmt::format("{}_first{}", base, i), first);
      rest = alt({take_rest, ref(rest_rule)});
      first = alt({take_first, ref(first_rule)});
    }
  }
  return seq({byte('{'), first, byte('}')});
}

result<expr> schema_compiler::array_expr(object s, const std::string& where, int depth) {
  std::vector<expr> prefix;
  std::optional<element> rest_schema;
  bool rest_allowed = true;
  auto compile_list = [&](element list, std::string_view key) -> status {
    simdjson::dom::array arr;
    if (list.get(arr)) return invalid(where, key, "expected an array of schemas");
    size_t i = 0;
    for (element e : arr) {
      auto x = compile(e, child(where, key) + fmt::format("/{}", i++), depth + 1);
      if (!x) return x.err();
      prefix.push_back(std::move(*x));
    }
    return {};
  };
  auto take_rest = [&](std::string_view key) -> status {
    element r;
    if (s[key].get(r)) return {};
    if (r.type() == element_type::BOOL && !bool(r)) rest_allowed = false;
    else if (r.type() == element_type::BOOL || r.type() == element_type::OBJECT) rest_schema = r;
    else return invalid(where, key, "expected a schema");
    return {};
  };
  element items;
  const bool has_items = !s["items"].get(items);
  if (element p; !s["prefixItems"].get(p)) {
    if (auto st = compile_list(p, "prefixItems"); !st) return st.err();
    if (auto st = take_rest("items"); !st) return st.err();
  } else if (has_items && items.type() == element_type::ARRAY) {
    if (auto st = compile_list(items, "items"); !st) return st.err();
    if (auto st = take_rest("additionalItems"); !st) return st.err();
  } else {
    if (element a; !s["additionalItems"].get(a))
      return unsupported(where, "additionalItems", "it applies only beside items given as a list");
    if (auto st = take_rest("items"); !st) return st.err();
  }
  if (element u; !s["uniqueItems"].get(u) && !(u.type() == element_type::BOOL && !bool(u)))
    return unsupported(where, "uniqueItems", "only false is supported");
  auto min = count(s, "minItems", where);
  if (!min) return min.err();
  auto max = count(s, "maxItems", where);
  if (!max) return max.err();
  const uint64_t lo = static_cast<uint64_t>(std::max<int64_t>(*min, 0));
  const bool bounded = *max >= 0;
  const uint64_t hi = bounded ? static_cast<uint64_t>(*max) : 0;
  if (bounded && hi < lo) return invalid(where, "maxItems", "is below minItems");
  const uint64_t k = prefix.size();
  if (!rest_allowed && lo > k) return invalid(where, "minItems", "asks for more items than the schema allows");

  expr item = ref(j_.value());
  if (rest_schema) {
    auto e = compile(*rest_schema, child(where, "items"), depth + 1);
    if (!e) return e.err();
    item = std::move(*e);
  }
  // After the prefix (k items written).
  expr tail = empty();
  if (rest_allowed && (!bounded || hi > k)) {
    const uint64_t need = lo > k ? lo - k : 0;
    const uint32_t more = bounded ? static_cast<uint32_t>(hi - k) : expr::unbounded;
    if (k == 0) {
      const uint32_t after_first_max = more == expr::unbounded ? expr::unbounded : more - 1;
      const expr list = seq({item, repeat(seq({json_rules::comma(), item}),
                                          static_cast<uint32_t>(need > 0 ? need - 1 : 0), after_first_max)});
      tail = need > 0 ? list : opt(list);
    } else {
      tail = repeat(seq({json_rules::comma(), item}), static_cast<uint32_t>(need), more);
    }
  }
  // The prefix items, from the last: item i may be left out once lo items are written.
  for (size_t i = prefix.size(); i-- > 0;) {
    if (bounded && i >= hi) continue;  // never reached
    expr take = i == 0 ? seq({prefix[i], tail}) : seq({json_rules::comma(), prefix[i], tail});
    tail = i >= lo ? alt({take, empty()}) : take;
  }
  return seq({byte('['), tail, byte(']')});
}

}  // namespace detail

result<expr> json_schema_expr(json_rules& rules, std::string_view schema_json, std::string_view field) {
  detail::schema_compiler c(rules, field);
  return c.compile_document(schema_json);
}

result<grammar> json_schema_grammar(std::string_view schema_json, std::string_view field) {
  grammar_builder b;
  json_rules j(b);
  auto e = json_schema_expr(j, schema_json, field);
  if (!e) return e.err();
  const rule_id root = b.add("root", *e);
  return b.build(root);
}

}  // namespace actorserve::grammar
