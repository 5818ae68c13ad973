#include "protocol/chat_template/lexer.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "protocol/chat_template/template_error.hpp"
#include "protocol/chat_template/utf8_text.hpp"

namespace actorserve::protocol::jinja {
namespace {

/// Longest operators first, so "//" wins over "/".
constexpr const char* operators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "(",
                                     ")",  "[",  "]",  "{",  "}",  ",",  ".", ":", "|", "=", "<", ">", ";"};

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_tag_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void append_utf8(std::string& out, unsigned long cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// Python "unicode-escape" decoding of a string literal body.
std::string unescape(std::string_view body) {
  std::string out;
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    auto hex_escape = [&](std::size_t digits) {
      unsigned long cp = 0;
      for (std::size_t k = 1; k <= digits; ++k) {
        if (i + k >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[i + k]))) return false;
        const char h = body[i + k];
        cp = cp * 16 + static_cast<unsigned long>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      if (cp > 0x10FFFF) return false;
      append_utf8(out, cp);
      i += digits;
      return true;
    };
    switch (c) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
        if (!hex_escape(2)) out += "\\x";
        break;
      case 'u':
        if (!hex_escape(4)) out += "\\u";
        break;
      case 'U':
        if (!hex_escape(8)) out += "\\U";
        break;
      default:
        if (c >= '0' && c <= '7') {
          unsigned long cp = 0;
          std::size_t k = 0;
          while (k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7') {
            cp = cp * 8 + static_cast<unsigned long>(body[i + k] - '0');
            ++k;
          }
          append_utf8(out, cp);
          i += k - 1;
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class lexer {
 public:
  explicit lexer(std::string_view source) : src_(normalize_source(source)) {}

  std::vector<token> run() {
    while (pos_ < src_.size()) {
      const std::size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit(token_kind::data, src_.substr(pos_), line_);
        break;
      }
      const char type = src_[tag + 1];
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
      std::string text = src_.substr(pos_, tag - pos_);
      const int text_line = line_;
      line_ += static_cast<int>(std::count(text.begin(), text.end(), '\n'));
      strip_before(text, type, sign);
      if (!text.empty()) emit(token_kind::data, std::move(text), text_line);
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (type == '#') {
        comment();
      } else if (type == '%' && raw_block()) {
        continue;
      } else {
        tag_body(type == '%');
      }
    }
    tokens_.push_back(token{token_kind::eof, {}, line_});
    return std::move(tokens_);
  }

 private:
  std::size_t find_tag(std::size_t from) const {
    for (std::size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
    }
    return std::string::npos;
  }

  void strip_before(std::string& text, char type, char sign) const {
    if (sign == '-') {
      text = py_strip(text, nullptr, false, true);
      return;
    }
    if (sign == '+' || type == '{') return;
    const std::size_t nl = text.rfind('\n');
    const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return;
    if (l_pos == text.size()) return;
    const std::string rest = text.substr(l_pos);
    if (py_strip(rest, nullptr, true, true).empty()) text.resize(l_pos);
  }

  /// After a tag end: '-' strips all following whitespace; no sign applies trim_blocks if asked.
  void after_tag_end(char sign, bool trim_newline) {
    if (sign == '-') {
      std::size_t e = pos_;
      while (e < src_.size() && is_tag_space(src_[e])) ++e;
      line_ += static_cast<int>(std::count(src_.begin() + static_cast<long>(pos_), src_.begin() + static_cast<long>(e), '\n'));
      pos_ = e;
    } else if (sign == 0 && trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  void comment() {
    const int start_line = line_;
    const std::size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail(start_line, "missing end of comment tag");
    const char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<long>(pos_), src_.begin() + static_cast<long>(end), '\n'));
    pos_ = end + 2;
    after_tag_end(sign, true);
  }

  /// Matches `[-+]? \s* name \s* [-+]? %}` at `at`; returns the position after it, or npos.
  std::size_t match_simple_tag(std::size_t at, std::string_view name, char& end_sign) const {
    std::size_t p = at;
    while (p < src_.size() && is_tag_space(src_[p])) ++p;
    if (src_.compare(p, name.size(), name) != 0) return std::string::npos;
    p += name.size();
    if (p < src_.size() && is_name_char(src_[p])) return std::string::npos;
    while (p < src_.size() && is_tag_space(src_[p])) ++p;
    end_sign = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) end_sign = src_[p++];
    if (src_.compare(p, 2, "%}") != 0) return std::string::npos;
    return p + 2;
  }

  bool raw_block() {
    char sign = 0;
    const std::size_t after = match_simple_tag(pos_, "raw", sign);
    if (after == std::string::npos) return false;
    const int start_line = line_;
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<long>(pos_), src_.begin() + static_cast<long>(after), '\n'));
    pos_ = after;
    after_tag_end(sign, true);
    for (std::size_t p = src_.find("{%", pos_); p != std::string::npos; p = src_.find("{%", p + 1)) {
      const std::size_t inner = p + 2;
      const char begin_sign = inner < src_.size() && (src_[inner] == '-' || src_[inner] == '+') ? src_[inner] : 0;
      char end_sign = 0;
      const std::size_t end = match_simple_tag(inner + (begin_sign ? 1 : 0), "endraw", end_sign);
      if (end == std::string::npos) continue;
      std::string body = src_.substr(pos_, p - pos_);
      strip_before(body, '%', begin_sign);
      line_ += static_cast<int>(std::count(src_.begin() + static_cast<long>(pos_), src_.begin() + static_cast<long>(end), '\n'));
      if (!body.empty()) emit(token_kind::data, std::move(body), start_line);
      pos_ = end;
      after_tag_end(end_sign, true);
      return true;
    }
    fail(start_line, "missing {% endraw %}");
  }

  void tag_body(bool block) {
    const int start_line = line_;
    emit(block ? token_kind::block_begin : token_kind::var_begin, {}, line_);
    std::vector<char> balance;
    while (true) {
      while (pos_ < src_.size() && is_tag_space(src_[pos_])) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size()) fail(start_line, block ? "missing end of block tag '%}'" : "missing end of expression '}}'");
      if (balance.empty() && tag_end(block)) return;
      const char c = src_[pos_];
      if (c == '"' || c == '\'') {
        string_literal(c);
      } else if (is_digit(c)) {
        number();
      } else if (is_name_start(c)) {
        std::size_t e = pos_;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        emit(token_kind::name, src_.substr(pos_, e - pos_), line_);
        pos_ = e;
      } else {
        operator_token(balance);
      }
    }
  }

  bool tag_end(bool block) {
    const char* close = block ? "%}" : "}}";
    char sign = 0;
    std::size_t p = pos_;
    if (src_[p] == '-' || (block && src_[p] == '+')) sign = src_[p++];
    if (src_.compare(p, 2, close) != 0) return false;
    emit(block ? token_kind::block_end : token_kind::var_end, {}, line_);
    pos_ = p + 2;
    after_tag_end(sign, block);
    return true;
  }

  void string_literal(char quote) {
    const int start_line = line_;
    std::size_t p = pos_ + 1;
    while (p < src_.size() && src_[p] != quote) {
      if (src_[p] == '\\') ++p;
      ++p;
    }
    if (p >= src_.size()) fail(start_line, "unterminated string literal");
    const std::string_view body(src_.data() + pos_ + 1, p - pos_ - 1);
    line_ += static_cast<int>(std::count(body.begin(), body.end(), '\n'));
    emit(token_kind::string, unescape(body), start_line);
    pos_ = p + 1;
  }

  void number() {
    std::size_t p = pos_;
    auto digits = [&] {
      while (p < src_.size() && (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1])))) ++p;
    };
    digits();
    bool is_float = false;
    const bool after_dot = !tokens_.empty() && tokens_.back().kind == token_kind::op && tokens_.back().text == ".";
    if (!after_dot && p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
      ++p;
      digits();
      is_float = true;
    }
    if (!after_dot && p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      std::size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        p = q;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (std::size_t i = pos_; i < p; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    emit(is_float ? token_kind::floating : token_kind::integer, std::move(text), line_);
    pos_ = p;
  }

  void operator_token(std::vector<char>& balance) {
    for (const char* op : operators) {
      const std::size_t n = std::strlen(op);
      if (src_.compare(pos_, n, op) != 0) continue;
      const char c = op[0];
      if (n == 1 && (c == '(' || c == '[' || c == '{')) {
        balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (n == 1 && (c == ')' || c == ']' || c == '}')) {
        if (balance.empty() || balance.back() != c) fail(line_, std::string("unexpected '") + c + "'");
        balance.pop_back();
      }
      emit(token_kind::op, op, line_);
      pos_ += n;
      return;
    }
    {
    const auto offsets = code_point_offsets(std::string_view(src_).substr(pos_, 4));
    fail(line_, "unexpected character '" + src_.substr(pos_, offsets.size() > 1 ? offsets[1] : 1) + "'");
  }
  }

  void emit(token_kind kind, std::string text, int line) { tokens_.push_back(token{kind, std::move(text), line}); }

  std::string src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<token> tokens_;
};

}  // namespace

std::vector<token> tokenize(std::string_view source) { return lexer(source).run(); }

}  // namespace actorserve::protocol::jinja
