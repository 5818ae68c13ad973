#include "server/job.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>

#include "protocol/openai/parse.hpp"
#include "server/context.hpp"
#include "server/prompt_builder.hpp"

namespace actorserve::server {
namespace {

/// Fills max_tokens and checks the context length; `field` names the prompt in errors.
status fit_context(const server_context& ctx, const std::vector<int32_t>& ids, bool max_tokens_set,
                   sampling_params& p, std::string_view field) {
  const int64_t len = static_cast<int64_t>(ids.size());
  const int64_t room = ctx.max_model_len - len;
  if (room < 1)
    return make_error(error_code::invalid_argument,
                      fmt::format("{}: this model's maximum context length is {} tokens, but the prompt has {} tokens",
                                  field, ctx.max_model_len, len));
  if (max_tokens_set && p.max_tokens > room)
    return make_error(error_code::invalid_argument,
                      fmt::format("max_tokens: this model's maximum context length is {} tokens; the prompt has {} "
                                  "tokens, so at most {} can be generated, but {} were requested",
                                  ctx.max_model_len, len, room, p.max_tokens));
  if (!max_tokens_set) p.max_tokens = static_cast<int32_t>(std::min<int64_t>(p.max_tokens, room));
  p.min_tokens = std::min(p.min_tokens, p.max_tokens);
  return {};
}

protocol::openai::response_meta make_meta(server_context& ctx, std::string_view prefix) {
  protocol::openai::response_meta m;
  m.id = ctx.new_request_id(prefix);
  m.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch()).count();
  m.model = ctx.model_name;
  return m;
}

status check_model(const server_context& ctx, const std::string& model) {
  if (model.empty() || model == ctx.model_name) return {};
  return make_error(error_code::not_found, fmt::format("model: the model '{}' does not exist", model));
}

/// --max-seqs-per-request: a request's prompts times n.
status check_fan_out(const server_context& ctx, size_t num_prompts, int32_t n) {
  const int64_t seqs = static_cast<int64_t>(num_prompts) * n;
  if (seqs <= ctx.config.server.max_seqs_per_request) return {};
  return make_error(error_code::invalid_argument,
                    fmt::format("{}: this request asks for {} sequences ({} prompts x n = {}), more than the {} one "
                                "request may create (--max-seqs-per-request)",
                                num_prompts > 1 ? "prompt" : "n", seqs, num_prompts, n,
                                ctx.config.server.max_seqs_per_request));
}

/// The grammar spec of a request's structured-output fields, if any.
std::optional<grammar::constraint_spec> spec_of(const protocol::openai::output_constraint& c) {
  using kind = protocol::openai::output_constraint::kind;
  grammar::constraint_spec spec;
  spec.field = c.field;
  switch (c.type) {
    case kind::none: return std::nullopt;
    case kind::json_object: spec.type = grammar::constraint_spec::kind::json_object; break;
    case kind::json_schema: spec.type = grammar::constraint_spec::kind::json_schema; break;
    case kind::regex: spec.type = grammar::constraint_spec::kind::regex; break;
    case kind::choice: spec.type = grammar::constraint_spec::kind::choice; break;
  }
  spec.text = c.text;
  spec.choices = c.choices;
  return spec;
}

/// A chat request's grammar: its structured-output fields, or the tool calls that
/// tool_choice required / a named function asks for.
result<std::optional<grammar::constraint_spec>> chat_spec(const protocol::openai::chat_request& r) {
  using mode = protocol::openai::tool_choice_mode;
  if (r.tool_choice != mode::required && r.tool_choice != mode::function) return spec_of(r.constraint);
  const std::string what = r.tool_choice == mode::required ? "'required'" : "a named function";
  if (r.tool_functions.empty())
    return make_error(error_code::invalid_argument, fmt::format("tool_choice: {} needs tools", what));
  if (r.constraint.type != protocol::openai::output_constraint::kind::none)
    return make_error(error_code::unsupported,
                      fmt::format("{}: cannot be combined with tool_choice {}", r.constraint.field, what));
  grammar::constraint_spec spec;
  spec.field = "tools";
  spec.parallel_tool_calls = r.parallel_tool_calls;
  if (r.tool_choice == mode::required) {
    spec.type = grammar::constraint_spec::kind::tool_calls;
    for (const auto& f : r.tool_functions) spec.tools.push_back({f.name, f.parameters_json});
    return std::optional<grammar::constraint_spec>(std::move(spec));
  }
  spec.type = grammar::constraint_spec::kind::tool_arguments;
  for (size_t i = 0; i < r.tool_functions.size(); ++i) {
    if (r.tool_functions[i].name != r.tool_choice_function) continue;
    spec.tools.push_back({r.tool_functions[i].name, r.tool_functions[i].parameters_json});
    spec.field = fmt::format("tools[{}]", i);
    return std::optional<grammar::constraint_spec>(std::move(spec));
  }
  return make_error(error_code::invalid_argument,
                    fmt::format("tool_choice: no tool named '{}' in tools", r.tool_choice_function));
}

/// Compiles `spec` for the model (off the I/O threads: job functions run on the prompt pool)
/// into the request's grammar.
status constrain(server_context& ctx, const std::optional<grammar::constraint_spec>& spec,
                 actors::generation_request& g) {
  if (!spec) return {};
  auto compiled = ctx.engine.compile_grammar(*spec);
  if (!compiled) return compiled.err();
  g.grammar = std::move(*compiled);
  g.grammar_field = spec->field;
  return {};
}

/// How a chat request's output is parsed: tools need --enable-auto-tool-choice (as vLLM);
/// tool_choice none leaves the output as text; tool_choice required or a named function makes
/// it tool calls by grammar. A grammar-constrained output has no reasoning to split off.
result<protocol::chat_output::output_options> output_parsing(const server_context& ctx,
                                                             const protocol::openai::chat_request& r) {
  protocol::chat_output::output_options o;
  o.reasoning = ctx.config.chat.reasoning_parser;
  o.parallel_tool_calls = r.parallel_tool_calls;
  const bool wants_tools = !r.tools.is_null() && r.tool_choice == protocol::openai::tool_choice_mode::automatic;
  if (wants_tools && !ctx.config.chat.enable_auto_tool_choice)
    return make_error(error_code::unsupported,
                      "tools: tool_choice auto needs the server started with --enable-auto-tool-choice and "
                      "--tool-call-parser");
  if (wants_tools) o.tools = ctx.config.chat.tool_call_parser;
  using mode = protocol::openai::tool_choice_mode;
  if (r.tool_choice == mode::required || r.tool_choice == mode::function) {
    o = {};
    o.forced_tools = true;
    o.forced_function = r.tool_choice == mode::function ? r.tool_choice_function : std::string();
  } else if (r.constraint.type != protocol::openai::output_constraint::kind::none) {
    o.reasoning = reasoning_parser_kind::none;
  }
  return o;
}

/// What a completion or chat job starts from: the model checked, the output's form, n, the
/// response's id (`kind`: cmpl or chatcmpl) and the fan-out of `prompts` x n checked.
template <class Request>
result<job_spec> start_job(server_context& ctx, const Request& r, bool chat, size_t prompts) {
  if (auto st = check_model(ctx, r.model); !st) return st.err();
  job_spec job;
  job.chat = chat;
  job.stream = r.output.stream;
  job.flags = {r.logprobs, r.output.return_token_ids, r.output.stream && r.output.include_usage};
  job.n = r.params.n;
  job.meta = make_meta(ctx, chat ? "chatcmpl" : "cmpl");
  if (auto st = check_fan_out(ctx, prompts, r.params.n); !st) return st.err();
  return job;
}

}  // namespace

