#include "protocol/chat_output/forced_tool_calls.hpp"

#include "protocol/openai/json_fields.hpp"

namespace actorserve::protocol::chat_output {

forced_tool_calls::forced_tool_calls(std::string function) : function_(std::move(function)), rng_(std::random_device{}()) {}

std::string forced_tool_calls::new_id() {
  static constexpr std::string_view alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += alnum[rng_() % alnum.size()];
  return id;
}

output_piece forced_tool_calls::push(std::string_view text) {
  output_piece out;
  if (function_.empty()) {
    buf_ += text;
    return out;
  }
  if (num_calls_ == 0) {
    out.tool_calls.push_back({0, new_id(), function_, std::string(text)});
    num_calls_ = 1;
  } else if (!text.empty()) {
    out.tool_calls.push_back({0, "", "", std::string(text)});
  }
  return out;
}

output_piece forced_tool_calls::finish() {
  output_piece out;
  if (!function_.empty()) {
    if (num_calls_ == 0) out = push("");
    return out;
  }
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::array calls;
  if (parser.parse(buf_).get(doc) || doc.get(calls)) {
    out.content = std::move(buf_);
    return out;
  }
  for (simdjson::dom::element c : calls) {
    std::string_view name;
    simdjson::dom::element params;
    if (c["name"].get(name) || c["parameters"].get(params)) continue;
    out.tool_calls.push_back({num_calls_++, new_id(), std::string(name), simdjson::minify(params)});
  }
  if (num_calls_ == 0) out.content = std::move(buf_);
  buf_.clear();
  return out;
}

}  // namespace actorserve::protocol::chat_output
