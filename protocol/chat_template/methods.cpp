/// Python methods templates call on values: str.strip() & co, dict.get()/items()/keys()/values(),
/// loop.cycle(). Mutating methods (list.append, dict.update) are refused, as jinja2's immutable
/// sandbox does.
#include "protocol/chat_template/renderer.hpp"
#include "protocol/chat_template/template_error.hpp"
#include "protocol/chat_template/utf8_text.hpp"

namespace actorserve::protocol::jinja {
namespace {

const value* opt_arg(const call_args& a, std::size_t i, std::string_view name) {
  const value* v = a.get(i, name);
  return v && !v->is_none() && !v->is_undefined() ? v : nullptr;
}

std::string need_str(const value* v, std::string_view method, int line) {
  if (!v || !v->is_string()) fail(line, "str." + std::string(method) + "() needs a string argument");
  return v->as_string();
}

bool affix_match(const std::string& s, const value* arg, bool prefix, int line) {
  auto one = [&](const value& p) {
    if (!p.is_string()) fail(line, "startswith/endswith need a string or a tuple of strings");
    const std::string& x = p.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (arg && arg->is_list()) {
    for (const auto& p : arg->as_list()) {
      if (one(p)) return true;
    }
    return false;
  }
  if (!arg) fail(line, "startswith/endswith need an argument");
  return one(*arg);
}

/// str.format with "{}", "{0}" and "{name}" fields (no format specs).
std::string py_format(renderer& r, const std::string& fmt, const call_args& a, int line) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const std::size_t close = fmt.find('}', i);
      if (close == std::string::npos) fail(line, "str.format: single '{' encountered");
      const std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!") != std::string::npos) fail(line, "str.format: format specs are not supported", error_code::unsupported);
      const value* v = nullptr;
      if (field.empty()) {
        v = auto_index < a.pos.size() ? &a.pos[auto_index] : nullptr;
        ++auto_index;
      } else if (field.find_first_not_of("0123456789") == std::string::npos) {
        const auto idx = static_cast<std::size_t>(decimal_index(field));
        v = idx < a.pos.size() ? &a.pos[idx] : nullptr;
      } else {
        v = a.get(static_cast<std::size_t>(-1), field);
      }
      if (!v) fail(line, "str.format: no argument for field '{" + field + "}'");
      out += to_str(*v);
      r.check_size(out.size(), line);
      i = close;
    } else {
      out += c;
    }
  }
  return out;
}

