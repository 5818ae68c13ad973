#pragma once
/// Turns API prompts into token ids: completions text or ids, chat messages through the chat
/// template (--chat-template file, else the tokenizer's). Errors name the request field.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.hpp"
#include "protocol/openai/types.hpp"

namespace actorserve::protocol { class tokenizer; }

namespace actorserve::server {

/// What a chat render passes to the template besides the messages.
struct chat_extras {
  protocol::chat_value tools;             ///< the `tools` variable (null: tools=None)
  protocol::chat_value template_kwargs;   ///< chat_template_kwargs: further variables, or null
  protocol::chat_value documents;         ///< the `documents` variable, or null
};

class prompt_builder {
 public:
  /// `template_file` overrides the tokenizer's template when non-empty; an unreadable or
  /// unparsable template is an error naming --chat-template.
  static result<std::unique_ptr<prompt_builder>> create(const protocol::tokenizer& tok,
                                                        const std::string& template_file);
  ~prompt_builder();

  /// Token ids of one completions prompt (text gets the tokenizer's special tokens, e.g. BOS,
  /// when `add_special_tokens`).
  result<std::vector<int32_t>> completion_prompt(const protocol::openai::prompt_input& p,
                                                 bool add_special_tokens = true) const;
  /// The rendered chat prompt text. With tools, a `tool_use` named template is preferred over
  /// the default one, as transformers chooses.
  result<std::string> render_chat(const std::vector<protocol::openai::chat_message>& messages,
                                  bool add_generation_prompt, const chat_extras& extras = {}) const;
  /// Token ids of the rendered chat prompt (the template writes BOS itself, so special tokens
  /// are added only when asked).
  result<std::vector<int32_t>> chat_prompt(const std::vector<protocol::openai::chat_message>& messages,
                                           bool add_generation_prompt, const chat_extras& extras = {},
                                           bool add_special_tokens = false) const;
  const protocol::tokenizer& tokenizer() const { return tok_; }
  /// Refuses a prompt text over `max_bytes` before tokenizing it (0: no bound): such a text has
  /// more than `max_model_len` tokens (tokenizer::max_input_bytes_per_token).
  void bound_text_bytes(int64_t max_bytes, int64_t max_model_len);

 private:
  status check_text_bytes(std::string_view text, std::string_view field) const;
  struct chat_state;
  prompt_builder(const protocol::tokenizer& tok, std::unique_ptr<chat_state> chat);
  const protocol::tokenizer& tok_;
  std::unique_ptr<chat_state> chat_;
  int64_t max_text_bytes_ = 0;
  int64_t max_model_len_ = 0;
};

}  // namespace actorserve::server
