/// The Jinja filters chat templates use, with jinja2's (and Hugging Face's tojson) semantics.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <unordered_map>

#include "protocol/chat_template/renderer.hpp"
#include "protocol/chat_template/template_error.hpp"
#include "protocol/chat_template/utf8_text.hpp"

namespace actorserve::protocol::jinja {
namespace {

using filter_fn = value (*)(renderer&, const value&, const call_args&, int);

std::string str_arg(const call_args& a, std::size_t i, std::string_view name, std::string dflt, int line) {
  const value* v = a.get(i, name);
  if (!v || v->is_undefined()) return dflt;
  if (!v->is_string()) fail(line, "argument '" + std::string(name) + "' must be a string");
  return v->as_string();
}

std::int64_t int_arg(const call_args& a, std::size_t i, std::string_view name, std::int64_t dflt, int line) {
  const value* v = a.get(i, name);
  if (!v || v->is_undefined()) return dflt;
  if (!v->is(value::kind::integer) && !v->is(value::kind::boolean)) fail(line, "argument '" + std::string(name) + "' must be an integer");
  return v->is(value::kind::boolean) ? v->as_bool() : v->as_int();
}

bool bool_arg(const call_args& a, std::size_t i, std::string_view name, bool dflt) {
  const value* v = a.get(i, name);
  return v ? truthy(*v) : dflt;
}

/// Attribute lookup as jinja's make_attrgetter: "a.b" walks, digits index lists.
value attr_path(const value& item, const std::string& path, int line) {
  value cur = item;
  std::size_t pos = 0;
  while (true) {
    const std::size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? get_item(cur, value(decimal_index(part)), line) : get_item(cur, value(part), line);
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

value f_trim(renderer&, const value& v, const call_args& a, int line) {
  const value* chars = a.get(0, "chars");
  std::string set;
  if (chars && !chars->is_none() && !chars->is_undefined()) set = str_arg(a, 0, "chars", "", line);
  return value(py_strip(to_str(v), chars && chars->is_string() ? &set : nullptr, true, true));
}

value f_length(renderer&, const value& v, const call_args&, int line) { return value(length_of(v, line)); }
value f_upper(renderer&, const value& v, const call_args&, int) { return value(ascii_upper(to_str(v))); }
value f_lower(renderer&, const value& v, const call_args&, int) { return value(ascii_lower(to_str(v))); }
value f_capitalize(renderer&, const value& v, const call_args&, int) { return value(py_capitalize(to_str(v))); }
value f_title(renderer&, const value& v, const call_args&, int) { return value(jinja_title(to_str(v))); }
value f_string(renderer&, const value& v, const call_args&, int) { return v.is_string() ? v : value(to_str(v)); }
value f_safe(renderer&, const value& v, const call_args&, int) { return v; }

value f_escape(renderer&, const value& v, const call_args&, int) {
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return value(std::move(out));
}

value f_replace(renderer& r, const value& v, const call_args& a, int line) {
  const value* from = a.get(0, "old");
  const value* to = a.get(1, "new");
  if (!from || !to) fail(line, "replace() needs 'old' and 'new'");
  const std::int64_t count = int_arg(a, 2, "count", -1, line);
  std::string out = py_replace(to_str(v), to_str(*from), to_str(*to), static_cast<long>(count));
  r.check_size(out.size(), line);
  return value(std::move(out));
}

value f_join(renderer& r, const value& v, const call_args& a, int line) {
  const std::string sep = str_arg(a, 0, "d", "", line);
  const value* attribute = a.get(1, "attribute");
  std::string out;
  bool first = true;
  const auto seq = iterate(v, line);  // keep the list alive for the loop

  for (const auto& item : *seq) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute && !attribute->is_none() ? attr_path(item, to_str(*attribute), line) : item);
    r.check_size(out.size(), line);
  }
  return value(std::move(out));
}

value f_default(renderer&, const value& v, const call_args& a, int) {
  const value* dflt = a.get(0, "default_value");
  const bool boolean = bool_arg(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !truthy(v))) return dflt ? *dflt : value(std::string());
  return v;
}

value f_first(renderer&, const value& v, const call_args&, int line) {
  const auto items = iterate(v, line);
  return items->empty() ? value::undefined("first item") : items->front();
}

value f_last(renderer&, const value& v, const call_args&, int line) {
  const auto items = iterate(v, line);
  return items->empty() ? value::undefined("last item") : items->back();
}

value f_list(renderer&, const value& v, const call_args&, int line) { return value(*iterate(v, line)); }

value f_items(renderer&, const value& v, const call_args&, int line) {
  if (v.is_undefined()) return value(value_list{});
  if (!v.is_map()) fail(line, "items filter needs a mapping, got '" + type_name(v) + "'");
  value_list out;
  for (const auto& [k, item] : v.as_map().entries) out.emplace_back(value_list{value(k), item});
  return value(std::move(out));
}

/// int() of a finite double: Python's is unbounded, ours a 64-bit integer, so a value past its
/// range is an error naming the filter rather than an undefined conversion.
value truncate_to_int(double d, int line) {
  // 2^63 is exact in a double; every double in [-2^63, 2^63) truncates into range.
  if (!(d >= -0x1p63 && d < 0x1p63)) fail(line, "int filter: " + float_repr(d) + " is outside the 64-bit integer range");
  return value(static_cast<std::int64_t>(d));
}

value f_int(renderer&, const value& v, const call_args& a, int line) {
  const value* dflt = a.get(0, "default");
  const value fallback = dflt ? *dflt : value(std::int64_t{0});
  require_defined(v, line);
  if (v.is(value::kind::integer)) return v;
  if (v.is(value::kind::boolean)) return value(static_cast<std::int64_t>(v.as_bool()));
  if (v.is(value::kind::floating)) {
    if (!std::isfinite(v.as_float())) return fallback;
    return truncate_to_int(v.as_float(), line);
  }
  if (v.is_string()) {
    const std::string s = py_strip(v.as_string(), nullptr, true, true);
    const std::int64_t base = int_arg(a, 1, "base", 10, line);
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, static_cast<int>(base));
    if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return value(static_cast<std::int64_t>(i));
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d)) return truncate_to_int(d, line);
  }
  return fallback;
}