value string_method(renderer& r, const std::string& s, const std::string& name, const call_args& a, int line, bool& found) {
  found = true;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const value* chars = opt_arg(a, 0, "chars");
    const std::string set = chars ? need_str(chars, name, line) : std::string();
    return value(py_strip(s, chars ? &set : nullptr, name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") return value(affix_match(s, a.get(0, "prefix"), name == "startswith", line));
  if (name == "split" || name == "rsplit") {
    const value* sep = opt_arg(a, 0, "sep");
    const value* maxsplit = opt_arg(a, 1, "maxsplit");
    const std::string sep_text = sep ? need_str(sep, name, line) : std::string();
    if (sep && sep_text.empty()) fail(line, "empty separator");
    long max = maxsplit && maxsplit->is(value::kind::integer) ? static_cast<long>(maxsplit->as_int()) : -1;
    if (name == "rsplit" && max >= 0) fail(line, "str.rsplit() with maxsplit is not supported", error_code::unsupported);
    value_list out;
    for (auto& part : py_split(s, sep ? &sep_text : nullptr, max)) out.emplace_back(std::move(part));
    return value(std::move(out));
  }
  if (name == "splitlines") {
    value_list out;
    std::size_t pos = 0;
    while (pos < s.size()) {
      const std::size_t nl = s.find('\n', pos);
      if (nl == std::string::npos) {
        out.emplace_back(s.substr(pos));
        break;
      }
      out.emplace_back(s.substr(pos, nl - pos));
      pos = nl + 1;
    }
    return value(std::move(out));
  }
  if (name == "upper") return value(ascii_upper(s));
  if (name == "lower") return value(ascii_lower(s));
  if (name == "title") return value(py_title(s));
  if (name == "capitalize") return value(py_capitalize(s));
  if (name == "replace") {
    const value* count = opt_arg(a, 2, "count");
    std::string out = py_replace(s, need_str(a.get(0, "old"), name, line), need_str(a.get(1, "new"), name, line),
                                 count && count->is(value::kind::integer) ? static_cast<long>(count->as_int()) : -1);
    r.check_size(out.size(), line);
    return value(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    const std::string sub = need_str(a.get(0, "sub"), name, line);
    if (name == "count") {
      if (sub.empty()) return value(static_cast<std::int64_t>(code_point_count(s) + 1));
      std::int64_t n = 0;
      for (std::size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return value(n);
    }
    const std::size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      if (name == "index") fail(line, "substring not found");
      return value(std::int64_t{-1});
    }
    return value(static_cast<std::int64_t>(code_point_count(std::string_view(s).substr(0, p))));
  }
  if (name == "join") {
    const value* items = a.get(0, "iterable");
    if (!items) fail(line, "str.join() needs an iterable");
    std::string out;
    bool first = true;
    const auto seq = iterate(*items, line);  // keep the list alive for the loop

    for (const auto& item : *seq) {
      if (!item.is_string()) fail(line, "sequence item: expected str instance, " + type_name(item) + " found");
      if (!first) out += s;
      first = false;
      out += item.as_string();
      r.check_size(out.size(), line);
    }
    return value(std::move(out));
  }
  if (name == "format") return value(py_format(r, s, a, line));
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
    if (s.empty()) return value(false);
    for (char c : s) {
      const bool digit = c >= '0' && c <= '9';
      const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      const bool space = c == ' ' || (c >= 9 && c <= 13);
      const bool ok = name == "isdigit" ? digit : name == "isalpha" ? alpha : name == "isspace" ? space : (digit || alpha);
      if (!ok) return value(false);
    }
    return value(true);
  }
  found = false;
  return value::undefined(name);
}

value map_method(const value_map& m, const std::string& name, const call_args& a, int line, bool& found) {
  found = true;
  if (name == "get") {
    const value* key = a.get(0, "key");
    if (!key) fail(line, "dict.get() needs a key");
    if (key->is_string()) {
      if (const value* v = m.find(key->as_string())) return *v;
    }
    const value* dflt = a.get(1, "default");
    return dflt ? *dflt : value::none();
  }
  if (name == "items" || name == "keys" || name == "values") {
    value_list out;
    out.reserve(m.entries.size());
    for (const auto& [k, v] : m.entries) {
      if (name == "items") {
        out.emplace_back(value_list{value(k), v});
      } else {
        out.push_back(name == "keys" ? value(k) : v);
      }
    }
    return value(std::move(out));
  }
  if (name == "update" || name == "pop" || name == "setdefault" || name == "clear" || name == "popitem") {
    fail(line, "dict." + name + "() is not allowed: template values are immutable", error_code::unsupported);
  }
  found = false;
  return value::undefined(name);
}

}  // namespace

value call_method(renderer& r, const value& obj, const std::string& name, const call_args& args, int line, bool& found) {
  found = false;
  switch (obj.type()) {
    case value::kind::string: return string_method(r, obj.as_string(), name, args, line, found);
    case value::kind::map: return map_method(obj.as_map(), name, args, line, found);
    case value::kind::list:
      if (name == "append" || name == "extend" || name == "pop" || name == "insert" || name == "remove" || name == "sort" ||
          name == "reverse" || name == "clear") {
        fail(line, "list." + name + "() is not allowed: template values are immutable", error_code::unsupported);
      }
      if (name == "index" || name == "count") {
        const value* x = args.get(0, "value");
        if (!x) fail(line, "list." + name + "() needs an argument");
        std::int64_t n = 0;
        const auto& items = obj.as_list();
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (!equals(items[i], *x)) continue;
          if (name == "index") {
            found = true;
            return value(static_cast<std::int64_t>(i));
          }
          ++n;
        }
        if (name == "index") fail(line, "value is not in list");
        found = true;
        return value(n);
      }
      return value::undefined(name);
    case value::kind::loop:
      if (name == "cycle") {
        found = true;
        if (args.pos.empty()) fail(line, "no items for cycling given");
        const loop_state& l = obj.as_loop();
        return args.pos[static_cast<std::size_t>(l.index0) % args.pos.size()];
      }
      return value::undefined(name);
    default: return value::undefined(name);
  }
}

}  // namespace actorserve::protocol::jinja
