/// Python json.dumps, as Hugging Face's `tojson` filter calls it.
#include <algorithm>
#include <cmath>

#include "protocol/chat_template/renderer.hpp"
#include "protocol/chat_template/template_error.hpp"
#include "protocol/chat_template/utf8_text.hpp"

namespace actorserve::protocol::jinja {
namespace {

const char* hex_digits = "0123456789abcdef";

void append_u_escape(std::string& out, unsigned code) {
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += hex_digits[(code >> shift) & 15];
}

void append_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  const auto offsets = ensure_ascii && !is_ascii(s) ? code_point_offsets(s) : std::vector<std::size_t>{};
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20) {
      append_u_escape(out, c);
    } else if (c >= 0x80 && ensure_ascii) {
      const auto it = std::upper_bound(offsets.begin(), offsets.end(), i);
      const std::size_t end = *it;
      // decode the code point [i, end)
      unsigned cp = c;
      const std::size_t n = end - i;
      if (n > 1) {
        cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
        for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      }
      if (cp >= 0x10000) {
        cp -= 0x10000;
        append_u_escape(out, 0xD800 + (cp >> 10));
        append_u_escape(out, 0xDC00 + (cp & 0x3FF));
      } else {
        append_u_escape(out, cp);
      }
      i = end - 1;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

class json_writer {
 public:
  json_writer(const json_options& o, int line) : o_(o), line_(line) {
    item_sep_ = !o.item_sep.empty() ? o.item_sep : (o.has_indent ? "," : ", ");
  }

  void write(const value& v, int level) {
    if (level > 256) fail(line_, "tojson: value nested too deeply");
    switch (v.type()) {
      case value::kind::none: out_ += "null"; return;
      case value::kind::boolean: out_ += v.as_bool() ? "true" : "false"; return;
      case value::kind::integer: out_ += std::to_string(v.as_int()); return;
      case value::kind::floating: {
        const double d = v.as_float();
        if (std::isnan(d)) {
          out_ += "NaN";
        } else if (std::isinf(d)) {
          out_ += d < 0 ? "-Infinity" : "Infinity";
        } else {
          out_ += float_repr(d);
        }
        return;
      }
      case value::kind::string: append_string(out_, v.as_string(), o_.ensure_ascii); return;
      case value::kind::list: {
        const value_list& items = v.as_list();
        if (items.empty()) {
          out_ += "[]";
          return;
        }
        out_ += '[';
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i) out_ += item_sep_;
          newline(level + 1);
          write(items[i], level + 1);
        }
        newline(level);
        out_ += ']';
        return;
      }
      case value::kind::map: {
        const value_map& m = v.as_map();
        if (m.entries.empty()) {
          out_ += "{}";
          return;
        }
        std::vector<const std::pair<std::string, value>*> entries;
        for (const auto& e : m.entries) entries.push_back(&e);
        if (o_.sort_keys) {
          std::stable_sort(entries.begin(), entries.end(), [](auto* x, auto* y) { return x->first < y->first; });
        }
        out_ += '{';
        for (std::size_t i = 0; i < entries.size(); ++i) {
          if (i) out_ += item_sep_;
          newline(level + 1);
          append_string(out_, entries[i]->first, o_.ensure_ascii);
          out_ += o_.key_sep;
          write(entries[i]->second, level + 1);
        }
        newline(level);
        out_ += '}';
        return;
      }
      default: fail(line_, "Object of type " + type_name(v) + " is not JSON serializable");
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int level) {
    if (!o_.has_indent) return;
    out_ += '\n';
    for (int i = 0; i < level; ++i) out_ += o_.indent;
  }

  const json_options& o_;
  int line_;
  std::string item_sep_;
  std::string out_;
};

}  // namespace

std::string to_json(const value& v, const json_options& opts, int line) {
  json_writer w(opts, line);
  w.write(v, 0);
  return w.take();
}

}  // namespace actorserve::protocol::jinja
