// GET / serves the playground page compiled into the binary, also without the API key.
#include <gtest/gtest.h>

#include "fake_engine.hpp"
#include "http_client.hpp"
#include "server/serve.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

class PlaygroundPage : public ::testing::Test {
 protected:
  void start(const std::string& api_key) {
    auto tok = protocol::tokenizer::from_model_dir(model_dir("llama-tiny"));
    ASSERT_TRUE(tok.ok()) << tok.err().message;
    engine_ = std::make_unique<fake_engine>(std::move(*tok));
    engine_config cfg;
    cfg.server.port = 0;
    cfg.server.api_key = api_key;
    auto srv = server::http_server::start(*engine_, cfg);
    ASSERT_TRUE(srv.ok()) << srv.err().message;
    server_ = std::move(*srv);
  }
  void TearDown() override {
    engine_->shutdown(std::chrono::milliseconds(0));
    server_.reset();
  }
  std::unique_ptr<fake_engine> engine_;
  std::unique_ptr<server::http_server> server_;
};

TEST_F(PlaygroundPage, GetServesTheHtmlAndHeadItsLength) {
  start("");
  const auto page = http_call(server_->port(), "GET", "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.headers.at("content-type"), "text/html; charset=utf-8");
  EXPECT_TRUE(page.body.starts_with("<!doctype html>")) << page.body.substr(0, 64);
  EXPECT_NE(page.body.find("/v1/stream"), std::string::npos);
  // The server closes after answering, so the reader does not wait for a body HEAD never sends.
  const auto head = http_call(server_->port(), "HEAD", "/", {}, {"Connection: close"});
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers.at("content-length"), std::to_string(page.body.size()));
  EXPECT_EQ(head.body, "");
  EXPECT_EQ(http_call(server_->port(), "POST", "/", "{}").status, 405);
}

TEST_F(PlaygroundPage, TheApiKeyGuardsTheApiButNotThePage) {
  start("sekrit");
  EXPECT_EQ(http_call(server_->port(), "GET", "/").status, 200);
  EXPECT_EQ(http_call(server_->port(), "GET", "/v1/models").status, 401);
}

}  // namespace
}  // namespace actorserve::testing
