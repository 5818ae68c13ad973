#pragma once
/// The WebSocket protocol on GET /v1/stream (docs/websocket.md): many requests multiplexed on
/// one connection, each tagged with a client-chosen id. Text frames, one JSON object each.
#include <string>
#include <string_view>

#include "config/error.hpp"
#include "protocol/openai/write.hpp"

namespace actorserve::protocol::websocket {

enum class message_type { completions, chat, cancel };

/// {"type": "completions"|"chat", "id": "...", "body": {...}} or {"type": "cancel", "id": "..."}.
struct client_message {
  message_type type = message_type::completions;
  std::string id;
  std::string body;   ///< the request body as JSON text (empty for cancel)
};

/// Parses one client frame; errors name the field ("type: ...", "id: ...", "body: ...").
result<client_message> parse_client_message(std::string_view text);

/// {"type":"delta","id",...,"index","text","finish_reason"[,"token_ids"][,"logprobs"]}; the
/// logprobs take the chat or completions shape after `chat`.
std::string write_delta_frame(std::string_view id, const openai::chunk_delta& d, bool chat,
                              openai::output_flags flags);
/// {"type":"done","id",...,"usage":{...}}: the last frame of a request.
std::string write_done_frame(std::string_view id, const openai::usage_info& usage);
/// {"type":"error","id":...|null,"error":{message,type,param,code}}; ends the request.
std::string write_error_frame(std::string_view id, std::string_view message, std::string_view type,
                              std::string_view param, std::string_view code);

}  // namespace actorserve::protocol::websocket
