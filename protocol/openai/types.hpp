#pragma once
/// OpenAI API requests as native types, parsed at the edge (JSON never travels inward), and the
/// pieces of a response that the serializers in write.hpp turn back into JSON.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/sampling_params.hpp"
#include "protocol/chat_template/chat_value.hpp"

namespace actorserve::protocol::openai {

/// One prompt of /v1/completions: text, or token ids when `is_ids`.
struct prompt_input {
  bool is_ids = false;
  std::string text;
  std::vector<int32_t> ids;
};

/// Options shared by both generation endpoints.
struct stream_options {
  bool stream = false;
  bool include_usage = false;          ///< stream_options.include_usage
  bool return_token_ids = false;       ///< vLLM: token_ids / prompt_token_ids in the response
};

/// A grammar the output must follow (structured outputs), as the request gave it; the server
/// compiles it (grammar/constraint.hpp).
struct output_constraint {
  enum class kind { none, json_object, json_schema, regex, choice };
  kind type = kind::none;
  std::string text;                  ///< json_schema: the schema (JSON text); regex: the pattern
  std::vector<std::string> choices;  ///< choice
  std::string field;                 ///< the request field it came from (errors name it)
};

/// The sampling fields a request gave; the others take generation_config.json's defaults.
struct given_fields {
  bool temperature = false;
  bool top_p = false;
  bool top_k = false;
  bool min_p = false;
  bool repetition_penalty = false;
};

/// POST /v1/completions.
struct completion_request {
  std::string model;
  std::vector<prompt_input> prompts;   ///< at least one
  sampling_params params;              ///< max_tokens holds 16 unless `max_tokens_set`
  bool max_tokens_set = false;
  given_fields given;
  bool logprobs = false;               ///< `logprobs` given (its value is params.num_logprobs)
  bool add_special_tokens = true;      ///< vLLM: text prompts get BOS etc.
  int32_t priority = 0;                ///< vLLM: lower is served first
  stream_options output;
  output_constraint constraint;        ///< response_format / guided_* / structured_outputs
};

/// One chat message; content parts are joined into `content`.
struct chat_message {
  std::string role;                    ///< system | user | assistant | tool
  std::string content;
  std::string name;                    ///< optional
  std::string tool_call_id;            ///< optional (role tool)
  std::string reasoning_content;       ///< optional (assistant): earlier reasoning, for templates
  /// Assistant tool calls as templates read them: [{id, type, function: {name, arguments}}]
  /// with `arguments` decoded from its JSON string into an object (as vLLM passes it); or null.
  chat_value tool_calls;
};

/// One function tool of a chat request.
struct tool_function {
  std::string name;
  std::string parameters_json;         ///< its parameters' JSON schema (minified); empty when none
};

/// tool_choice: `auto` (the model may call tools), `none` (its output is plain content),
/// `required` (it calls at least one tool) or `function` (it calls the named one).
enum class tool_choice_mode { automatic, none, required, function };

/// POST /v1/chat/completions.
struct chat_request {
  std::string model;
  std::vector<chat_message> messages;  ///< at least one
  sampling_params params;              ///< max_tokens meaningful only if `max_tokens_set`
  bool max_tokens_set = false;
  given_fields given;
  bool logprobs = false;               ///< `logprobs: true` (top_logprobs in params.num_logprobs)
  bool add_generation_prompt = true;   ///< vLLM extension
  bool add_special_tokens = false;     ///< vLLM: the template writes BOS itself
  int32_t priority = 0;                ///< vLLM: lower is served first
  chat_value tools;                    ///< function tools as given (the template's `tools`), or null
  std::vector<tool_function> tool_functions;  ///< the same tools' names and parameters
  tool_choice_mode tool_choice = tool_choice_mode::automatic;
  std::string tool_choice_function;    ///< tool_choice function: the function's name
  bool parallel_tool_calls = true;     ///< false: at most one tool call is returned
  chat_value chat_template_kwargs;     ///< vLLM: extra template variables (an object), or null
  chat_value documents;                ///< vLLM: the template's `documents`, or null
  stream_options output;
  output_constraint constraint;        ///< response_format / guided_* / structured_outputs
};

/// One complete tool call of a response.
struct tool_call {
  std::string id;
  std::string name;
  std::string arguments;               ///< JSON text, as the model wrote it
};

/// A streamed piece of a tool call: the first piece of a call carries its id and name.
struct tool_call_piece {
  int32_t index = 0;                   ///< the call's position in the choice's tool_calls
  std::string id;                      ///< non-empty only on the call's first piece
  std::string name;                    ///< non-empty only on the call's first piece
  std::string arguments;               ///< the next piece of the arguments text
};

/// POST /tokenize (vLLM): either a prompt or chat messages.
struct tokenize_request {
  std::string model;
  bool is_chat = false;
  prompt_input prompt;                 ///< text only (is_chat false)
  std::vector<chat_message> messages;  ///< is_chat true
  chat_value tools;                    ///< the template's `tools` (is_chat), or null
  chat_value chat_template_kwargs;     ///< extra template variables (is_chat), or null
  bool add_special_tokens = true;
  bool add_generation_prompt = true;
};

/// POST /detokenize (vLLM).
struct detokenize_request {
  std::string model;
  std::vector<int32_t> tokens;
};

/// One alternative in a top-logprobs list.
struct top_logprob {
  std::string token;                   ///< the token's text (may be a partial UTF-8 sequence)
  float logprob = 0.0f;
};

/// The logprob of one generated token and its top alternatives (best first).
struct token_logprob {
  std::string token;
  float logprob = 0.0f;
  std::vector<top_logprob> top;
};

/// One finished choice of a non-streaming response.
struct choice_result {
  int32_t index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<token_logprob> logprobs;
  std::string finish_reason = "stop";  ///< stop | length | tool_calls | cancelled | error
  /// Chat with a reasoning parser: the text inside <think>...</think> (`text` holds the rest).
  std::optional<std::string> reasoning;
  std::vector<tool_call> tool_calls;   ///< chat with a tool-call parser
};

struct usage_info {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

/// What every response object repeats: id, creation time, model name.
struct response_meta {
  std::string id;
  int64_t created = 0;
  std::string model;
};

}  // namespace actorserve::protocol::openai
