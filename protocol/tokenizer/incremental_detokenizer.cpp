#include "protocol/tokenizer/incremental_detokenizer.hpp"

#include <algorithm>

#include "protocol/tokenizer/byte_level.hpp"
#include "protocol/tokenizer/tokenizer_impl.hpp"
#include "protocol/tokenizer/utf8.hpp"

namespace actorserve::protocol {
namespace {

/// vLLM starts the window this many prompt tokens before the first generated one.
constexpr size_t initial_context = 5;

/// Raw bytes a byte-level decoder produces for `ids`.
std::string byte_level_bytes(const detail::tokenizer_impl& t, std::span<const int32_t> ids) {
  std::string bytes;
  for (int32_t id : ids) {
    const std::string* tok = t.token_of(id);
    if (!tok) continue;
    if (!t.byte_level_bytes.empty()) {
      bytes += t.byte_level_bytes[id];
    } else if (auto b = detail::byte_level_to_bytes(*tok)) {
      bytes += *b;
    } else {
      bytes += *tok;
    }
  }
  return bytes;
}

}  // namespace

incremental_detokenizer::incremental_detokenizer(tokenizer tok, std::span<const int32_t> prompt_ids,
                                                 bool skip_special_tokens)
    : tok_(std::move(tok)), skip_special_(skip_special_tokens) {
  std::vector<int32_t> kept;
  for (int32_t id : prompt_ids)
    if (keeps(id)) kept.push_back(id);
  size_t start = kept.size() > initial_context ? kept.size() - initial_context : 0;
  while (start > 0 && !boundary_safe_before(kept, start)) --start;
  window_.assign(kept.begin() + static_cast<std::ptrdiff_t>(start), kept.end());
  read_ = window_.size();
}

bool incremental_detokenizer::keeps(int32_t id) const {
  return tok_.impl().token_of(id) != nullptr && !(skip_special_ && tok_.is_special(id));
}

bool incremental_detokenizer::boundary_safe_before(std::span<const int32_t> ids, size_t k) const {
  const detail::tokenizer_impl& t = tok_.impl();
  if (t.decodes_byte_fallback() && t.is_byte_token(ids[k - 1]) && t.is_byte_token(ids[k])) return false;
  if (t.decodes_byte_level()) {
    size_t from = k > 4 ? k - 4 : 0;  // an unfinished character spans at most 3 bytes
    return detail::utf8_incomplete_tail(byte_level_bytes(t, ids.subspan(from, k - from))) == 0;
  }
  return true;
}

bool incremental_detokenizer::end_is_safe() const {
  const detail::tokenizer_impl& t = tok_.impl();
  // A byte-fallback run decodes as a unit (all of it becomes U+FFFD if it is not valid UTF-8).
  if (t.decodes_byte_fallback() && t.is_byte_token(window_.back())) return false;
  if (t.decodes_byte_level()) return detail::utf8_incomplete_tail(byte_level_bytes(t, window_)) == 0;
  return true;
}

std::string incremental_detokenizer::emit_pending() {
  std::span<const int32_t> all(window_);
  std::string prefix_text = tok_.decode(all.first(read_), false);
  std::string new_text = tok_.decode(all, false);
  std::string out = new_text.substr(std::min(prefix_text.size(), new_text.size()));
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(read_));
  read_ = window_.size();
  return out;
}

std::string incremental_detokenizer::push(int32_t id) {
  if (!keeps(id)) return {};
  window_.push_back(id);
  if (!end_is_safe()) return {};
  return emit_pending();
}

std::string incremental_detokenizer::flush() {
  if (read_ == window_.size()) return {};
  return emit_pending();
}

}  // namespace actorserve::protocol
