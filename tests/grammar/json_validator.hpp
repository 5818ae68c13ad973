#pragma once
// A small JSON Schema validator for the tests: the keywords the grammar compiler honours,
// written independently of it (no grammar code), so that "every completed output validates"
// means something. oneOf is checked as JSON Schema defines it (exactly one branch).
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace actorserve::grammar::testing {

class json_validator {
 public:
  using element = simdjson::dom::element;
  using element_type = simdjson::dom::element_type;

  /// What the fuzz target relaxes: oneOf read as anyOf (as the compiler documents it), and
  /// `pattern` left unchecked (std::regex reads UTF-8 bytes, not characters).
  struct options {
    bool one_of_as_any_of = false;
    bool check_patterns = true;
  };

  explicit json_validator(std::string_view schema_json) : json_validator(schema_json, options{}) {}
  json_validator(std::string_view schema_json, options o) : schema_text_(schema_json), options_(o) {
    if (schema_parser_.parse(schema_text_).get(root_)) ok_ = false;
  }

  /// Whether `instance_json` parses and validates; `why` says what failed.
  bool valid(std::string_view instance_json, std::string* why = nullptr) {
    std::string reason;
    simdjson::padded_string text(instance_json);
    element doc;
    bool ok = ok_;
    if (!ok) reason = "the schema does not parse";
    else if (instance_parser_.parse(text).get(doc)) ok = false, reason = "the output is not JSON";
    else ok = check(doc, root_, reason, 0);
    if (why) *why = reason;
    return ok;
  }

  static size_t code_points(std::string_view s) {
    size_t n = 0;
    for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
  }

 private:
  static bool fail(std::string& why, std::string what) {
    why = std::move(what);
    return false;
  }

  static bool is_type(element v, std::string_view t) {
    switch (v.type()) {
      case element_type::NULL_VALUE: return t == "null";
      case element_type::BOOL: return t == "boolean";
      case element_type::STRING: return t == "string";
      case element_type::ARRAY: return t == "array";
      case element_type::OBJECT: return t == "object";
      case element_type::INT64:
      case element_type::UINT64: return t == "integer" || t == "number";
      case element_type::DOUBLE: return t == "number" || (t == "integer" && std::floor(double(v)) == double(v));
      default: return false;
    }
  }

  static double number(element v) {
    if (v.type() == element_type::INT64) return double(int64_t(v));
    if (v.type() == element_type::UINT64) return double(uint64_t(v));
    return double(v);
  }

  static bool equal(element a, element b) { return simdjson::minify(a) == simdjson::minify(b); }

  static bool format_ok(std::string_view f, const std::string& s) {
    auto digits = [&](size_t at, size_t n) {
      if (at + n > s.size()) return -1;
      int v = 0;
      for (size_t i = at; i < at + n; ++i) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
      }
      return v;
    };
    auto date_ok = [&](const std::string& d) {
      static const std::regex re("^[0-9]{4}-[0-9]{2}-[0-9]{2}$");
      if (!std::regex_match(d, re)) return false;
      const int y = std::stoi(d.substr(0, 4)), m = std::stoi(d.substr(5, 2)), day = std::stoi(d.substr(8, 2));
      const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
      const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
      return m >= 1 && m <= 12 && day >= 1 && day <= days[m - 1];
    };
    auto time_ok = [&](const std::string& t) {
      static const std::regex re("^([0-9]{2}):([0-9]{2}):([0-9]{2})(\\.[0-9]+)?(Z|[+-]([0-9]{2}):([0-9]{2}))$");
      std::smatch m;
      if (!std::regex_match(t, m, re)) return false;
      if (std::stoi(m[1]) > 23 || std::stoi(m[2]) > 59 || std::stoi(m[3]) > 59) return false;
      if (m[6].matched && (std::stoi(m[6]) > 23 || std::stoi(m[7]) > 59)) return false;
      return true;
    };
    (void)digits;
    if (f == "date") return date_ok(s);
    if (f == "time") return time_ok(s);
    if (f == "date-time") {
      const size_t t = s.find('T');
      return t != std::string::npos && date_ok(s.substr(0, t)) && time_ok(s.substr(t + 1));
    }
    if (f == "uuid") {
      static const std::regex re("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$");
      return std::regex_match(s, re);
    }
    auto label_ok = [](const std::string& l) {
      if (l.empty() || l.size() > 63 || l.front() == '-' || l.back() == '-') return false;
      for (char c : l)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
      return true;
    };
    auto labels = [&](const std::string& h, size_t min_labels) {
      size_t count = 0, start = 0;
      while (true) {
        const size_t dot = h.find('.', start);
        if (!label_ok(h.substr(start, dot - start))) return false;
        ++count;
        if (dot == std::string::npos) break;
        start = dot + 1;
      }
      return count >= min_labels && h.size() <= 253;
    };
    if (f == "hostname") return labels(s, 1);
    if (f == "email") {
      const size_t at = s.find('@');
      if (at == std::string::npos || at == 0 || s.find('@', at + 1) != std::string::npos) return false;
      const std::string local = s.substr(0, at);
      if (local.front() == '.' || local.back() == '.' || local.find("..") != std::string::npos) return false;
      for (char c : local)
        if (!std::isalnum(static_cast<unsigned char>(c)) && std::string_view("!#$%&'*+/=?^_`{|}~-.").find(c) == std::string_view::npos)
          return false;
      return labels(s.substr(at + 1), 2);
    }
    if (f == "ipv4") {
      static const std::regex re("^(0|[1-9][0-9]{0,2})\\.(0|[1-9][0-9]{0,2})\\.(0|[1-9][0-9]{0,2})\\.(0|[1-9][0-9]{0,2})$");
      std::smatch m;
      if (!std::regex_match(s, m, re)) return false;
      for (int i = 1; i <= 4; ++i)
        if (std::stoi(m[i]) > 255) return false;
      return true;
    }
    return false;
  }

  bool resolve(std::string_view ref, element& out) {
    if (ref == "#") {
      out = root_;
      return true;
    }
    return !root_.at_pointer(ref.substr(1)).get(out);
  }

  bool check(element v, element s, std::string& why, int depth) {
    if (depth > 200) return fail(why, "too deep");
    if (s.type() == element_type::BOOL) return bool(s) || fail(why, "false schema");
    simdjson::dom::object o = s;
    element x;
    if (!o["$ref"].get(x)) {
      element target;
      if (!resolve(std::string_view(x), target)) return fail(why, "bad $ref");
      return check(v, target, why, depth + 1);
    }
    if (!o["allOf"].get(x))
      for (element b : simdjson::dom::array(x))
        if (!check(v, b, why, depth + 1)) return false;
    if (!o["anyOf"].get(x)) {
      bool any = false;
      std::string inner;
      for (element b : simdjson::dom::array(x)) any = any || check(v, b, inner, depth + 1);
      if (!any) return fail(why, "anyOf: no branch: " + inner);
    }
    if (!o["oneOf"].get(x)) {
      int n = 0;
      std::string inner;
      for (element b : simdjson::dom::array(x)) n += check(v, b, inner, depth + 1);
      if (n != 1 && !(options_.one_of_as_any_of && n > 1))
        return fail(why, "oneOf: " + std::to_string(n) + " branches: " + inner);
    }
    if (!o["type"].get(x)) {
      bool ok = false;
      if (x.type() == element_type::STRING) ok = is_type(v, std::string_view(x));
      else
        for (element t : simdjson::dom::array(x)) ok = ok || is_type(v, std::string_view(t));
      if (!ok) return fail(why, "type: " + simdjson::minify(v) + " is not " + simdjson::minify(x));
    }
    if (!o["const"].get(x) && !equal(v, x)) return fail(why, "const");
    if (!o["enum"].get(x)) {
      bool ok = false;
      for (element e : simdjson::dom::array(x)) ok = ok || equal(v, e);
      if (!ok) return fail(why, "enum: " + simdjson::minify(v));
    }
    if (v.type() == element_type::STRING) {
      const std::string str{std::string_view(v)};
      const size_t len = code_points(str);
      if (!o["minLength"].get(x) && len < static_cast<size_t>(number(x))) return fail(why, "minLength");
      if (!o["maxLength"].get(x) && len > static_cast<size_t>(number(x))) return fail(why, "maxLength: " + str);
      if (options_.check_patterns && !o["pattern"].get(x)) {
        std::regex re{std::string(std::string_view(x)), std::regex::ECMAScript};
        if (!std::regex_search(str, re)) return fail(why, "pattern: " + str);
      }
      if (!o["format"].get(x) && !format_ok(std::string_view(x), str)) return fail(why, "format: " + str);
    }
    if (v.type() == element_type::INT64 || v.type() == element_type::UINT64 || v.type() == element_type::DOUBLE) {
      const double d = number(v);
      // Draft 4: exclusiveMinimum / exclusiveMaximum are booleans that make minimum / maximum strict.
      auto strict = [&](std::string_view key) {
        element b;
        return !o[key].get(b) && b.type() == element_type::BOOL && bool(b);
      };
      auto bound = [&](std::string_view key, element& out) { return !o[key].get(out) && out.type() != element_type::BOOL; };
      if (bound("minimum", x) && (strict("exclusiveMinimum") ? d <= number(x) : d < number(x))) return fail(why, "minimum");
      if (bound("maximum", x) && (strict("exclusiveMaximum") ? d >= number(x) : d > number(x))) return fail(why, "maximum");
      if (bound("exclusiveMinimum", x) && d <= number(x)) return fail(why, "exclusiveMinimum");
      if (bound("exclusiveMaximum", x) && d >= number(x)) return fail(why, "exclusiveMaximum");
    }
    if (v.type() == element_type::ARRAY) {
      simdjson::dom::array arr = v;
      const size_t n = arr.size();
      if (!o["minItems"].get(x) && n < static_cast<size_t>(number(x))) return fail(why, "minItems");
      if (!o["maxItems"].get(x) && n > static_cast<size_t>(number(x))) return fail(why, "maxItems");
      // prefixItems + items (2020-12), or items as a list + additionalItems (draft 7).
      size_t prefix = 0;
      element p, rest;
      bool has_rest = false;
      if (!o["prefixItems"].get(p)) {
        prefix = simdjson::dom::array(p).size();
        has_rest = !o["items"].get(rest);
      } else if (!o["items"].get(p) && p.type() == element_type::ARRAY) {
        prefix = simdjson::dom::array(p).size();
        has_rest = !o["additionalItems"].get(rest);
      } else {
        has_rest = !o["items"].get(rest);
      }
      size_t i = 0;
      for (element item : arr) {
        if (i < prefix) {
          if (!check(item, simdjson::dom::array(p).at(i).value(), why, depth + 1)) return false;
        } else if (has_rest && !check(item, rest, why, depth + 1)) {
          return false;
        }
        ++i;
      }
    }
    if (v.type() == element_type::OBJECT) {
      simdjson::dom::object obj = v;
      element props, extra;
      const bool has_props = !o["properties"].get(props);
      const bool has_extra = !o["additionalProperties"].get(extra);
      if (!o["required"].get(x))
        for (element r : simdjson::dom::array(x))
          if (obj[std::string_view(r)].error()) return fail(why, "required: " + std::string(std::string_view(r)));
      std::vector<std::string> seen;
      for (auto [key, value] : obj) {
        const std::string k(key);
        element ps;
        const bool listed = has_props && !simdjson::dom::object(props)[key].get(ps);
        // JSON allows a repeated name (parsers keep the last); a listed property must not repeat.
        if (listed && std::find(seen.begin(), seen.end(), k) != seen.end()) return fail(why, "duplicate key " + k);
        seen.push_back(k);
        if (listed) {
          if (!check(value, ps, why, depth + 1)) return false;
        } else if (has_extra && !check(value, extra, why, depth + 1)) {
          return fail(why, "additionalProperties: " + k + ": " + why);
        }
      }
    }
    return true;
  }

  simdjson::padded_string schema_text_;
  options options_;
  simdjson::dom::parser schema_parser_;
  simdjson::dom::parser instance_parser_;
  element root_;
  bool ok_ = true;
};

}  // namespace actorserve::grammar::testing
