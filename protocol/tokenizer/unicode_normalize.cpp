// Unicode normalization through utf8proc: utf8proc_map with an explicit length (so U+0000 is
// kept), composing (NFC, NFKC) or only decomposing (NFD, NFKD), compatibility mappings for the
// K forms, and STABLE (no unassigned code points touched), as Unicode's normalization defines.
#include "protocol/tokenizer/unicode_normalize.hpp"

#include <utf8proc.h>

#include <cstdlib>

namespace actorserve::protocol::detail {

std::optional<unicode_form> unicode_form_named(std::string_view type) {
  if (type == "NFC") return unicode_form::nfc;
  if (type == "NFD") return unicode_form::nfd;
  if (type == "NFKC") return unicode_form::nfkc;
  if (type == "NFKD") return unicode_form::nfkd;
  return std::nullopt;
}

std::string unicode_normalize(std::string_view text, unicode_form form) {
  if (text.empty()) return {};
  int options = UTF8PROC_STABLE;
  options |= (form == unicode_form::nfc || form == unicode_form::nfkc) ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
  if (form == unicode_form::nfkc || form == unicode_form::nfkd) options |= UTF8PROC_COMPAT;
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(text);  // not valid UTF-8: nothing is allocated
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace actorserve::protocol::detail
