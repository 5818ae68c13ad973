#pragma once
/// HTTP routing without Beast: a request (method, path, headers, body) becomes either an
/// immediate response or a job to run. Auth, draining, body parsing and errors happen here.
#include <optional>
#include <string>
#include <string_view>

#include "server/job.hpp"

namespace actorserve::server {

struct server_context;

struct http_request_view {
  std::string_view method;
  std::string_view target;         ///< path and optional query
  std::string_view authorization;  ///< the Authorization header, or ""
  std::string_view body;
};

struct route_result {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::optional<job_spec> job;     ///< set: run this generation instead of answering now
};

/// The path part of a target ("/v1/models?x=1" -> "/v1/models").
std::string_view target_path(std::string_view target);
/// An error answer (status, OpenAI error JSON), counted in the metrics.
route_result error_result(server_context& ctx, const error& e);
/// Checks --api-key for every path except /health; an unauthorized result when it fails.
std::optional<route_result> check_auth(server_context& ctx, std::string_view path, std::string_view authorization);
/// Routes one request.
route_result route(server_context& ctx, const http_request_view& req);

}  // namespace actorserve::server
