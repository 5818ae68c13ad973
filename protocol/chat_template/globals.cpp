/// Global functions every template sees: range, namespace, dict, raise_exception, strftime_now.
#include <ctime>

#include "protocol/chat_template/renderer.hpp"
#include "protocol/chat_template/template_error.hpp"

namespace actorserve::protocol::jinja {
namespace {

std::int64_t int_of(const value& v, int line) {
  if (v.is(value::kind::integer)) return v.as_int();
  if (v.is(value::kind::boolean)) return v.as_bool();
  fail(line, "'" + type_name(v) + "' object cannot be interpreted as an integer");
}

value g_range(renderer& r, const call_args& a, int line) {
  if (a.pos.empty() || a.pos.size() > 3 || !a.kw.empty()) fail(line, "range() takes 1 to 3 positional arguments");
  std::int64_t start = 0;
  std::int64_t stop = 0;
  std::int64_t step = 1;
  if (a.pos.size() == 1) {
    stop = int_of(a.pos[0], line);
  } else {
    start = int_of(a.pos[0], line);
    stop = int_of(a.pos[1], line);
    if (a.pos.size() == 3) step = int_of(a.pos[2], line);
  }
  if (step == 0) fail(line, "range() arg 3 must not be zero");
  // Size first (in long double: no overflow), so a huge range fails before allocating.
  const long double span = step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
  const long double count = span <= 0 ? 0 : (span + (step > 0 ? step : -step) - 1) / (step > 0 ? step : -step);
  r.check_items(static_cast<std::size_t>(count > 1e15L ? 1e15L : count), line);
  value_list out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
  return value(std::move(out));
}

value g_namespace(renderer& r, const call_args& a, int line) {
  auto ns = std::make_shared<namespace_obj>();
  r.adopt_namespace(ns);
  for (const auto& p : a.pos) {
    if (!p.is_map()) fail(line, "namespace() takes keyword arguments or a mapping");
    for (const auto& [k, v] : p.as_map().entries) ns->attrs.set(k, v);
  }
  for (const auto& [k, v] : a.kw) ns->attrs.set(k, v);
  return value(std::move(ns));
}

value g_dict(renderer&, const call_args& a, int line) {
  value_map m;
  for (const auto& p : a.pos) {
    if (!p.is_map()) fail(line, "dict() takes keyword arguments or a mapping");
    for (const auto& [k, v] : p.as_map().entries) m.set(k, v);
  }
  for (const auto& [k, v] : a.kw) m.set(k, v);
  return value(std::move(m));
}

value g_raise_exception(renderer&, const call_args& a, int) {
  const value* msg = a.get(0, "message");
  throw template_error{error_code::invalid_argument, msg ? to_str(*msg) : std::string("template raised an exception")};
}

/// Formats the render's time (the current time unless the caller fixed one) as UTC, as
/// transformers' strftime_now does with datetime.now().
value g_strftime_now(renderer& r, const call_args& a, int line) {
  const value* fmt = a.get(0, "format");
  if (!fmt || !fmt->is_string()) fail(line, "strftime_now() needs a format string");
  const std::time_t now = static_cast<std::time_t>(r.lim().now);
  std::tm t{};
  if (!gmtime_r(&now, &t)) fail(line, "strftime_now(): the time is out of range");
  const std::string& f = fmt->as_string();
  r.check_size(f.size() * 16, line);
  std::string buf(f.size() * 16 + 64, '\0');
  const std::size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &t);
  if (n == 0 && !f.empty()) fail(line, "strftime_now(): format produced no output");
  buf.resize(n);
  return value(std::move(buf));
}

value make_builtin(const char* name, builtin_fn fn) {
  auto c = std::make_shared<callable>();
  c->name = name;
  c->fn = fn;
  return value(std::shared_ptr<const callable>(std::move(c)));
}

}  // namespace

void add_globals(value_map& globals) {
  // Built once; the callables are immutable, so every render shares them.
  static const value_map builtins = [] {
    value_map m;
    m.set("range", make_builtin("range", g_range));
    m.set("namespace", make_builtin("namespace", g_namespace));
    m.set("dict", make_builtin("dict", g_dict));
    m.set("raise_exception", make_builtin("raise_exception", g_raise_exception));
    m.set("strftime_now", make_builtin("strftime_now", g_strftime_now));
    return m;
  }();
  for (const auto& [name, fn] : builtins.entries) globals.set(name, fn);
}

}  // namespace actorserve::protocol::jinja
