#pragma once
/// Unicode normalization forms of the tokenizer.json normalizers NFC, NFD, NFKC and NFKD, through
/// utf8proc (Debian's libutf8proc).
#include <optional>
#include <string>
#include <string_view>

namespace actorserve::protocol::detail {

enum class unicode_form { nfc, nfd, nfkc, nfkd };

/// The form a normalizer "type" names ("NFC", "NFD", "NFKC", "NFKD"), else nothing.
std::optional<unicode_form> unicode_form_named(std::string_view type);

/// `text` in normalization form `form`. Bytes that are not valid UTF-8 make the text come back
/// unchanged (the API's text is valid UTF-8; the tokenizer still encodes other bytes losslessly).
std::string unicode_normalize(std::string_view text, unicode_form form);

}  // namespace actorserve::protocol::detail
