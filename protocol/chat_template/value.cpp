#include "protocol/chat_template/value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "protocol/chat_template/template_error.hpp"
#include "protocol/chat_template/utf8_text.hpp"

namespace actorserve::protocol::jinja {

void fail(int line, const std::string& what, error_code code) {
  if (line > 0) throw template_error{code, "chat template line " + std::to_string(line) + ": " + what};
  throw template_error{code, "chat template: " + what};
}

const value* value_map::find(std::string_view key) const {
  for (const auto& e : entries) {
    if (e.first == key) return &e.second;
  }
  return nullptr;
}

void value_map::set(std::string_view key, value v) {
  for (auto& e : entries) {
    if (e.first == key) {
      e.second = std::move(v);
      return;
    }
  }
  entries.emplace_back(std::string(key), std::move(v));
}

double value::to_double() const {
  switch (type()) {
    case kind::boolean: return as_bool() ? 1.0 : 0.0;
    case kind::integer: return static_cast<double>(as_int());
    case kind::floating: return as_float();
    default: return 0.0;
  }
}

value from_chat(const chat_value& v) {
  switch (v.type()) {
    case chat_value::kind::null: return value::none();
    case chat_value::kind::boolean: return value(v.as_bool());
    case chat_value::kind::integer: return value(v.as_int());
    case chat_value::kind::number: return value(v.as_double());
    case chat_value::kind::string: return value(v.as_string());
    case chat_value::kind::array: {
      value_list items;
      items.reserve(v.as_array().size());
      for (const auto& item : v.as_array()) items.push_back(from_chat(item));
      return value(std::move(items));
    }
    case chat_value::kind::object: {
      value_map m;
      m.entries.reserve(v.as_object().size());
      for (const auto& [k, item] : v.as_object()) m.set(k, from_chat(item));
      return value(std::move(m));
    }
  }
  return value::none();
}

bool truthy(const value& v) {
  switch (v.type()) {
    case value::kind::undefined:
    case value::kind::none: return false;
    case value::kind::boolean: return v.as_bool();
    case value::kind::integer: return v.as_int() != 0;
    case value::kind::floating: return v.as_float() != 0.0;
    case value::kind::string: return !v.as_string().empty();
    case value::kind::list: return !v.as_list().empty();
    case value::kind::map: return !v.as_map().entries.empty();
    default: return true;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  // sci = [-]D[.DDD]e[+-]XX
  const std::size_t epos = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (std::size_t i = negative ? 1 : 0; i < epos; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  const int exp10 = std::atoi(sci.c_str() + epos + 1);
  std::string out = negative ? "-" : "";
  if (exp10 < -4 || exp10 >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += exp10 < 0 ? "e-" : "e+";
    const int a = std::abs(exp10);
    if (a < 10) out += '0';
    out += std::to_string(a);
    return out;
  }
  if (exp10 < 0) {
    out += "0." + std::string(static_cast<std::size_t>(-exp10 - 1), '0') + digits;
    return out;
  }
  const auto int_digits = static_cast<std::size_t>(exp10 + 1);
  if (digits.size() <= int_digits) {
    out += digits + std::string(int_digits - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, int_digits) + "." + digits.substr(int_digits);
  }
  return out;
}

namespace {

/// How deep to_str / repr are inside lists, dicts and namespaces. A template can nest a value in
/// a loop (`set ns.x = [ns.x]`) far deeper than the stack can print, so deep values fail.
thread_local int g_print_depth = 0;
constexpr int max_print_depth = 256;

struct print_level {
  print_level() {
    if (++g_print_depth > max_print_depth) {
      --g_print_depth;
      fail(0, "a value nested deeper than " + std::to_string(max_print_depth) + " levels cannot be printed",
           error_code::too_large);
    }
  }
  ~print_level() { --g_print_depth; }
  print_level(const print_level&) = delete;
  print_level& operator=(const print_level&) = delete;
};

/// The namespaces being printed. A namespace is the one mutable container, so the only way a
/// value contains itself (`set ns.x = ns`); as in Python's repr, a namespace met again inside
/// itself prints as <Namespace {...}>.
thread_local std::vector<const namespace_obj*> g_printing;

std::string map_repr(const value_map& m);

std::string ns_repr(const namespace_obj& ns) {
  if (std::find(g_printing.begin(), g_printing.end(), &ns) != g_printing.end()) return "<Namespace {...}>";
  const print_level level;
  g_printing.push_back(&ns);
  struct unmark {
    ~unmark() { g_printing.pop_back(); }
  } const unmark_on_return;
  return "<Namespace " + map_repr(ns.attrs) + ">";
}

std::string seq_repr(const value_list& items) {
  const print_level level;
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += repr(items[i]);
  }
  return out + "]";
}

std::string map_repr(const value_map& m) {
  const print_level level;
  std::string out = "{";
  for (std::size_t i = 0; i < m.entries.size(); ++i) {
    if (i) out += ", ";
    out += py_str_repr(m.entries[i].first) + ": " + repr(m.entries[i].second);
  }
  return out + "}";
}

}  // namespace

std::string to_str(const value& v) {
  switch (v.type()) {
    case value::kind::undefined: return {};
    case value::kind::none: return "None";
    case value::kind::boolean: return v.as_bool() ? "True" : "False";
    case value::kind::integer: return std::to_string(v.as_int());
    case value::kind::floating: return float_repr(v.as_float());
    case value::kind::string: return v.as_string();
    case value::kind::list: return seq_repr(v.as_list());
    case value::kind::map: return map_repr(v.as_map());
    case value::kind::ns: return ns_repr(v.as_ns());
    case value::kind::loop: return "<LoopContext>";
    case value::kind::callable: return "<function>";
  }
  return {};
}

std::string repr(const value& v) {
  if (v.is_string()) return py_str_repr(v.as_string());
  if (v.is_undefined()) return "Undefined";
  return to_str(v);
}

std::string type_name(const value& v) {
  switch (v.type()) {
    case value::kind::undefined: return "Undefined";
    case value::kind::none: return "NoneType";
    case value::kind::boolean: return "bool";
    case value::kind::integer: return "int";
    case value::kind::floating: return "float";
    case value::kind::string: return "str";
    case value::kind::list: return "list";
    case value::kind::map: return "dict";
    case value::kind::ns: return "Namespace";
    case value::kind::loop: return "LoopContext";
    case value::kind::callable: return "function";
  }
  return "object";
}

bool equals(const value& a, const value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is(value::kind::floating) && !b.is(value::kind::floating)) {
      const std::int64_t x = a.is(value::kind::boolean) ? a.as_bool() : a.as_int();
      const std::int64_t y = b.is(value::kind::boolean) ? b.as_bool() : b.as_int();
      return x == y;
    }
    return a.to_double() == b.to_double();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case value::kind::undefined:
    case value::kind::none: return true;
    case value::kind::string: return a.as_string() == b.as_string();
    case value::kind::list: {
      const auto& x = a.as_list();
      const auto& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (!equals(x[i], y[i])) return false;
      }
      return true;
    }
    case value::kind::map: {
      const auto& x = a.as_map();
      const auto& y = b.as_map();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, item] : x.entries) {
        const value* other = y.find(k);
        if (!other || !equals(item, *other)) return false;
      }
      return true;
    }
    case value::kind::ns: return &a.as_ns() == &b.as_ns();
    case value::kind::loop: return &a.as_loop() == &b.as_loop();
    case value::kind::callable: return &a.as_callable() == &b.as_callable();
    default: return false;
  }
}

int compare(const value& a, const value& b, int line, std::string_view op) {
  if (a.is_number() && b.is_number()) {
    if (!a.is(value::kind::floating) && !b.is(value::kind::floating)) {
      const std::int64_t x = a.is(value::kind::boolean) ? a.as_bool() : a.as_int();
      const std::int64_t y = b.is(value::kind::boolean) ? b.as_bool() : b.as_int();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const double x = a.to_double();
    const double y = b.to_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i], line, op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  fail(line, "'" + std::string(op) + "' not supported between instances of '" + type_name(a) + "' and '" +
                 type_name(b) + "'");
}

}  // namespace actorserve::protocol::jinja
