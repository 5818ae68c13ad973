#pragma once
/// One API request turned into engine requests: one generation_request per prompt (each with
/// `n` choices), plus what the response needs (ids, flags, meta). Checks prompt length.
#include <cstdint>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "config/error.hpp"
#include "protocol/chat_output/chat_output_parser.hpp"
#include "protocol/openai/types.hpp"
#include "protocol/openai/write.hpp"

namespace actorserve::server {

struct server_context;

struct job_spec {
  bool chat = false;
  bool stream = false;
  protocol::openai::output_flags flags;
  int32_t n = 1;
  protocol::openai::response_meta meta;
  std::vector<actors::generation_request> requests;  ///< one per prompt; choice = prompt*n + index
  std::vector<std::vector<int32_t>> prompt_ids;      ///< the same prompts (for return_token_ids)

  /// The engine sequences this job holds: prompts x n.
  int64_t num_sequences() const { return static_cast<int64_t>(requests.size()) * n; }
  /// Chat: the reasoning and tool-call parsers each choice's text goes through (none: plain text).
  protocol::chat_output::output_options output_parsing;
};

/// Tokenizes the prompts, applies defaults, checks lengths against max_model_len.
result<job_spec> make_completion_job(server_context& ctx, protocol::openai::completion_request&& r);
/// Renders the chat template, tokenizes, applies defaults, checks lengths.
result<job_spec> make_chat_job(server_context& ctx, protocol::openai::chat_request&& r);

}  // namespace actorserve::server
