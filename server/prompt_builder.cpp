#include "server/prompt_builder.hpp"

#include <fmt/format.h>

#include "protocol/tokenizer/tokenizer.hpp"

namespace actorserve::server {

result<std::vector<int32_t>> prompt_builder::completion_prompt(const protocol::openai::prompt_input& p,
                                                               bool add_special_tokens) const {
  if (!p.is_ids) return tok_.encode(p.text, add_special_tokens);
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
  return tok_.encode(*text, add_special_tokens);
}

}  // namespace actorserve::server
