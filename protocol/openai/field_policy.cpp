#include "protocol/openai/field_policy.hpp"

#include <fmt/format.h>

#include <array>

namespace actorserve::protocol::openai {
namespace {

using detail::element;
using detail::element_type;

/// A value that asks for nothing beyond what the server does anyway.
using neutral_fn = bool (*)(element);

bool never(element) { return false; }
bool is_false(element v) { return v.type() == element_type::BOOL && !bool(v); }
bool is_true(element v) { return v.type() == element_type::BOOL && bool(v); }
bool is_empty(element v) {
  switch (v.type()) {
    case element_type::STRING: return std::string_view(v).empty();
    case element_type::ARRAY: return simdjson::dom::array(v).size() == 0;
    case element_type::OBJECT: return simdjson::dom::object(v).size() == 0;
    default: return false;
  }
}
bool is_one(element v) {
  return (v.type() == element_type::INT64 && int64_t(v) == 1) ||
         (v.type() == element_type::DOUBLE && double(v) == 1.0);
}
bool is_text_modality(element v) {
  simdjson::dom::array arr;
  if (v.get(arr)) return false;
  for (element m : arr)
    if (m.type() != element_type::STRING || std::string_view(m) != "text") return false;
  return true;
}
bool is_default_tier(element v) {
  return v.type() == element_type::STRING && (std::string_view(v) == "auto" || std::string_view(v) == "default");
}

struct refused_field {
  std::string_view name;
  neutral_fn neutral;
  std::string_view why;
  bool chat_only = false;
  bool completions_only = false;
};

constexpr std::array refused{
    // Structured outputs beyond JSON schemas, regexes and choices.
    refused_field{"guided_grammar", never, "is not supported (use guided_json, guided_regex or guided_choice)"},
    refused_field{"guided_whitespace_pattern", never, "is not supported (whitespace in JSON output is always compact)"},
    // vLLM sampling extras this server does not implement.
    refused_field{"use_beam_search", is_false, "beam search is not supported"},
    refused_field{"length_penalty", is_one, "applies to beam search, which is not supported"},
    refused_field{"include_stop_str_in_output", is_false, "only false is supported"},
    refused_field{"spaces_between_special_tokens", is_true, "only true is supported"},
    refused_field{"truncate_prompt_tokens", never, "is not supported"},
    refused_field{"prompt_logprobs", never, "is not supported"},
    refused_field{"allowed_token_ids", is_empty, "is not supported"},
    refused_field{"bad_words", is_empty, "is not supported"},
    refused_field{"logits_processors", is_empty, "is not supported"},
    refused_field{"return_tokens_as_token_ids", is_false, "is not supported"},
    refused_field{"detokenize", is_true, "only true is supported"},
    refused_field{"request_id", never, "is not supported (the server assigns ids)"},
    refused_field{"cache_salt", never, "is not supported"},
    refused_field{"kv_transfer_params", never, "is not supported"},
    refused_field{"vllm_xargs", never, "is not supported"},
    refused_field{"prompt_embeds", never, "is not supported"},
    refused_field{"mm_processor_kwargs", is_empty, "is not supported (text-only models)"},
    // OpenAI fields without an implementation here.
    refused_field{"store", is_false, "is not supported (nothing is stored)"},
    refused_field{"metadata", is_empty, "is not supported (it belongs to stored completions)"},
    refused_field{"service_tier", is_default_tier, "only auto or default is supported"},
    refused_field{"echo", is_false, "echo is not supported"},
    refused_field{"suffix", is_empty, "is not supported", false, true},
    refused_field{"audio", never, "audio output is not supported", true},
    refused_field{"modalities", is_text_modality, "only [\"text\"] is supported", true},
    refused_field{"prediction", never, "predicted outputs are not supported", true},
    refused_field{"reasoning_effort", never, "is not supported (pass template variables in chat_template_kwargs)", true},
    refused_field{"verbosity", never, "is not supported", true},
    refused_field{"web_search_options", never, "web search is not supported", true},
    refused_field{"functions", never, "is deprecated and not supported; use tools", true},
    refused_field{"function_call", never, "is deprecated and not supported; use tool_choice", true},
    refused_field{"continue_final_message", is_false, "is not supported", true},
    refused_field{"chat_template", never, "per-request templates are not supported; start the server with --chat-template",
                  true},
    refused_field{"tool_parser", never, "is a server flag (--tool-call-parser), not a request field", true},
};

/// Identifiers OpenAI documents as having no effect on the output; accepted as such.
constexpr std::array<std::string_view, 3> identifiers{"user", "safety_identifier", "prompt_cache_key"};

}  // namespace

status check_other_field(std::string_view key, element value, endpoint ep) {
  for (std::string_view id : identifiers)
    if (key == id) {
      if (value.type() != element_type::STRING) return detail::field_error(key, "expected a string");
      return {};
    }
  for (const auto& f : refused) {
    if (f.name != key) continue;
    if ((f.chat_only && ep != endpoint::chat) || (f.completions_only && ep != endpoint::completions)) break;
    if (f.neutral(value)) return {};
    return detail::unsupported_field(key, f.why);
  }
  return detail::field_error(key, ep == endpoint::chat ? "unknown field of a chat completions request"
                                                       : "unknown field of a completions request");
}

}  // namespace actorserve::protocol::openai
