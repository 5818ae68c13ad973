#include "protocol/tokenizer/tokenizer.hpp"

#include "protocol/tokenizer/tokenizer_impl.hpp"

namespace actorserve::protocol {

std::vector<int32_t> tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  detail::encode_text(*impl_, text, add_special_tokens, out);
  return out;
}

std::string tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return detail::decode_ids(*impl_, ids, skip_special_tokens);
}

std::optional<std::string> tokenizer::token_bytes(int32_t id) const { return detail::token_bytes(*impl_, id); }

std::optional<std::string> tokenizer::id_to_token(int32_t id) const {
  if (const std::string* s = impl_->token_of(id)) return *s;
  return std::nullopt;
}

std::optional<int32_t> tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->token_to_id.find(token);
  if (it == impl_->token_to_id.end()) return std::nullopt;
  return it->second;
}

int32_t tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_token.size()); }

bool tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[id] != 0;
}

std::optional<int32_t> tokenizer::bos_token_id() const { return impl_->bos_id; }
const std::vector<int32_t>& tokenizer::eos_token_ids() const { return impl_->eos_ids; }
const std::string& tokenizer::bos_token() const { return impl_->bos_token; }
const std::string& tokenizer::eos_token() const { return impl_->eos_token; }
std::optional<bool> tokenizer::add_bos_token() const { return impl_->add_bos_token; }
const std::string& tokenizer::chat_template() const { return impl_->chat_template; }
const std::string* tokenizer::chat_template(std::string_view name) const {
  for (const auto& [n, text] : impl_->named_chat_templates)
    if (n == name) return &text;
  return nullptr;
}

}  // namespace actorserve::protocol
