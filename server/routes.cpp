#include "server/routes.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include "config/log.hpp"
#include "protocol/json/writer.hpp"
#include "protocol/openai/parse.hpp"
#include "protocol/openai/write.hpp"
#include "protocol/tokenizer/tokenizer.hpp"
#include "server/context.hpp"
#include "server/errors.hpp"
#include "server/playground.hpp"
#include "server/prompt_builder.hpp"

namespace actorserve::server {
namespace oa = protocol::openai;

std::string_view target_path(std::string_view target) {
  const size_t q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

route_result error_result(server_context& ctx, const error& e) {
  const http_error h = to_http_error(e);
  ctx.stats.http_errors.fetch_add(1);
  log::info("answered {}: {}", h.status, e.message);
  route_result r;
  r.status = h.status;
  r.body = h.body;
  return r;
}

route_result error_result(server_context& ctx, int status, const error& e) {
  route_result r = error_result(ctx, e);
  r.status = status;
  return r;
}

std::optional<route_result> check_auth(server_context& ctx, std::string_view method, std::string_view path,
                                       std::string_view authorization) {
  const auto& sv = ctx.config.server;
  // A CORS preflight carries no credentials; the playground page holds no secret (it asks for
  // the key itself); /health and /metrics are open unless guarded.
  const bool open = method == "OPTIONS" || path == "/" ||
                    (!sv.api_key_guards_metrics && (path == "/health" || path == "/metrics"));
  if (sv.api_key.empty() || open || authorized(authorization, sv.api_key)) return std::nullopt;
  return error_result(ctx, make_error(error_code::unauthorized, "Authorization: missing or invalid API key"));
}

std::string upgrade_authorization(std::string_view target, std::string_view header) {
  if (!header.empty()) return std::string(header);
  const size_t q = target.find('?');
  std::string_view query = q == std::string_view::npos ? std::string_view{} : target.substr(q + 1);
  constexpr std::string_view name = "api_key=";
  const auto hex = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  const auto is_hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (!pair.starts_with(name)) continue;
    std::string out = "Bearer ";
    for (size_t i = name.size(); i < pair.size(); ++i) {  // URL-decoded
      if (pair[i] == '+') {
        out += ' ';
      } else if (pair[i] == '%' && i + 2 < pair.size() && is_hex(pair[i + 1]) && is_hex(pair[i + 2])) {
        out += static_cast<char>(hex(pair[i + 1]) * 16 + hex(pair[i + 2]));
        i += 2;
      } else {
        out += pair[i];
      }
    }
    return out;
  }
  return {};
}

namespace {

route_result json_ok(std::string body) {
  route_result r;
  r.body = std::move(body);
  return r;
}

route_result tokenize(server_context& ctx, std::string_view body) {
  auto req = oa::parse_tokenize_request(body);
  if (!req) return error_result(ctx, req.err());
  std::vector<int32_t> ids;
  if (req->is_chat) {
    auto text = ctx.prompts->render_chat(req->messages, req->add_generation_prompt,
                                         {req->tools, req->chat_template_kwargs, {}});
    if (!text) return error_result(ctx, text.err());
    ids = ctx.engine.tokenizer().encode(*text, false);
  } else {
    ids = ctx.engine.tokenizer().encode(req->prompt.text, req->add_special_tokens);
  }
  return json_ok(oa::write_tokenize(ids, ctx.max_model_len));
}

route_result detokenize(server_context& ctx, std::string_view body) {
  auto req = oa::parse_detokenize_request(body);
  if (!req) return error_result(ctx, req.err());
  const int32_t vocab = ctx.engine.tokenizer().vocab_size();
  for (int32_t id : req->tokens)
    if (id >= vocab)
      return error_result(ctx, make_error(error_code::invalid_argument,
                                          "tokens: token id " + std::to_string(id) + " is out of range"));
  return json_ok(oa::write_detokenize(ctx.engine.tokenizer().decode(req->tokens, false)));
}

template <class Parse, class Make>
route_result generation(server_context& ctx, std::string_view body, Parse parse, Make make) {
  auto req = parse(body);
  if (!req) return error_result(ctx, req.err());
  auto job = make(ctx, std::move(*req));
  if (!job) return error_result(ctx, job.err());
  route_result r;
  r.job = std::move(*job);
  return r;
}

/// 200 while the engine makes progress. A front end of engine processes answers JSON with each
/// engine's state: 200 while one of them is up.
route_result health(server_context& ctx) {
  route_result r;
  r.status = (!ctx.draining && ctx.engine.stats().healthy) ? 200 : 503;
  r.content_type = "text/plain";
  const auto nodes = ctx.engine.engines();
  if (nodes.empty()) return r;
  r.content_type = "application/json";
  protocol::json::writer w(r.body);
  w.begin_object().key("engines").begin_array();
  for (const auto& n : nodes) {
    w.begin_object().key("address").str(n.address).key("up").boolean(n.up);
    w.key("running").num(n.stats.num_running).key("waiting").num(n.stats.num_waiting);
    w.key("kv_blocks_used").num(n.stats.kv_blocks_used).key("kv_blocks_total").num(n.stats.kv_blocks_total);
    w.key("prefix_cache_queries").num(n.stats.prefix_cache_queries);
    w.key("prefix_cache_hits").num(n.stats.prefix_cache_hits);
    w.key("requests_cancelled").num(n.stats.requests_cancelled);
    w.key("requests_routed").num(n.requests_routed).key("requests_resubmitted").num(n.requests_resubmitted);
    w.end_object();
  }
  w.end_array().end_object();
  return r;
}

route_result metrics_page(server_context& ctx) {
  route_result r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = ctx.stats.render(ctx.engine.stats(), ctx.model_name, ctx.num_active_jobs.load(),
                            ctx.config.server.metrics_vllm_names, ctx.engine.engines());
  return r;
}

/// Work that runs on the prompt pool: its body moves into the closure.
template <class Work>
route_result off_io(server_context& ctx, std::string body, Work work) {
  route_result r;
  r.deferred = [&ctx, body = std::move(body), work] { return work(ctx, body); };
  return r;
}

enum class verb { get, post };

struct route_entry {
  std::string_view path;
  verb method;
};

constexpr std::array<route_entry, 8> kRoutes{{
    {"/", verb::get},
    {"/health", verb::get},
    {"/metrics", verb::get},
    {"/v1/models", verb::get},
    {"/v1/completions", verb::post},
    {"/v1/chat/completions", verb::post},
    {"/tokenize", verb::post},
    {"/detokenize", verb::post},
}};

std::string_view allow_header(verb v) { return v == verb::get ? "GET, HEAD, OPTIONS" : "POST, OPTIONS"; }

}  // namespace

route_result route(server_context& ctx, http_request_view req) {
  ctx.stats.http_requests.fetch_add(1);
  const std::string_view path = target_path(req.target);
  if (auto denied = check_auth(ctx, req.method, path, req.authorization)) return std::move(*denied);
  const auto* entry = std::find_if(kRoutes.begin(), kRoutes.end(), [&](const route_entry& e) { return e.path == path; });
  if (entry == kRoutes.end())
    return error_result(ctx, make_error(error_code::not_found, "route: no route for " + std::string(req.method) +
                                                                   " " + std::string(path)));
  if (req.method == "OPTIONS") {
    route_result r;
    r.status = 204;
    r.allow = allow_header(entry->method);
    return r;
  }
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (get != (entry->method == verb::get) || (!get && req.method != "POST")) {
    route_result r = error_result(ctx, 405,
                                  make_error(error_code::invalid_argument,
                                             "method: " + std::string(req.method) + " is not allowed on " +
                                                 std::string(path) + " (allowed: " +
                                                 std::string(allow_header(entry->method)) + ")"));
    r.allow = allow_header(entry->method);
    return r;
  }

  if (path == "/") {
    route_result r;
    r.content_type = "text/html; charset=utf-8";
    r.body = std::string(playground_page());
    return r;
  }
  if (path == "/health") return health(ctx);
  if (path == "/metrics") return metrics_page(ctx);
  if (path == "/v1/models") return json_ok(oa::write_models(ctx.model_name, ctx.created, ctx.max_model_len));
  if (ctx.draining) return error_result(ctx, make_error(error_code::unavailable, "the server is shutting down"));
  if (path == "/v1/completions")
    return off_io(ctx, std::move(req.body), [](server_context& c, std::string_view b) {
      return generation(c, b, oa::parse_completion_request, make_completion_job);
    });
  if (path == "/v1/chat/completions")
    return off_io(ctx, std::move(req.body), [](server_context& c, std::string_view b) {
      return generation(c, b, oa::parse_chat_request, make_chat_job);
    });
  if (path == "/tokenize") return off_io(ctx, std::move(req.body), tokenize);
  return detokenize(ctx, req.body);
}

}  // namespace actorserve::server
