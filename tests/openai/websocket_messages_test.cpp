#include <gtest/gtest.h>

#include "protocol/openai/parse.hpp"
#include "protocol/websocket/messages.hpp"

namespace actorserve::protocol::websocket {
namespace {

TEST(WebSocketMessages, ParsesRequestsWithBodyAsJson) {
  auto m = parse_client_message(R"({"type": "chat", "id": "r1", "body": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}})");
  ASSERT_TRUE(m.ok()) << m.err().message;
  EXPECT_EQ(m->type, message_type::chat);
  EXPECT_EQ(m->id, "r1");
  auto chat = openai::parse_chat_request(m->body);
  ASSERT_TRUE(chat.ok()) << chat.err().message;
  EXPECT_EQ(chat->messages[0].content, "hi");
  EXPECT_EQ(chat->params.max_tokens, 3);

  auto c = parse_client_message(R"({"id": "r2", "type": "completions", "body": {"prompt": "x"}})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->type, message_type::completions);
}

TEST(WebSocketMessages, ParsesCancel) {
  auto m = parse_client_message(R"({"type": "cancel", "id": "r1"})");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->type, message_type::cancel);
  EXPECT_EQ(m->id, "r1");
  EXPECT_TRUE(m->body.empty());
}

TEST(WebSocketMessages, ErrorsNameTheField) {
  struct bad { const char* text; const char* param; };
  for (const bad& b : {bad{R"({"id": "r"})", "type"}, bad{R"({"type": "x", "id": "r"})", "type"},
                       bad{R"({"type": 1, "id": "r"})", "type"}, bad{R"({"type": "cancel"})", "id"},
                       bad{R"({"type": "cancel", "id": ""})", "id"}, bad{R"({"type": "cancel", "id": 3})", "id"},
                       bad{R"({"type": "chat", "id": "r"})", "body"}, bad{R"({"type": "chat", "id": "r", "body": []})", "body"},
                       bad{R"(not json)", "body"}}) {
    auto m = parse_client_message(b.text);
    ASSERT_FALSE(m.ok()) << b.text;
    EXPECT_EQ(openai::error_param(m.err().message), b.param) << m.err().message;
  }
}

TEST(WebSocketMessages, ServerFrames) {
  openai::chunk_delta d;
  d.index = 1;
  d.text = "yo";
  const int32_t ids[] = {7};
  d.token_ids = ids;
  d.finish_reason = "stop";
  EXPECT_EQ(write_delta_frame("r1", d, true, {.return_token_ids = true}),
            R"({"type":"delta","id":"r1","index":1,"text":"yo","finish_reason":"stop","token_ids":[7]})");
  EXPECT_EQ(write_done_frame("r1", {2, 3, 0}),
            R"({"type":"done","id":"r1","usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
  EXPECT_EQ(write_error_frame("", "bad", "invalid_request_error", "type", ""),
            R"({"type":"error","id":null,"error":{"message":"bad","type":"invalid_request_error","param":"type","code":null}})");
}

}  // namespace
}  // namespace actorserve::protocol::websocket
