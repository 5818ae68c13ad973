#include "protocol/openai/write.hpp"

namespace actorserve::protocol::openai {
namespace {

void write_head(json::writer& w, const response_meta& meta, std::string_view object) {
  w.key("id").str(meta.id);
  w.key("object").str(object);
  w.key("created").num(meta.created);
  w.key("model").str(meta.model);
}

void write_bytes(json::writer& w, std::string_view token) {
  w.begin_array();
  for (unsigned char c : token) w.num(c);
  w.end_array();
}

void write_finish(json::writer& w, std::string_view reason) {
  w.key("finish_reason");
  if (reason.empty()) w.null(); else w.str(reason);
}

bool all_space(std::string_view t) { return t.find_first_not_of(" \n\r\t") == std::string_view::npos; }

/// The assistant message of a whole chat response. With tool calls, content that is only
/// whitespace is null, as OpenAI writes it.
void write_message(json::writer& w, const choice_result& c) {
  w.begin_object().key("role").str("assistant").key("content");
  if (!c.tool_calls.empty() && all_space(c.text)) w.null(); else w.str(c.text);
  if (c.reasoning) w.key("reasoning_content").str(*c.reasoning);
  if (!c.tool_calls.empty()) {
    w.key("tool_calls").begin_array();
    for (const auto& t : c.tool_calls) {
      w.begin_object().key("id").str(t.id).key("type").str("function");
      w.key("function").begin_object().key("name").str(t.name).key("arguments").str(t.arguments).end_object();
      w.end_object();
    }
    w.end_array();
  }
  w.end_object();
}

}  // namespace

void write_usage(json::writer& w, const usage_info& u) {
  w.begin_object();
  w.key("prompt_tokens").num(u.prompt_tokens);
  w.key("completion_tokens").num(u.completion_tokens);
  w.key("total_tokens").num(u.prompt_tokens + u.completion_tokens);
  w.key("prompt_tokens_details").begin_object().key("cached_tokens").num(u.cached_tokens).end_object();
  w.end_object();
}

void write_completion_logprobs(json::writer& w, std::span<const token_logprob> lp, int64_t text_offset) {
  w.begin_object();
  w.key("tokens").begin_array();
  for (const auto& t : lp) w.str(t.token);
  w.end_array();
  w.key("token_logprobs").begin_array();
  for (const auto& t : lp) w.real(t.logprob);
  w.end_array();
  w.key("top_logprobs").begin_array();
  for (const auto& t : lp) {
    // A dict keyed by token text: the sampled token, then the alternatives (first text wins).
    w.begin_object();
    w.key(t.token).real(t.logprob);
    for (size_t i = 0; i < t.top.size(); ++i) {
      bool seen = t.top[i].token == t.token;
      for (size_t j = 0; j < i && !seen; ++j) seen = t.top[j].token == t.top[i].token;
      if (!seen) w.key(t.top[i].token).real(t.top[i].logprob);
    }
    w.end_object();
  }
  w.end_array();
  w.key("text_offset").begin_array();
  for (const auto& t : lp) {
    w.num(text_offset);
    text_offset += static_cast<int64_t>(t.token.size());
  }
  w.end_array();
  w.end_object();
}

void write_chat_logprobs(json::writer& w, std::span<const token_logprob> lp) {
  w.begin_object().key("content").begin_array();
  for (const auto& t : lp) {
    w.begin_object();
    w.key("token").str(t.token);
    w.key("logprob").real(t.logprob);
    w.key("bytes");
    write_bytes(w, t.token);
    w.key("top_logprobs").begin_array();
    for (const auto& alt : t.top) {
      w.begin_object();
      w.key("token").str(alt.token);
      w.key("logprob").real(alt.logprob);
      w.key("bytes");
      write_bytes(w, alt.token);
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array().end_object();
}

std::string write_completion(const response_meta& meta, std::span<const choice_result> choices,
                             const usage_info& usage, std::span<const std::vector<int32_t>> prompt_ids,
                             int32_t n, output_flags flags) {
  std::string out;
  json::writer w(out);
  w.begin_object();
  write_head(w, meta, "text_completion");
  w.key("choices").begin_array();
  for (const auto& c : choices) {
    w.begin_object();
    w.key("index").num(c.index);
    w.key("text").str(c.text);
    w.key("logprobs");
    if (flags.logprobs) write_completion_logprobs(w, c.logprobs, 0); else w.null();
    write_finish(w, c.finish_reason);
    if (flags.return_token_ids) {
      w.key("token_ids").int_array(c.token_ids);
      const size_t p = n > 0 ? static_cast<size_t>(c.index / n) : 0;
      w.key("prompt_token_ids");
      if (p < prompt_ids.size()) w.int_array(prompt_ids[p]); else w.null();
    }
    w.end_object();
  }
  w.end_array();
  w.key("usage");
  write_usage(w, usage);
  w.end_object();
  return out;
}

std::string write_chat_completion(const response_meta& meta, std::span<const choice_result> choices,
                                  const usage_info& usage, std::span<const int32_t> prompt_ids,
                                  output_flags flags) {
  std::string out;
  json::writer w(out);
  w.begin_object();
  write_head(w, meta, "chat.completion");
  w.key("choices").begin_array();
  for (const auto& c : choices) {
    w.begin_object();
    w.key("index").num(c.index);
    w.key("message");
    write_message(w, c);
    w.key("logprobs");
    if (flags.logprobs) write_chat_logprobs(w, c.logprobs); else w.null();
    write_finish(w, c.finish_reason);
    if (flags.return_token_ids) w.key("token_ids").int_array(c.token_ids);
    w.end_object();
  }
  w.end_array();
  w.key("usage");
  write_usage(w, usage);
  if (flags.return_token_ids) w.key("prompt_token_ids").int_array(prompt_ids);
  w.end_object();
  return out;
}

std::string write_completion_chunk(const response_meta& meta, const chunk_delta& d, output_flags flags) {
  std::string out;
  json::writer w(out);
  w.begin_object();
  write_head(w, meta, "text_completion");
  w.key("choices").begin_array().begin_object();
  w.key("index").num(d.index);
  w.key("text").str(d.text);
  w.key("logprobs");
  if (flags.logprobs) write_completion_logprobs(w, d.logprobs, d.text_offset); else w.null();
  write_finish(w, d.finish_reason);
  if (flags.return_token_ids) {
    w.key("token_ids").int_array(d.token_ids);
    if (!d.prompt_token_ids.empty()) w.key("prompt_token_ids").int_array(d.prompt_token_ids);
  }
  w.end_object().end_array();
  if (flags.include_usage) w.key("usage").null();
  w.end_object();
  return out;
}

std::string write_chat_chunk(const response_meta& meta, const chunk_delta& d, output_flags flags) {
  std::string out;
  json::writer w(out);
  w.begin_object();
  write_head(w, meta, "chat.completion.chunk");
  w.key("choices").begin_array().begin_object();
  w.key("index").num(d.index);
  w.key("delta").begin_object();
  if (d.first) w.key("role").str("assistant");
  if (!d.text.empty() || d.first) w.key("content").str(d.text);
  if (!d.reasoning.empty()) w.key("reasoning_content").str(d.reasoning);
  if (!d.tool_calls.empty()) {
    w.key("tool_calls");
    write_tool_call_pieces(w, d.tool_calls);
  }
  w.end_object();
  w.key("logprobs");
  if (flags.logprobs && !d.logprobs.empty()) write_chat_logprobs(w, d.logprobs); else w.null();
  write_finish(w, d.finish_reason);
  if (flags.return_token_ids) w.key("token_ids").int_array(d.token_ids);
  w.end_object().end_array();
  if (flags.return_token_ids && !d.prompt_token_ids.empty())
    w.key("prompt_token_ids").int_array(d.prompt_token_ids);
  if (flags.include_usage) w.key("usage").null();
  w.end_object();
  return out;
}

std::string write_usage_chunk(const response_meta& meta, bool chat, const usage_info& usage) {
  std::string out;
  json::writer w(out);
  w.begin_object();
  write_head(w, meta, chat ? "chat.completion.chunk" : "text_completion");
  w.key("choices").begin_array().end_array();
  w.key("usage");
  write_usage(w, usage);
  w.end_object();
  return out;
}

void write_tool_call_pieces(json::writer& w, std::span<const tool_call_piece> pieces) {
  w.begin_array();
  for (const auto& p : pieces) {
    w.begin_object().key("index").num(p.index);
    if (!p.id.empty()) w.key("id").str(p.id).key("type").str("function");
    w.key("function").begin_object();
    if (!p.name.empty()) w.key("name").str(p.name);
    w.key("arguments").str(p.arguments);
    w.end_object().end_object();
  }
  w.end_array();
}

void write_error_object(json::writer& w, std::string_view message, std::string_view type, std::string_view param,
                        std::string_view code) {
  w.begin_object();
  w.key("message").str(message);
  w.key("type").str(type);
  w.key("param");
  if (param.empty()) w.null(); else w.str(param);
  w.key("code");
  if (code.empty()) w.null(); else w.str(code);
  w.end_object();
}

std::string write_error(std::string_view message, std::string_view type, std::string_view param,
                        std::string_view code) {
  std::string out;
  json::writer w(out);
  w.begin_object().key("error");
  write_error_object(w, message, type, param, code);
  w.end_object();
  return out;
}

std::string write_tokenize(std::span<const int32_t> tokens, int64_t max_model_len) {
  std::string out;
  json::writer w(out);
  w.begin_object();
  w.key("count").num(static_cast<int64_t>(tokens.size()));
  w.key("max_model_len").num(max_model_len);
  w.key("tokens").int_array(tokens);
  w.end_object();
  return out;
}

std::string write_detokenize(std::string_view text) {
  std::string out;
  json::writer w(out);
  w.begin_object().key("prompt").str(text).end_object();
  return out;
}

std::string write_models(std::string_view model, int64_t created, int64_t max_model_len) {
  std::string out;
  json::writer w(out);
  w.begin_object().key("object").str("list").key("data").begin_array().begin_object();
  w.key("id").str(model);
  w.key("object").str("model");
  w.key("created").num(created);
  w.key("owned_by").str("actorserve");
  w.key("root").str(model);
  w.key("max_model_len").num(max_model_len);
  w.end_object().end_array().end_object();
  return out;
}

}  // namespace actorserve::protocol::openai
