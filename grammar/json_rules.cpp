#include "grammar/json_rules.hpp"

#include <fmt/format.h>

#include "grammar/utf8_class.hpp"

namespace actorserve::grammar {
namespace {

expr hex() {
  byte_set s = byte_set::range('0', '9');
  s.set_range('a', 'f');
  s.set_range('A', 'F');
  return bytes(s);
}

/// The escapes after a backslash, each a flat sequence (no helper rule: a rule shared by every
/// place a string character is used would make the tokens after an escape depend on the stack).
std::vector<expr> escapes() {
  byte_set simple;
  for (char c : std::string_view("\"\\/bfnrt")) simple.set(static_cast<uint8_t>(c));
  // \uXXXX for any code point outside the surrogates D800-DFFF.
  byte_set first = byte_set::range('0', '9');
  first.set_range('a', 'c');
  first.set_range('A', 'C');
  first.set_range('e', 'f');
  first.set_range('E', 'F');
  byte_set d;
  d.set('d');
  d.set('D');
  return {seq({byte('\\'), bytes(simple)}), seq({byte('\\'), byte('u'), bytes(first), hex(), hex(), hex()}),
          seq({byte('\\'), byte('u'), bytes(d), bytes(byte_set::range('0', '7')), hex(), hex()})};
}

}  // namespace

expr json_rules::comma() { return seq({byte(','), opt(byte(' '))}); }
expr json_rules::colon() { return seq({byte(':'), opt(byte(' '))}); }

std::string json_rules::quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '\b') out += "\\b";
    else if (c == '\f') out += "\\f";
    else if (u < 0x20) out += fmt::format("\\u{:04x}", u);
    else out.push_back(c);
  }
  return out + "\"";
}

expr json_rules::string_char() {
  // Everything but controls, '"' and '\' as UTF-8, or an escape.
  const code_ranges plain = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, max_code_point}};
  std::vector<expr> alts{utf8_class(plain)};
  for (expr& e : escapes()) alts.push_back(std::move(e));
  return alt(std::move(alts));
}

rule_id json_rules::string() {
  if (!string_) string_ = b_.add("json_string", seq({byte('"'), star(string_char()), byte('"')}));
  return *string_;
}

rule_id json_rules::key() {
  if (!key_) key_ = b_.add("json_key", seq({byte('"'), star(string_char()), byte('"')}));
  return *key_;
}

rule_id json_rules::integer() {
  if (!integer_)
    integer_ = b_.add("json_integer", seq({opt(byte('-')), alt({byte('0'), seq({bytes(byte_set::range('1', '9')),
                                                                             star(bytes(byte_set::range('0', '9')))})})}));
  return *integer_;
}

rule_id json_rules::number() {
  if (!number_) {
    const expr digits = plus(bytes(byte_set::range('0', '9')));
    byte_set e;
    e.set('e');
    e.set('E');
    byte_set sign;
    sign.set('+');
    sign.set('-');
    number_ = b_.add("json_number", seq({opt(byte('-')),
                                         alt({byte('0'), seq({bytes(byte_set::range('1', '9')),
                                                              star(bytes(byte_set::range('0', '9')))})}),
                                         opt(seq({byte('.'), digits})), opt(seq({bytes(e), opt(bytes(sign)), digits}))}));
  }
  return *number_;
}

void json_rules::make_containers() {
  if (value_) return;
  value_ = b_.declare("json_value");
  object_ = b_.declare("json_object");
  array_ = b_.declare("json_array");
  const expr member = seq({ref(key()), colon(), ref(*value_)});
  b_.define(*object_, seq({byte('{'), opt(seq({member, star(seq({comma(), member}))})), byte('}')}));
  b_.define(*array_, seq({byte('['), opt(seq({ref(*value_), star(seq({comma(), ref(*value_)}))})), byte(']')}));
  b_.define(*value_, alt({ref(*object_), ref(*array_), ref(string()), ref(number()), lit("true"), lit("false"),
                          lit("null")}));
}

rule_id json_rules::value() {
  make_containers();
  return *value_;
}

rule_id json_rules::object() {
  make_containers();
  return *object_;
}

rule_id json_rules::array() {
  make_containers();
  return *array_;
}

}  // namespace actorserve::grammar
