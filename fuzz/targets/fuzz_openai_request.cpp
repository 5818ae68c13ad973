// OpenAI request bodies (POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize):
// any bytes either parse into a request whose sampling parameters validate, or fail with an
// error whose message names a field that error_param() can extract without crashing.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "config/sampling_params.hpp"
#include "fuzz_util.hpp"
#include "protocol/openai/parse.hpp"

namespace openai = actorserve::protocol::openai;
using actorserve::fuzz::as_text;

namespace {

template <typename R>
void check_error(const R& r) {
  if (!r) (void)openai::error_param(r.err().message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body = as_text(data, size);

  auto completion = openai::parse_completion_request(body);
  check_error(completion);
  if (completion) {
    FUZZ_CHECK(!completion->prompts.empty(), "a completion request without prompts parsed");
    auto st = actorserve::validate(completion->params);
    FUZZ_CHECK(st.ok(), "parsed completion params do not validate: %s", st.err().message.c_str());
  }

  auto chat = openai::parse_chat_request(body);
  check_error(chat);
  if (chat) {
    FUZZ_CHECK(!chat->messages.empty(), "a chat request without messages parsed");
    auto params = chat->params;
    // Without max_tokens the server fills in the room left in the context and clamps min_tokens
    // to it (server/job.cpp fit_context); 16 stands for that room here.
    if (!chat->max_tokens_set) {
      params.max_tokens = 16;
      params.min_tokens = std::min(params.min_tokens, params.max_tokens);
    }
    auto st = actorserve::validate(params);
    FUZZ_CHECK(st.ok(), "parsed chat params do not validate: %s", st.err().message.c_str());
  }

  check_error(openai::parse_tokenize_request(body));
  check_error(openai::parse_detokenize_request(body));
  return 0;
}
