/// Jinja tests (`x is defined`, `x is not none`, `selectattr(..., 'equalto', ...)`).
#include <string_view>
#include <unordered_map>

#include "protocol/chat_template/renderer.hpp"
#include "protocol/chat_template/template_error.hpp"

namespace actorserve::protocol::jinja {
namespace {

using test_fn = bool (*)(const value&, const call_args&, int);

const value& arg0(const call_args& a, int line) {
  if (a.pos.empty()) fail(line, "test needs an argument");
  return a.pos[0];
}

bool is_lowercase(const std::string& s) {
  bool cased = false;
  for (char c : s) {
    if (c >= 'A' && c <= 'Z') return false;
    if (c >= 'a' && c <= 'z') cased = true;
  }
  return cased;
}

bool is_uppercase(const std::string& s) {
  bool cased = false;
  for (char c : s) {
    if (c >= 'a' && c <= 'z') return false;
    if (c >= 'A' && c <= 'Z') cased = true;
  }
  return cased;
}

std::int64_t int_operand(const value& v, int line) {
  if (v.is(value::kind::integer)) return v.as_int();
  if (v.is(value::kind::boolean)) return v.as_bool();
  fail(line, "test needs an integer, got '" + type_name(v) + "'");
}

const std::unordered_map<std::string_view, test_fn>& test_table() {
  using k = value::kind;
  static const std::unordered_map<std::string_view, test_fn> table = {
      {"defined", [](const value& v, const call_args&, int) { return !v.is_undefined(); }},
      {"undefined", [](const value& v, const call_args&, int) { return v.is_undefined(); }},
      {"none", [](const value& v, const call_args&, int) { return v.is_none(); }},
      {"boolean", [](const value& v, const call_args&, int) { return v.is(k::boolean); }},
      {"true", [](const value& v, const call_args&, int) { return v.is(k::boolean) && v.as_bool(); }},
      {"false", [](const value& v, const call_args&, int) { return v.is(k::boolean) && !v.as_bool(); }},
      {"integer", [](const value& v, const call_args&, int) { return v.is(k::integer); }},
      {"float", [](const value& v, const call_args&, int) { return v.is(k::floating); }},
      {"number", [](const value& v, const call_args&, int) { return v.is_number(); }},
      {"string", [](const value& v, const call_args&, int) { return v.is_string(); }},
      {"mapping", [](const value& v, const call_args&, int) { return v.is_map(); }},
      {"iterable",
       [](const value& v, const call_args&, int) { return v.is_list() || v.is_map() || v.is_string() || v.is_undefined(); }},
      {"sequence", [](const value& v, const call_args&, int) { return v.is_list() || v.is_map() || v.is_string() || v.is_undefined(); }},
      {"callable", [](const value& v, const call_args&, int) { return v.is(k::callable); }},
      {"escaped", [](const value&, const call_args&, int) { return false; }},
      {"lower", [](const value& v, const call_args&, int) { return v.is_string() && is_lowercase(v.as_string()); }},
      {"upper", [](const value& v, const call_args&, int) { return v.is_string() && is_uppercase(v.as_string()); }},
      {"even", [](const value& v, const call_args&, int line) { return int_operand(v, line) % 2 == 0; }},
      {"odd", [](const value& v, const call_args&, int line) { return int_operand(v, line) % 2 != 0; }},
      {"divisibleby",
       [](const value& v, const call_args& a, int line) {
         const std::int64_t d = int_operand(arg0(a, line), line);
         if (d == 0) fail(line, "integer division or modulo by zero");
         return int_operand(v, line) % d == 0;
       }},
      {"eq", [](const value& v, const call_args& a, int line) { return equals(v, arg0(a, line)); }},
      {"ne", [](const value& v, const call_args& a, int line) { return !equals(v, arg0(a, line)); }},
      {"lt", [](const value& v, const call_args& a, int line) { return compare(v, arg0(a, line), line, "<") < 0; }},
      {"le", [](const value& v, const call_args& a, int line) { return compare(v, arg0(a, line), line, "<=") <= 0; }},
      {"gt", [](const value& v, const call_args& a, int line) { return compare(v, arg0(a, line), line, ">") > 0; }},
      {"ge", [](const value& v, const call_args& a, int line) { return compare(v, arg0(a, line), line, ">=") >= 0; }},
      {"sameas",
       [](const value& v, const call_args& a, int line) {
         const value& o = arg0(a, line);
         if (v.is_none() || v.is(k::boolean) || v.is_undefined()) return equals(v, o) && v.type() == o.type();
         return false;
       }},
  };
  return table;
}

/// Aliases jinja2 registers for the comparison tests.
std::string_view canonical(const std::string& name) {
  if (name == "equalto" || name == "==") return "eq";
  if (name == "!=") return "ne";
  if (name == "lessthan" || name == "<") return "lt";
  if (name == "<=") return "le";
  if (name == "greaterthan" || name == ">") return "gt";
  if (name == ">=") return "ge";
  return name;
}

}  // namespace

bool renderer::apply_test(const std::string& name, const value& operand, const call_args& args, int line) {
  tick(line);
  if (name == "in") {
    return truthy(binary_op(*this, op_kind::in, operand, arg0(args, line), line));
  }
  const auto& table = test_table();
  const auto it = table.find(canonical(name));
  if (it == table.end()) fail(line, "unsupported test '" + name + "'", error_code::unsupported);
  return it->second(operand, args, line);
}

}  // namespace actorserve::protocol::jinja
