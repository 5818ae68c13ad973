#include "server/prompt_builder.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "protocol/tokenizer/tokenizer.hpp"

namespace actorserve::server {

void prompt_builder::bound_text_bytes(int64_t max_bytes, int64_t max_model_len) {
  max_text_bytes_ = max_bytes;
  max_model_len_ = max_model_len;
}

status prompt_builder::check_text_bytes(std::string_view text, std::string_view field) const {
  if (max_text_bytes_ <= 0 || static_cast<int64_t>(text.size()) <= max_text_bytes_) return {};
  return make_error(error_code::invalid_argument,
                    fmt::format("{}: this model's maximum context length is {} tokens, and a prompt of {} bytes "
                                "has more tokens than that (this tokenizer's tokens cover at most {} bytes of "
                                "text each)",
                                field, max_model_len_, text.size(), max_text_bytes_ / std::max<int64_t>(1, max_model_len_)));
}

result<std::vector<int32_t>> prompt_builder::completion_prompt(const protocol::openai::prompt_input& p,
                                                               bool add_special_tokens) const {
  if (!p.is_ids) {
    if (auto st = check_text_bytes(p.text, "prompt"); !st) return st.err();
    return tok_.encode(p.text, add_special_tokens);
  }
  const int32_t vocab = tok_.vocab_size();
  for (int32_t id : p.ids)
    if (id >= vocab)
      return make_error(error_code::invalid_argument,
                        fmt::format("prompt: token id {} is out of range (vocabulary size {})", id, vocab));
  return p.ids;
}

result<std::vector<int32_t>> prompt_builder::chat_prompt(
    const std::vector<protocol::openai::chat_message>& messages, bool add_generation_prompt,
    const chat_extras& extras, bool add_special_tokens) const {
  auto text = render_chat(messages, add_generation_prompt, extras);
  if (!text) return text.err();
  if (auto st = check_text_bytes(*text, "messages"); !st) return st.err();
  return tok_.encode(*text, add_special_tokens);
}

}  // namespace actorserve::server
