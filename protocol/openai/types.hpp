#pragma once
/// OpenAI API requests as native types, parsed at the edge (JSON never travels inward), and the
/// pieces of a response that the serializers in write.hpp turn back into JSON.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/sampling_params.hpp"

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

/// POST /v1/completions.
struct completion_request {
  std::string model;
  std::vector<prompt_input> prompts;   ///< at least one
  sampling_params params;              ///< max_tokens holds 16 unless `max_tokens_set`
  bool max_tokens_set = false;
  bool logprobs = false;               ///< `logprobs` given (its value is params.num_logprobs)
  stream_options output;
};

/// One chat message; content parts are joined into `content`.
struct chat_message {
  std::string role;                    ///< system | user | assistant | tool
  std::string content;
  std::string name;                    ///< optional
  std::string tool_call_id;            ///< optional (role tool)
};

/// POST /v1/chat/completions.
struct chat_request {
  std::string model;
  std::vector<chat_message> messages;  ///< at least one
  sampling_params params;              ///< max_tokens meaningful only if `max_tokens_set`
  bool max_tokens_set = false;
  bool logprobs = false;               ///< `logprobs: true` (top_logprobs in params.num_logprobs)
  bool add_generation_prompt = true;   ///< vLLM extension
  stream_options output;
};

/// POST /tokenize (vLLM): either a prompt or chat messages.
struct tokenize_request {
  std::string model;
  bool is_chat = false;
  prompt_input prompt;                 ///< text only (is_chat false)
  std::vector<chat_message> messages;  ///< is_chat true
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
  std::string finish_reason = "stop";  ///< stop | length | cancelled | error
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
