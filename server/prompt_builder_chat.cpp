#include <fmt/format.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "protocol/chat_template/chat_template.hpp"
#include "protocol/tokenizer/tokenizer.hpp"
#include "server/prompt_builder.hpp"

namespace actorserve::server {

struct prompt_builder::chat_state {
  std::optional<protocol::chat_template> tpl;  ///< nullopt: the model has no chat template
  std::optional<protocol::chat_template> tool_use;  ///< the model's `tool_use` named template
  std::optional<std::string> bos, eos;         ///< nullopt: undefined in the template
};

namespace {
/// tokenizer_config.json's token string, else the vocabulary string of the id the tokenizer knows.
std::optional<std::string> special_text(const std::string& configured, std::optional<int32_t> id,
                                        const protocol::tokenizer& tok) {
  if (!configured.empty()) return configured;
  if (id) return tok.id_to_token(*id);
  return std::nullopt;
}
}  // namespace

prompt_builder::prompt_builder(const protocol::tokenizer& tok, std::unique_ptr<chat_state> chat)
    : tok_(tok), chat_(std::move(chat)) {}
prompt_builder::~prompt_builder() = default;

result<std::unique_ptr<prompt_builder>> prompt_builder::create(const protocol::tokenizer& tok,
                                                               const std::string& template_file) {
  std::string source = tok.chat_template();
  if (!template_file.empty()) {
    std::ifstream in(template_file, std::ios::binary);
    if (!in) return make_error(error_code::not_found, "--chat-template: cannot read " + template_file);
    std::ostringstream text;
    text << in.rdbuf();
    source = text.str();
  }
  auto chat = std::make_unique<chat_state>();
  chat->bos = special_text(tok.bos_token(), tok.bos_token_id(), tok);
  const auto& eos_ids = tok.eos_token_ids();
  chat->eos = special_text(tok.eos_token(), eos_ids.empty() ? std::nullopt : std::optional<int32_t>(eos_ids[0]), tok);
  if (!source.empty()) {
    auto tpl = protocol::chat_template::parse(source);
    if (!tpl) return make_error(tpl.err().code, "--chat-template: " + tpl.err().message);
    chat->tpl = std::move(*tpl);
  }
  if (const std::string* named = tok.chat_template("tool_use"); named && template_file.empty()) {
    auto tpl = protocol::chat_template::parse(*named);
    if (!tpl) return make_error(tpl.err().code, "tokenizer_config.json: chat template tool_use: " + tpl.err().message);
    chat->tool_use = std::move(*tpl);
  }
  return std::unique_ptr<prompt_builder>(new prompt_builder(tok, std::move(chat)));
}

result<std::string> prompt_builder::render_chat(const std::vector<protocol::openai::chat_message>& messages,
                                                bool add_generation_prompt, const chat_extras& extras) const {
  const bool tools = !extras.tools.is_null();
  const protocol::chat_template* tpl = tools && chat_->tool_use ? &*chat_->tool_use
                                       : chat_->tpl               ? &*chat_->tpl
                                                                  : nullptr;
  if (!tpl)
    return make_error(error_code::invalid_argument,
                      "messages: the model has no chat template; start the server with --chat-template FILE");
  protocol::chat_template_inputs in;
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = chat_->bos;
  in.eos_token = chat_->eos;
  in.tools = extras.tools;
  in.extra = extras.template_kwargs;
  in.documents = extras.documents;
  in.messages.reserve(messages.size());
  for (const auto& m : messages) {
    protocol::chat_value::object obj{{"role", m.role}, {"content", m.content}};
    if (!m.name.empty()) obj.emplace_back("name", m.name);
    if (!m.tool_call_id.empty()) obj.emplace_back("tool_call_id", m.tool_call_id);
    if (!m.tool_calls.is_null()) obj.emplace_back("tool_calls", m.tool_calls);
    if (!m.reasoning_content.empty()) obj.emplace_back("reasoning_content", m.reasoning_content);
    in.messages.emplace_back(std::move(obj));
  }
  auto text = protocol::apply_chat_template(*tpl, in);
  if (!text) return make_error(text.err().code, "messages: " + text.err().message);
  return text;
}

}  // namespace actorserve::server