value f_float(renderer&, const value& v, const call_args& a, int line) {
  require_defined(v, line);
  const value* dflt = a.get(0, "default");
  const value fallback = dflt ? *dflt : value(0.0);
  if (v.is_number()) return value(v.to_double());
  if (v.is_string()) {
    const std::string s = py_strip(v.as_string(), nullptr, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return value(d);
  }
  return fallback;
}

value f_abs(renderer&, const value& v, const call_args&, int line) {
  if (v.is(value::kind::integer)) return value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.is(value::kind::boolean)) return value(static_cast<std::int64_t>(v.as_bool()));
  if (v.is(value::kind::floating)) return value(std::fabs(v.as_float()));
  fail(line, "bad operand type for abs(): '" + type_name(v) + "'");
}

value f_round(renderer&, const value& v, const call_args& a, int line) {
  const std::int64_t precision = int_arg(a, 0, "precision", 0, line);
  const std::string method = str_arg(a, 1, "method", "common", line);
  if (!v.is_number()) fail(line, "round needs a number, got '" + type_name(v) + "'");
  const double x = v.to_double();
  const double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "floor") return value(std::floor(x * scale) / scale);
  if (method == "ceil") return value(std::ceil(x * scale) / scale);
  if (method != "common") fail(line, "round: method must be 'common', 'ceil' or 'floor'");
  if (!v.is(value::kind::floating) && precision >= 0) return value(static_cast<std::int64_t>(v.is(value::kind::boolean) ? v.as_bool() : v.as_int()));
  if (precision < 0 || precision > 300 || !std::isfinite(x)) return value(std::nearbyint(x * scale) / scale);
  // Python round(x, n): correctly rounded (half to even on the exact binary value), like printf.
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), x);
  return value(std::strtod(buf, nullptr));
}

value f_tojson(renderer& r, const value& v, const call_args& a, int line) {
  json_options o;
  if (const value* indent = a.get(0, "indent"); indent && !indent->is_none() && !indent->is_undefined()) {
    o.has_indent = true;
    if (indent->is_string()) {
      o.indent = indent->as_string();
    } else {
      const std::int64_t n = int_arg(a, 0, "indent", 0, line);
      o.indent = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(n, 0, 64)), ' ');
    }
  }
  o.ensure_ascii = bool_arg(a, 99, "ensure_ascii", false);
  o.sort_keys = bool_arg(a, 99, "sort_keys", false);
  if (const value* seps = a.get(99, "separators"); seps && seps->is_list() && seps->as_list().size() == 2) {
    o.item_sep = to_str(seps->as_list()[0]);
    o.key_sep = to_str(seps->as_list()[1]);
  }
  std::string out = to_json(v, o, line);
  r.check_size(out.size(), line);
  return value(std::move(out));
}

