/// Arithmetic, concatenation and membership with Python semantics; iteration and len().
#include <cmath>
#include <cstdio>
#include <limits>

#include "protocol/chat_template/renderer.hpp"
#include "protocol/chat_template/template_error.hpp"
#include "protocol/chat_template/utf8_text.hpp"

namespace actorserve::protocol::jinja {
namespace {

const char* symbol(op_kind op) {
  switch (op) {
    case op_kind::add: return "+";
    case op_kind::sub: return "-";
    case op_kind::mul: return "*";
    case op_kind::div: return "/";
    case op_kind::floordiv: return "//";
    case op_kind::mod: return "%";
    case op_kind::pow: return "**";
    default: return "?";
  }
}

[[noreturn]] void unsupported_operands(op_kind op, const value& a, const value& b, int line) {
  if (op == op_kind::add && a.is_string()) fail(line, "can only concatenate str (not \"" + type_name(b) + "\") to str");
  fail(line, std::string("unsupported operand type(s) for ") + symbol(op) + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

bool is_int_like(const value& v) { return v.is(value::kind::integer) || v.is(value::kind::boolean); }
std::int64_t int_of(const value& v) { return v.is(value::kind::boolean) ? v.as_bool() : v.as_int(); }

[[noreturn]] void overflow(int line) { fail(line, "integer overflow", error_code::unsupported); }

value int_arith(op_kind op, std::int64_t x, std::int64_t y, int line) {
  std::int64_t r = 0;
  switch (op) {
    case op_kind::add:
      if (__builtin_add_overflow(x, y, &r)) overflow(line);
      return value(r);
    case op_kind::sub:
      if (__builtin_sub_overflow(x, y, &r)) overflow(line);
      return value(r);
    case op_kind::mul:
      if (__builtin_mul_overflow(x, y, &r)) overflow(line);
      return value(r);
    case op_kind::div:
      if (y == 0) fail(line, "division by zero");
      return value(static_cast<double>(x) / static_cast<double>(y));
    case op_kind::floordiv:
    case op_kind::mod: {
      if (y == 0) fail(line, op == op_kind::mod ? "integer modulo by zero" : "integer division or modulo by zero");
      if (x == std::numeric_limits<std::int64_t>::min() && y == -1) overflow(line);
      std::int64_t q = x / y;
      std::int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return value(op == op_kind::mod ? m : q);
    }
    case op_kind::pow: {
      if (y < 0) return value(std::pow(static_cast<double>(x), static_cast<double>(y)));
      std::int64_t result = 1;
      std::int64_t base = x;
      while (y > 0) {
        if ((y & 1) && __builtin_mul_overflow(result, base, &result)) overflow(line);
        y >>= 1;
        if (y > 0 && __builtin_mul_overflow(base, base, &base)) overflow(line);
      }
      return value(result);
    }
    default: return value::undefined({});
  }
}

value float_arith(op_kind op, double x, double y, int line) {
  switch (op) {
    case op_kind::add: return value(x + y);
    case op_kind::sub: return value(x - y);
    case op_kind::mul: return value(x * y);
    case op_kind::div:
      if (y == 0.0) fail(line, "float division by zero");
      return value(x / y);
    case op_kind::floordiv:
    case op_kind::mod: {
      if (y == 0.0) fail(line, "float modulo");
      double m = std::fmod(x, y);
      if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
      if (op == op_kind::mod) return value(m);
      // CPython float_divmod: the floor of the exact quotient, corrected for rounding.
      const double div = (x - m) / y;
      if (div == 0.0) return value(std::copysign(0.0, x / y));
      double q = std::floor(div);
      if (div - q > 0.5) q += 1.0;
      return value(q);
    }
    case op_kind::pow: return value(std::pow(x, y));
    default: return value::undefined({});
  }
}

/// n copies of something of `size` (bytes or items), saturating instead of wrapping around.
std::uint64_t times_size(std::size_t size, std::int64_t n) {
  const auto t = static_cast<std::uint64_t>(n);
  return size != 0 && t > UINT64_MAX / size ? UINT64_MAX : size * t;
}

value repeat(renderer& r, const value& seq, std::int64_t times, int line) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    r.check_size(times_size(s.size(), times), line);
    if (s.empty()) return value(std::string());  // '' * n: no loop of n empty appends
    std::string out;
    out.reserve(s.size() * static_cast<std::size_t>(times));
    for (std::int64_t i = 0; i < times; ++i) out += s;
    return value(std::move(out));
  }
  const value_list& items = seq.as_list();
  r.check_items(times_size(items.size(), times), line);
  if (items.empty()) return value(value_list{});
  value_list out;
  for (std::int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return value(std::move(out));
}

bool contains(const value& needle, const value& hay, int line) {
  switch (hay.type()) {
    case value::kind::undefined: return false;
    case value::kind::string:
      if (!needle.is_string()) fail(line, "'in <string>' requires string as left operand, not " + type_name(needle));
      return hay.as_string().find(needle.as_string()) != std::string::npos;
    case value::kind::list:
      for (const auto& item : hay.as_list()) {
        if (equals(needle, item)) return true;
      }
      return false;
    case value::kind::map: return needle.is_string() && hay.as_map().find(needle.as_string()) != nullptr;
    case value::kind::ns: return needle.is_string() && hay.as_ns().attrs.find(needle.as_string()) != nullptr;
    default: fail(line, "argument of type '" + type_name(hay) + "' is not iterable");
  }
}

/// Python "fmt % args" for %s, %r, %d, %i, %f (with an optional precision) and %%.
value printf_format(renderer& r, const std::string& fmt, const value& args, int line) {
  const value_list single{args};
  const value_list& items = args.is_list() ? args.as_list() : single;
  std::size_t next = 0;
  std::string out;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) fail(line, "incomplete format");
    int precision = -1;
    if (fmt[i] == '.') {
      precision = 0;
      while (++i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') precision = precision * 10 + (fmt[i] - '0');
      if (i >= fmt.size() || precision > 100) fail(line, "bad format precision");
    }
    const char conv = fmt[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= items.size()) fail(line, "not enough arguments for format string");
    const value& v = items[next++];
    if (conv == 's' || conv == 'r') {
      std::string text = conv == 's' ? to_str(v) : repr(v);
      if (precision >= 0) {
        const auto offsets = code_point_offsets(text);
        if (static_cast<std::size_t>(precision) + 1 < offsets.size()) text.resize(offsets[static_cast<std::size_t>(precision)]);
      }
      out += text;
    } else if (conv == 'd' || conv == 'i') {
      if (!v.is_number()) fail(line, "%d format: a real number is required, not " + type_name(v));
      if (v.is(value::kind::floating)) {
        // Python prints the float's integer part exactly, however large; inf and nan have none.
        const double whole = std::trunc(v.as_float());
        if (!std::isfinite(whole)) fail(line, "%d format: cannot convert " + float_repr(v.as_float()) + " to an integer");
        char buf[512];
        std::snprintf(buf, sizeof(buf), "%.0f", whole == 0.0 ? 0.0 : whole);
        out += buf;
      } else {
        out += std::to_string(int_of(v));
      }
    } else if (conv == 'f') {
      if (!v.is_number()) fail(line, "%f format: a real number is required, not " + type_name(v));
      char buf[512];
      std::snprintf(buf, sizeof(buf), "%.*f", precision < 0 ? 6 : precision, v.to_double());
      out += buf;
    } else {
      fail(line, std::string("unsupported format character '") + conv + "'", error_code::unsupported);
    }
    r.check_size(out.size(), line);
  }
  if (next < items.size() && args.is_list()) fail(line, "not all arguments converted during string formatting");
  return value(std::move(out));
}

}  // namespace

value binary_op(renderer& r, op_kind op, const value& a, const value& b, int line) {
  if (op == op_kind::concat) {
    std::string s = to_str(a);
    const std::string t = to_str(b);
    r.check_size(s.size() + t.size(), line);
    return value(s + t);
  }
  if (op == op_kind::in) return value(contains(a, b, line));
  if (op == op_kind::not_in) return value(!contains(a, b, line));
  require_defined(a, line);
  require_defined(b, line);
  if (is_int_like(a) && is_int_like(b)) return int_arith(op, int_of(a), int_of(b), line);
  if (a.is_number() && b.is_number()) return float_arith(op, a.to_double(), b.to_double(), line);
  if (op == op_kind::add) {
    if (a.is_string() && b.is_string()) {
      r.check_size(a.as_string().size() + b.as_string().size(), line);
      return value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      r.check_items(a.as_list().size() + b.as_list().size(), line);
      value_list out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return value(std::move(out));
    }
  }
  if (op == op_kind::mul) {
    if ((a.is_string() || a.is_list()) && is_int_like(b)) return repeat(r, a, int_of(b), line);
    if ((b.is_string() || b.is_list()) && is_int_like(a)) return repeat(r, b, int_of(a), line);
  }
  if (op == op_kind::mod && a.is_string()) return printf_format(r, a.as_string(), b, line);
  unsupported_operands(op, a, b, line);
}

std::shared_ptr<const value_list> iterate(const value& v, int line) {
  switch (v.type()) {
    case value::kind::undefined: return std::make_shared<const value_list>();
    case value::kind::list: return v.list_ptr();
    case value::kind::map:
    case value::kind::ns: {
      const value_map& m = v.is_map() ? v.as_map() : v.as_ns().attrs;
      value_list keys;
      keys.reserve(m.entries.size());
      for (const auto& e : m.entries) keys.emplace_back(e.first);
      return std::make_shared<const value_list>(std::move(keys));
    }
    case value::kind::string: {
      const std::string& s = v.as_string();
      const auto offsets = code_point_offsets(s);
      value_list chars;
      chars.reserve(offsets.size() - 1);
      for (std::size_t i = 0; i + 1 < offsets.size(); ++i) chars.emplace_back(s.substr(offsets[i], offsets[i + 1] - offsets[i]));
      return std::make_shared<const value_list>(std::move(chars));
    }
    default: fail(line, "'" + type_name(v) + "' object is not iterable");
  }
}

std::int64_t length_of(const value& v, int line) {
  switch (v.type()) {
    case value::kind::undefined: return 0;
    case value::kind::string: return static_cast<std::int64_t>(code_point_count(v.as_string()));
    case value::kind::list: return static_cast<std::int64_t>(v.as_list().size());
    case value::kind::map: return static_cast<std::int64_t>(v.as_map().entries.size());
    default: fail(line, "object of type '" + type_name(v) + "' has no len()");
  }
}

}  // namespace actorserve::protocol::jinja
