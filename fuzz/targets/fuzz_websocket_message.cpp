// WebSocket client frames on GET /v1/stream: any bytes either parse into a message whose body
// is itself valid input for the request parser its type names, or fail with an error.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.hpp"
#include "protocol/openai/parse.hpp"
#include "protocol/websocket/messages.hpp"

namespace ws = actorserve::protocol::websocket;
namespace openai = actorserve::protocol::openai;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto msg = ws::parse_client_message(actorserve::fuzz::as_text(data, size));
  if (!msg) {
    (void)openai::error_param(msg.err().message);
    return 0;
  }
  switch (msg->type) {
    case ws::message_type::cancel:
      FUZZ_CHECK(!msg->id.empty(), "a cancel message without an id parsed");
      break;
    case ws::message_type::completions: {
      FUZZ_CHECK(!msg->body.empty(), "a completions message without a body parsed");
      auto r = openai::parse_completion_request(msg->body);
      if (!r) (void)openai::error_param(r.err().message);
      break;
    }
    case ws::message_type::chat: {
      FUZZ_CHECK(!msg->body.empty(), "a chat message without a body parsed");
      auto r = openai::parse_chat_request(msg->body);
      if (!r) (void)openai::error_param(r.err().message);
      break;
    }
  }
  // The error frame echoes the client's id: it must stay one valid JSON text whatever the id holds.
  std::string frame = ws::write_error_frame(msg->id, "fuzz", "invalid_request_error", "", "");
  FUZZ_CHECK(actorserve::fuzz::valid_utf8(frame), "error frame is not valid UTF-8");
  return 0;
}