/// selectattr / rejectattr / select / reject.
value select_impl(renderer& r, const value& v, const call_args& a, int line, bool by_attr, bool keep_when) {
  std::size_t next = 0;
  std::string attribute;
  if (by_attr) {
    if (a.pos.empty() || !a.pos[0].is_string()) fail(line, "selectattr/rejectattr need an attribute name");
    attribute = a.pos[0].as_string();
    next = 1;
  }
  std::string test;
  if (a.pos.size() > next) test = to_str(a.pos[next]);
  call_args test_args;
  for (std::size_t i = next + 1; i < a.pos.size(); ++i) test_args.pos.push_back(a.pos[i]);
  value_list out;
  const auto seq = iterate(v, line);  // keep the list alive for the loop

  for (const auto& item : *seq) {
    r.tick(line);
    const value subject = by_attr ? attr_path(item, attribute, line) : item;
    const bool pass = test.empty() ? truthy(subject) : r.apply_test(test, subject, test_args, line);
    if (pass == keep_when) out.push_back(item);
  }
  return value(std::move(out));
}

value f_selectattr(renderer& r, const value& v, const call_args& a, int line) { return select_impl(r, v, a, line, true, true); }
value f_rejectattr(renderer& r, const value& v, const call_args& a, int line) { return select_impl(r, v, a, line, true, false); }
value f_select(renderer& r, const value& v, const call_args& a, int line) { return select_impl(r, v, a, line, false, true); }
value f_reject(renderer& r, const value& v, const call_args& a, int line) { return select_impl(r, v, a, line, false, false); }

value f_map(renderer& r, const value& v, const call_args& a, int line) {
  value_list out;
  if (const value* attribute = a.get(99, "attribute")) {
    const value* dflt = a.get(99, "default");
    const auto seq = iterate(v, line);  // keep the list alive for the loop

    for (const auto& item : *seq) {
      r.tick(line);
      value x = attr_path(item, to_str(*attribute), line);
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return value(std::move(out));
  }
  if (a.pos.empty()) fail(line, "map needs a filter name or attribute=");
  const std::string name = to_str(a.pos[0]);
  call_args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  const auto seq = iterate(v, line);  // keep the list alive for the loop

  for (const auto& item : *seq) out.push_back(r.apply_filter(name, item, rest, line));
  return value(std::move(out));
}

value sorted(renderer& r, value_list items, const call_args& a, int line, std::size_t first_arg) {
  const bool reverse = bool_arg(a, first_arg, "reverse", false);
  const bool case_sensitive = bool_arg(a, first_arg + 1, "case_sensitive", false);
  const value* attribute = a.get(first_arg + 2, "attribute");
  auto key = [&](const value& x) {
    value k = attribute && !attribute->is_none() ? attr_path(x, to_str(*attribute), line) : x;
    if (!case_sensitive && k.is_string()) k = value(ascii_lower(k.as_string()));
    return k;
  };
  r.tick(line);
  std::stable_sort(items.begin(), items.end(), [&](const value& x, const value& y) {
    const int c = compare(key(x), key(y), line, "<");
    return reverse ? c > 0 : c < 0;
  });
  return value(std::move(items));
}

value f_sort(renderer& r, const value& v, const call_args& a, int line) { return sorted(r, *iterate(v, line), a, line, 0); }

value f_dictsort(renderer& r, const value& v, const call_args& a, int line) {
  const value pairs = f_items(r, v, {}, line);
  const bool case_sensitive = bool_arg(a, 0, "case_sensitive", false);
  const std::string by = str_arg(a, 1, "by", "key", line);
  call_args sort_args;
  sort_args.kw = {{"reverse", value(bool_arg(a, 2, "reverse", false))},
                  {"case_sensitive", value(case_sensitive)},
                  {"attribute", value(std::string(by == "value" ? "1" : "0"))}};
  return sorted(r, pairs.as_list(), sort_args, line, 99);
}

value f_reverse(renderer&, const value& v, const call_args&, int line) {
  if (v.is_string()) {
    const value step(std::int64_t{-1});
    return get_slice(v, nullptr, nullptr, &step, line);
  }
  value_list items = *iterate(v, line);
  std::reverse(items.begin(), items.end());
  return value(std::move(items));
}

value f_unique(renderer&, const value& v, const call_args& a, int line) {
  const bool case_sensitive = bool_arg(a, 0, "case_sensitive", false);
  const value* attribute = a.get(1, "attribute");
  value_list out;
  value_list seen;
  const auto seq = iterate(v, line);  // keep the list alive for the loop

  for (const auto& item : *seq) {
    value k = attribute ? attr_path(item, to_str(*attribute), line) : item;
    if (!case_sensitive && k.is_string()) k = value(ascii_lower(k.as_string()));
    if (std::none_of(seen.begin(), seen.end(), [&](const value& s) { return equals(s, k); })) {
      seen.push_back(k);
      out.push_back(item);
    }
  }
  return value(std::move(out));
}

value f_sum(renderer& r, const value& v, const call_args& a, int line) {
  const value* attribute = a.get(0, "attribute");
  const value* start = a.get(1, "start");
  value total = start ? *start : value(std::int64_t{0});
  const auto seq = iterate(v, line);  // keep the list alive for the loop

  for (const auto& item : *seq) {
    total = binary_op(r, op_kind::add, total, attribute ? attr_path(item, to_str(*attribute), line) : item, line);
  }
  return total;
}

value min_max(const value& v, const call_args& a, int line, bool want_max) {
  const bool case_sensitive = bool_arg(a, 0, "case_sensitive", false);
  const value* attribute = a.get(1, "attribute");
  const auto items = iterate(v, line);
  if (items->empty()) return value::undefined(want_max ? "max" : "min");
  auto key = [&](const value& x) {
    value k = attribute ? attr_path(x, to_str(*attribute), line) : x;
    if (!case_sensitive && k.is_string()) k = value(ascii_lower(k.as_string()));
    return k;
  };
  const value* best = &items->front();
  for (const auto& item : *items) {
    const int c = compare(key(item), key(*best), line, "<");
    if (want_max ? c > 0 : c < 0) best = &item;
  }
  return *best;
}

value f_min(renderer&, const value& v, const call_args& a, int line) { return min_max(v, a, line, false); }
value f_max(renderer&, const value& v, const call_args& a, int line) { return min_max(v, a, line, true); }

value f_indent(renderer& r, const value& v, const call_args& a, int line) {
  const value* width = a.get(0, "width");
  std::string pad = "    ";
  if (width && width->is_string()) {
    pad = width->as_string();
  } else if (width) {
    pad = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(int_arg(a, 0, "width", 4, line), 0, 256)), ' ');
  }
  const bool first = bool_arg(a, 1, "first", false);
  const bool blank = bool_arg(a, 2, "blank", false);
  const std::string s = to_str(v);
  std::string out;
  std::size_t pos = 0;
  bool is_first = true;
  while (true) {
    const std::size_t nl = s.find('\n', pos);
    const std::string_view ln(s.data() + pos, (nl == std::string::npos ? s.size() : nl) - pos);
    if ((!is_first || first) && (blank || !py_strip(ln, nullptr, true, true).empty())) out += pad;
    out += ln;
    if (nl == std::string::npos) break;
    out += '\n';
    pos = nl + 1;
    is_first = false;
  }
  r.check_size(out.size(), line);
  return value(std::move(out));
}

