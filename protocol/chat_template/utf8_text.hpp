#pragma once
/// Python str semantics over UTF-8 bytes: code-point indexing, Unicode whitespace for
/// strip()/split(), and case mapping (ASCII letters only; other characters pass unchanged).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace actorserve::protocol::jinja {

/// Byte offset of every code point in `s`, plus a final entry equal to s.size(). Invalid bytes
/// count as one code point each, so slicing never loses bytes.
std::vector<std::size_t> code_point_offsets(std::string_view s);
/// Number of code points (Python len()).
std::size_t code_point_count(std::string_view s);
/// True when `s` is pure ASCII (then byte offsets are code point offsets).
bool is_ascii(std::string_view s);

/// Python str.isspace() for one code point.
bool is_py_space(char32_t c);
/// Python str.strip()/lstrip()/rstrip(): with `chars` null, Unicode whitespace; else those chars.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
/// Python str.split(sep, maxsplit): sep null splits on whitespace runs.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, long maxsplit);

std::string ascii_upper(std::string_view s);
std::string ascii_lower(std::string_view s);
/// Python str.capitalize(): first character upper, the rest lower.
std::string py_capitalize(std::string_view s);
/// Python str.title(): a letter after a non-letter is upper, other letters lower.
std::string py_title(std::string_view s);
/// Jinja's `title` filter: words start after '-', whitespace, '(', '{', '[' or '<'.
std::string jinja_title(std::string_view s);
/// str.replace(old, new, count) with Python's semantics (count < 0: all).
std::string py_replace(std::string_view s, std::string_view from, std::string_view to, long count);

/// Python repr() of a str: single quotes unless the text has ' and no ".
std::string py_str_repr(std::string_view s);

/// Python int() of a string of ASCII digits used as an index: its value, or INT64_MAX where
/// it does not fit (Python's int has no bound; any index past INT64_MAX is out of range too).
std::int64_t decimal_index(std::string_view digits);

}  // namespace actorserve::protocol::jinja
