// tokenizer::max_input_bytes_per_token: how many input bytes one token can cover at most, so
// that a prompt too long for the context is refused by its byte length before it is tokenized.
#include <algorithm>

#include "protocol/tokenizer/tokenizer.hpp"
#include "protocol/tokenizer/tokenizer_impl.hpp"

namespace actorserve::protocol {
namespace {

/// How many times shorter normalization can make a text (nullopt: it can delete text).
std::optional<int64_t> normalizer_shrink(const detail::tokenizer_impl& t) {
  int64_t factor = 1;
  for (const auto& n : t.normalizers) {
    switch (n.type) {
      case detail::normalizer_step::kind::prepend: break;
      case detail::normalizer_step::kind::replace:
        if (n.content.empty()) return std::nullopt;
        factor *= std::max<int64_t>(1, static_cast<int64_t>((n.pattern.size() + n.content.size() - 1) / n.content.size()));
        break;
      // Composition at most turns three 3-byte Hangul jamo into one 3-byte syllable.
      case detail::normalizer_step::kind::unicode: factor *= 3; break;
    }
  }
  return factor;
}

}  // namespace

std::optional<int64_t> tokenizer::max_input_bytes_per_token() const {
  const auto& t = *impl_;
  for (const auto& s : t.splitters)
    if (s.removes()) return std::nullopt;
  const auto& m = t.model;
  // Without byte-level symbols or byte fallback, a character outside the vocabulary becomes one
  // unknown token (at most 4 bytes), a fused run of them one token, or nothing at all.
  int64_t longest = 1;
  if (!m.byte_level && !m.byte_fallback) {
    if (m.unk_id < 0 || m.fuse_unk) return std::nullopt;
    longest = 4;
  }
  const auto shrink = normalizer_shrink(t);
  if (!shrink) return std::nullopt;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    const int32_t one[] = {id};
    longest = std::max<int64_t>(longest, static_cast<int64_t>(decode(one, false).size()));
  }
  // One byte more: a decoder may strip the leading space that a single token stands for.
  return (longest + 1) * *shrink;
}

}  // namespace actorserve::protocol
