#pragma once
/// HTTP routing without Beast: a request (method, path, headers, body) becomes either an
/// immediate response, a job to run, or work to do off the I/O threads first. Auth, draining,
/// body parsing and errors happen here.
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "server/job.hpp"

namespace actorserve::server {

struct server_context;

struct http_request_view {
  std::string_view method;         ///< HEAD is routed as GET; the connection drops the body
  std::string_view target;         ///< path and optional query
  std::string_view authorization;  ///< the Authorization header, or ""
  std::string body;
};

struct route_result {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::string allow;               ///< the Allow header (405, OPTIONS), or ""
  std::optional<job_spec> job;     ///< set: run this generation instead of answering now
  /// Set: work too slow for an I/O thread (parsing, template rendering, tokenization). The
  /// connection runs it on the prompt pool (server_context::run_off_io) and handles its result.
  std::function<route_result()> deferred;
};

/// The path part of a target ("/v1/models?x=1" -> "/v1/models").
std::string_view target_path(std::string_view target);
/// An error answer (status, OpenAI error JSON), counted in the metrics.
route_result error_result(server_context& ctx, const error& e);
/// error_result with another HTTP status than the error code's (405, 415, 417).
route_result error_result(server_context& ctx, int status, const error& e);
/// Checks --api-key (not for CORS preflights, the playground page at /, nor /health and
/// /metrics unless --api-key-guards-metrics); an unauthorized result when it fails.
std::optional<route_result> check_auth(server_context& ctx, std::string_view method, std::string_view path,
                                       std::string_view authorization);
/// The credentials of a WebSocket upgrade: the Authorization header, or else "Bearer KEY" from
/// the target's `api_key` query parameter (browsers cannot set headers on a WebSocket).
std::string upgrade_authorization(std::string_view target, std::string_view header);
/// Routes one request.
route_result route(server_context& ctx, http_request_view req);

}  // namespace actorserve::server
