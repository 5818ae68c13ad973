#include <gtest/gtest.h>

#include "server/context.hpp"
#include "server/errors.hpp"

namespace actorserve::server {
namespace {

TEST(ErrorMapping, EveryCodeHasItsStatusAndType) {
  struct row { error_code code; int status; const char* type; };
  for (const row& r : {row{error_code::invalid_argument, 400, "invalid_request_error"},
                       row{error_code::unsupported, 400, "invalid_request_error"},
                       row{error_code::not_found, 404, "not_found_error"},
                       row{error_code::too_large, 413, "invalid_request_error"},
                       row{error_code::unauthorized, 401, "authentication_error"},
                       row{error_code::unavailable, 503, "service_unavailable"},
                       row{error_code::out_of_memory, 503, "service_unavailable"},
                       row{error_code::internal, 500, "server_error"},
                       row{error_code::malformed_file, 500, "server_error"},
                       row{error_code::cancelled, 499, "cancelled"}}) {
    const http_error h = to_http_error(make_error(r.code, "x"));
    EXPECT_EQ(h.status, r.status) << to_string(r.code);
    EXPECT_EQ(h.type, r.type) << to_string(r.code);
  }
}

TEST(ErrorMapping, BodyIsAnOpenAIErrorWithTheParam) {
  const http_error h = to_http_error(make_error(error_code::invalid_argument, "top_k: must be -1 (off) or >= 0, got -3"));
  EXPECT_EQ(h.param, "top_k");
  EXPECT_EQ(h.body, R"({"error":{"message":"top_k: must be -1 (off) or >= 0, got -3","type":"invalid_request_error",)"
                    R"("param":"top_k","code":"invalid_argument"}})");
}

TEST(Auth, BearerKeyMustMatchExactly) {
  EXPECT_TRUE(authorized("Bearer abc123", "abc123"));
  EXPECT_FALSE(authorized("Bearer abc12", "abc123"));
  EXPECT_FALSE(authorized("Bearer abc1234", "abc123"));
  EXPECT_FALSE(authorized("Bearer abc124", "abc123"));
  EXPECT_FALSE(authorized("abc123", "abc123"));
  EXPECT_FALSE(authorized("Basic abc123", "abc123"));
  EXPECT_FALSE(authorized("", "abc123"));
}

}  // namespace
}  // namespace actorserve::server
