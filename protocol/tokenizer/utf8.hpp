#pragma once
/// UTF-8 helpers shared by the tokenizer: lossy decoding with the "maximal subpart" rule (as
/// Rust's String::from_utf8_lossy, which Hugging Face decoders use), code point encoding, and the
/// checks the incremental detokenizer needs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace actorserve::protocol::detail {

/// The UTF-8 encoding of U+FFFD REPLACEMENT CHARACTER.
inline constexpr std::string_view replacement_char = "\xEF\xBF\xBD";

/// Length of the well-formed character starting at `s[i]`, or 0 when the bytes there are not one.
size_t utf8_char_len(std::string_view s, size_t i);
/// Appends `bytes` to `out`, replacing each maximal ill-formed subsequence with U+FFFD.
void append_utf8_lossy(std::string& out, std::string_view bytes);
/// True when `s` is well-formed UTF-8.
bool is_valid_utf8(std::string_view s);
/// Number of trailing bytes of `s` that form a truncated (still completable) character; 0 when
/// `s` ends on a character boundary or with bytes that can never become valid.
size_t utf8_incomplete_tail(std::string_view s);
/// Appends the UTF-8 encoding of code point `cp` (cp < 0x110000, not a surrogate).
void append_code_point(std::string& out, uint32_t cp);

}  // namespace actorserve::protocol::detail
