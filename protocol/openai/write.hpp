#pragma once
/// Response serializers: completion / chat.completion objects, streaming chunks, usage, logprobs
/// in the shapes OpenAI's two endpoints use, and OpenAI error objects.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/json/writer.hpp"
#include "protocol/openai/types.hpp"

namespace actorserve::protocol::openai {

/// What a response includes beyond text.
struct output_flags {
  bool logprobs = false;          ///< write logprobs objects (else "logprobs": null)
  bool return_token_ids = false;  ///< write token_ids / prompt_token_ids (vLLM)
  bool include_usage = false;     ///< streaming: "usage": null on every chunk, usage chunk last
};

/// One streamed update of one choice.
struct chunk_delta {
  int32_t index = 0;
  bool first = false;                          ///< chat: carries "role": "assistant"
  std::string_view text;
  std::span<const int32_t> token_ids;          ///< written when return_token_ids
  std::span<const int32_t> prompt_token_ids;   ///< written when return_token_ids and non-empty
  std::span<const token_logprob> logprobs;     ///< written when flags.logprobs
  int64_t text_offset = 0;                     ///< completions: offset of `text` in the choice
  std::string_view finish_reason;              ///< empty: null
  std::string_view reasoning;                  ///< chat: written as reasoning_content when non-empty
  std::span<const tool_call_piece> tool_calls; ///< chat: written as tool_calls when non-empty
};

/// A whole /v1/completions response. `prompt_ids[p]` belongs to choices p*n .. p*n+n-1.
std::string write_completion(const response_meta& meta, std::span<const choice_result> choices,
                             const usage_info& usage, std::span<const std::vector<int32_t>> prompt_ids,
                             int32_t n, output_flags flags);
/// A whole /v1/chat/completions response.
std::string write_chat_completion(const response_meta& meta, std::span<const choice_result> choices,
                                  const usage_info& usage, std::span<const int32_t> prompt_ids,
                                  output_flags flags);

/// A `text_completion` streaming chunk.
std::string write_completion_chunk(const response_meta& meta, const chunk_delta& d, output_flags flags);
/// A `chat.completion.chunk`.
std::string write_chat_chunk(const response_meta& meta, const chunk_delta& d, output_flags flags);
/// The final chunk of include_usage: "choices": [] and the usage. `chat` picks the object name.
std::string write_usage_chunk(const response_meta& meta, bool chat, const usage_info& usage);

/// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"}.
void write_usage(json::writer& w, const usage_info& usage);
/// Completions-style logprobs: tokens, token_logprobs, top_logprobs (dicts), text_offset.
void write_completion_logprobs(json::writer& w, std::span<const token_logprob> lp, int64_t text_offset);
/// Chat-style logprobs: {"content": [{token, logprob, bytes, top_logprobs}]}.
void write_chat_logprobs(json::writer& w, std::span<const token_logprob> lp);

/// Streamed tool-call pieces as OpenAI writes them: [{index, id, type, function: {name,
/// arguments}}] on a call's first piece, [{index, function: {arguments}}] after.
void write_tool_call_pieces(json::writer& w, std::span<const tool_call_piece> pieces);

/// The value of an "error" key: {"message", "type", "param", "code"}; empty param/code are
/// written as null.
void write_error_object(json::writer& w, std::string_view message, std::string_view type, std::string_view param,
                        std::string_view code);
/// {"error": write_error_object's object}.
std::string write_error(std::string_view message, std::string_view type, std::string_view param,
                        std::string_view code);

/// /tokenize response.
std::string write_tokenize(std::span<const int32_t> tokens, int64_t max_model_len);
/// /detokenize response.
std::string write_detokenize(std::string_view text);
/// /v1/models response listing one model.
std::string write_models(std::string_view model, int64_t created, int64_t max_model_len);

}  // namespace actorserve::protocol::openai
