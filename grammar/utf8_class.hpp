#pragma once
/// Sets of Unicode code points as grammar expressions over UTF-8 bytes, raw or as the content of
/// a JSON string (with the characters JSON must escape written as escapes).
#include <cstdint>
#include <utility>
#include <vector>

#include "grammar/grammar.hpp"

namespace actorserve::grammar {

/// Inclusive code point ranges; kept sorted and merged by `normalize`.
using code_ranges = std::vector<std::pair<uint32_t, uint32_t>>;

inline constexpr uint32_t max_code_point = 0x10FFFF;

/// Sorts and merges overlapping or adjacent ranges; drops surrogates (D800-DFFF), which UTF-8
/// cannot carry.
code_ranges normalize(code_ranges r);
/// The code points not in `r` (over 0..10FFFF without surrogates).
code_ranges complement(const code_ranges& r);

/// The UTF-8 encodings of the code points in `r` (never() when empty).
expr utf8_class(const code_ranges& r);
/// The code points of `r` as they are written inside a JSON string: unescaped where JSON allows,
/// `\"`, `\\`, and for control characters \b \f \n \r \t or \u00XX (any hex case).
expr json_string_class(const code_ranges& r);
/// The UTF-8 encoding of one code point.
std::string utf8_encode(uint32_t cp);

}  // namespace actorserve::grammar
