#include "server/routes.hpp"

#include "protocol/openai/parse.hpp"
#include "protocol/openai/write.hpp"
#include "protocol/tokenizer/tokenizer.hpp"
#include "server/context.hpp"
#include "server/errors.hpp"
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
  route_result r;
  r.status = h.status;
  r.body = h.body;
  return r;
}

std::optional<route_result> check_auth(server_context& ctx, std::string_view path, std::string_view authorization) {
  const std::string& key = ctx.config.server.api_key;
  if (key.empty() || path == "/health" || authorized(authorization, key)) return std::nullopt;
  return error_result(ctx, make_error(error_code::unauthorized, "Authorization: missing or invalid API key"));
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

bool is(std::string_view method, std::string_view want) { return method == want; }

}  // namespace

route_result route(server_context& ctx, const http_request_view& req) {
  ctx.stats.http_requests.fetch_add(1);
  const std::string_view path = target_path(req.target);
  if (auto denied = check_auth(ctx, path, req.authorization)) return std::move(*denied);
  const bool get = is(req.method, "GET"), post = is(req.method, "POST");

  if (path == "/health") {
    if (!get) return error_result(ctx, make_error(error_code::not_found, "method: use GET /health"));
    route_result r;
    r.status = (!ctx.draining && ctx.engine.stats().healthy) ? 200 : 503;
    r.content_type = "text/plain";
    return r;
  }
  if (path == "/metrics" && get) {
    route_result r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = ctx.stats.render(ctx.engine.stats(), ctx.model_name, ctx.num_active_jobs.load());
    return r;
  }
  if (path == "/v1/models" && get) return json_ok(oa::write_models(ctx.model_name, ctx.created, ctx.max_model_len));
  if (ctx.draining && post)
    return error_result(ctx, make_error(error_code::unavailable, "the server is shutting down"));
  if (path == "/v1/completions" && post)
    return generation(ctx, req.body, oa::parse_completion_request, make_completion_job);
  if (path == "/v1/chat/completions" && post)
    return generation(ctx, req.body, oa::parse_chat_request, make_chat_job);
  if (path == "/tokenize" && post) return tokenize(ctx, req.body);
  if (path == "/detokenize" && post) return detokenize(ctx, req.body);
  return error_result(ctx, make_error(error_code::not_found,
                                      std::string("route: no route for ") + std::string(req.method) + " " +
                                          std::string(path)));
}

}  // namespace actorserve::server
