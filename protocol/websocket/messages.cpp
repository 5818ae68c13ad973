#include "protocol/websocket/messages.hpp"

#include "protocol/openai/json_fields.hpp"

namespace actorserve::protocol::websocket {

using namespace actorserve::protocol::detail;

result<client_message> parse_client_message(std::string_view text) {
  auto obj = parse_object(text);
  if (!obj) return obj.err();
  client_message m;
  std::string type;
  bool has_type = false, has_id = false, has_body = false;
  for (auto [key, value] : *obj) {
    if (key == "type") {
      if (auto st = read_string(value, "type", type); !st) return st.err();
      has_type = true;
    } else if (key == "id") {
      if (auto st = read_string(value, "id", m.id); !st) return st.err();
      has_id = true;
    } else if (key == "body") {
      if (value.type() != element_type::OBJECT) return field_error("body", "expected an object");
      m.body = simdjson::minify(value);
      has_body = true;
    }
  }
  if (!has_type) return field_error("type", "is required");
  if (type == "completions") m.type = message_type::completions;
  else if (type == "chat") m.type = message_type::chat;
  else if (type == "cancel") m.type = message_type::cancel;
  else return field_error("type", "must be completions, chat or cancel, got '" + type + "'");
  if (!has_id || m.id.empty()) return field_error("id", "a non-empty string is required");
  if (m.type != message_type::cancel && !has_body) return field_error("body", "is required");
  return m;
}

std::string write_delta_frame(std::string_view id, const openai::chunk_delta& d, bool chat,
                              openai::output_flags flags) {
  std::string out;
  json::writer w(out);
  w.begin_object();
  w.key("type").str("delta");
  w.key("id").str(id);
  w.key("index").num(d.index);
  w.key("text").str(d.text);
  if (!d.reasoning.empty()) w.key("reasoning_content").str(d.reasoning);
  if (!d.tool_calls.empty()) {
    w.key("tool_calls");
    openai::write_tool_call_pieces(w, d.tool_calls);
  }
  w.key("finish_reason");
  if (d.finish_reason.empty()) w.null(); else w.str(d.finish_reason);
  if (flags.return_token_ids) w.key("token_ids").int_array(d.token_ids);
  if (flags.logprobs && !d.logprobs.empty()) {
    w.key("logprobs");
    if (chat) openai::write_chat_logprobs(w, d.logprobs);
    else openai::write_completion_logprobs(w, d.logprobs, d.text_offset);
  }
  w.end_object();
  return out;
}

std::string write_done_frame(std::string_view id, const openai::usage_info& usage) {
  std::string out;
  json::writer w(out);
  w.begin_object();
  w.key("type").str("done");
  w.key("id").str(id);
  w.key("usage");
  openai::write_usage(w, usage);
  w.end_object();
  return out;
}

std::string write_error_frame(std::string_view id, std::string_view message, std::string_view type,
                              std::string_view param, std::string_view code) {
  std::string out;
  json::writer w(out);
  w.begin_object();
  w.key("type").str("error");
  w.key("id");
  if (id.empty()) w.null(); else w.str(id);
  w.key("error");
  openai::write_error_object(w, message, type, param, code);
  w.end_object();
  return out;
}

}  // namespace actorserve::protocol::websocket