value f_attr(renderer&, const value& v, const call_args& a, int line) {
  return get_attr(v, str_arg(a, 0, "name", "", line), line);
}

value f_wordcount(renderer&, const value& v, const call_args&, int) {
  return value(static_cast<std::int64_t>(py_split(to_str(v), nullptr, -1).size()));
}

const std::unordered_map<std::string_view, filter_fn>& filter_table() {
  static const std::unordered_map<std::string_view, filter_fn> table = {
      {"trim", f_trim},         {"length", f_length},       {"count", f_length},       {"upper", f_upper},
      {"lower", f_lower},       {"capitalize", f_capitalize}, {"title", f_title},      {"string", f_string},
      {"safe", f_safe},         {"escape", f_escape},       {"e", f_escape},           {"forceescape", f_escape},
      {"replace", f_replace},   {"join", f_join},           {"default", f_default},    {"d", f_default},
      {"first", f_first},       {"last", f_last},           {"list", f_list},          {"items", f_items},
      {"int", f_int},           {"float", f_float},         {"abs", f_abs},            {"round", f_round},
      {"tojson", f_tojson},     {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"select", f_select},
      {"reject", f_reject},     {"map", f_map},             {"sort", f_sort},          {"dictsort", f_dictsort},
      {"reverse", f_reverse},   {"unique", f_unique},       {"sum", f_sum},            {"min", f_min},
      {"max", f_max},           {"indent", f_indent},       {"attr", f_attr},          {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

value renderer::apply_filter(const std::string& name, const value& operand, const call_args& args, int line) {
  tick(line);
  const auto& table = filter_table();
  const auto it = table.find(name);
  if (it == table.end()) fail(line, "unsupported filter '" + name + "'", error_code::unsupported);
  return it->second(*this, operand, args, line);
}

}  // namespace actorserve::protocol::jinja
