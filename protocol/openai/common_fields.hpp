#pragma once
/// The fields both generation endpoints read (sampling, streaming, vLLM extras), and the checks
/// after a body is read. Private to protocol/openai .cpp files.
#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/openai/field_policy.hpp"
#include "protocol/openai/json_fields.hpp"
#include "protocol/openai/types.hpp"

namespace actorserve::protocol::openai::detail_common {

/// Reads the shared fields into one request's members.
struct common_fields {
  std::string& model;
  sampling_params& p;
  stream_options& o;
  bool& max_tokens_set;
  given_fields& given;
  int32_t& priority;
  output_constraint& constraint;
  bool best_of_set = false;
  int32_t best_of = 1;

  /// Sets `handled` when `key` is one of the shared fields.
  status read(std::string_view key, detail::element v, bool& handled);
  /// Checks made once every field is read (best_of against n).
  status finish() const;
};

/// Reads every field of a body: the shared ones, then `specific(key, value)` (a result<bool>:
/// false when the key is not one of the endpoint's own), then the field policy.
template <class Specific>
status read_body(simdjson::dom::object body, common_fields& common, endpoint ep, Specific specific) {
  for (auto [key, value] : body) {
    if (detail::is_null(value)) continue;
    bool handled = false;
    if (auto st = common.read(key, value, handled); !st) return st;
    if (handled) continue;
    result<bool> own = specific(key, value);
    if (!own) return own.err();
    if (*own) continue;
    if (auto st = check_other_field(key, value, ep); !st) return st;
  }
  return {};
}

/// Runs config's validation and the checks only the API layer knows.
status finish_params(sampling_params& p, bool max_tokens_set, int32_t provisional_max);

/// messages: roles, content (string or text parts), name, tool_call_id, tool_calls.
status read_messages(detail::element v, std::vector<chat_message>& out);
/// tools: function tools, kept as given for the template, and each function's name and
/// parameters (for tool_choice required / named).
status read_tools(detail::element v, chat_value& out, std::vector<tool_function>& functions);
/// chat_template_kwargs: an object of template variables.
status read_template_kwargs(detail::element v, chat_value& out);

}  // namespace actorserve::protocol::openai::detail_common