result<job_spec> make_completion_job(server_context& ctx, protocol::openai::completion_request&& r) {
  auto started = start_job(ctx, r, false, r.prompts.size());
  if (!started) return started.err();
  job_spec job = std::move(*started);
  protocol::openai::apply_generation_defaults(r.params, r.given, ctx.sampling_defaults);
  const auto spec = spec_of(r.constraint);
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    auto ids = ctx.prompts->completion_prompt(r.prompts[i], r.add_special_tokens);
    if (!ids) return ids.err();
    actors::generation_request g;
    g.request_id = fmt::format("{}-{}", job.meta.id, i);
    g.params = r.params;
    // Fair admission: the i-th prompt of every request waits behind the (i-1)-th prompts of the
    // others (at the same requested priority), so one long prompt list cannot hold back everyone
    // else's first token.
    g.priority = static_cast<int32_t>(std::min<int64_t>(int64_t{r.priority} + static_cast<int64_t>(i), INT32_MAX));
    if (auto st = fit_context(ctx, *ids, r.max_tokens_set, g.params, "prompt"); !st) return st.err();
    if (auto st = constrain(ctx, spec, g); !st) return st.err();
    g.prompt_ids = *ids;
    job.prompt_ids.push_back(std::move(*ids));
    job.requests.push_back(std::move(g));
  }
  return job;
}

result<job_spec> make_chat_job(server_context& ctx, protocol::openai::chat_request&& r) {
  auto started = start_job(ctx, r, true, 1);
  if (!started) return started.err();
  job_spec job = std::move(*started);
  auto parsing = output_parsing(ctx, r);
  if (!parsing) return parsing.err();
  job.output_parsing = *parsing;
  auto spec = chat_spec(r);
  if (!spec) return spec.err();
  auto ids = ctx.prompts->chat_prompt(r.messages, r.add_generation_prompt,
                                      {r.tools, r.chat_template_kwargs, r.documents}, r.add_special_tokens);
  if (!ids) return ids.err();
  actors::generation_request g;
  g.request_id = job.meta.id + "-0";
  g.params = r.params;
  g.priority = r.priority;
  protocol::openai::apply_generation_defaults(g.params, r.given, ctx.sampling_defaults);
  // Mistral's [TOOL_CALLS] is a special token: the parser must see it (vLLM does the same);
  // DeepSeek's markers reach it whether or not its tokenizer marks them special.
  if (job.output_parsing.tools == tool_parser_kind::mistral || job.output_parsing.tools == tool_parser_kind::deepseek_v3)
    g.params.skip_special_tokens = false;
  if (!r.max_tokens_set)
    g.params.max_tokens = static_cast<int32_t>(
        std::min<int64_t>(ctx.sampling_defaults.max_new_tokens.value_or(std::numeric_limits<int32_t>::max()),
                          std::numeric_limits<int32_t>::max()));
  if (auto st = fit_context(ctx, *ids, r.max_tokens_set, g.params, "messages"); !st) return st.err();
  if (auto st = constrain(ctx, *spec, g); !st) return st.err();
  g.prompt_ids = *ids;
  job.prompt_ids.push_back(std::move(*ids));
  job.requests.push_back(std::move(g));
  return job;
}

}  // namespace actorserve::server
