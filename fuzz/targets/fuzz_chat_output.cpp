// Model output text through the chat output parsers (tool calls, reasoning): the first byte
// picks the parsers and the piece size, the rest is the text. The pieces of a streamed parse
// gather into exactly the whole parse (content, reasoning, call names and arguments), every
// call's first piece names it, and later pieces of a call never do.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.hpp"
#include "protocol/chat_output/chat_output_parser.hpp"

namespace co = actorserve::protocol::chat_output;
using actorserve::reasoning_parser_kind;
using actorserve::tool_parser_kind;
using actorserve::fuzz::as_text;

namespace {

co::chat_output parse(const co::output_options& o, std::string_view text, size_t step) {
  co::chat_output_parser p(o);
  co::chat_output out;
  int32_t calls = 0;
  auto take = [&](co::output_piece&& piece) {
    for (const auto& c : piece.tool_calls) {
      const bool first = !c.name.empty();
      FUZZ_CHECK(first == !c.id.empty(), "a piece has a name without an id or an id without a name");
      FUZZ_CHECK(first ? c.index == calls : c.index == calls - 1, "piece index %d with %d calls begun", c.index, calls);
      if (first) ++calls;
    }
    out.add(std::move(piece));
  };
  for (size_t i = 0; i < text.size(); i += step) take(p.push(text.substr(i, step)));
  take(p.finish());
  FUZZ_CHECK(p.called_tools() == (calls > 0), "called_tools() disagrees with the pieces");
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::string_view text = as_text(data + 1, size - 1);
  co::output_options o;
  // none, llama3_json, hermes, mistral; none with bit 4 set: deepseek_v3.
  o.tools = flags % 4 == 0 && (flags & 0x10) ? tool_parser_kind::deepseek_v3 : static_cast<tool_parser_kind>(flags % 4);
  o.reasoning = static_cast<reasoning_parser_kind>((flags / 4) % 3);
  o.parallel_tool_calls = (flags & 0x20) == 0;
  const size_t step = 1 + (flags >> 6) * 3;  // 1, 4, 7, 10 bytes

  const co::chat_output whole = parse(o, text, text.size() + 1);
  const co::chat_output streamed = parse(o, text, step);
  FUZZ_CHECK(whole.content == streamed.content, "content differs streamed in %zu-byte pieces", step);
  FUZZ_CHECK(whole.reasoning == streamed.reasoning, "reasoning differs streamed in %zu-byte pieces", step);
  FUZZ_CHECK(whole.tool_calls.size() == streamed.tool_calls.size(), "%zu calls whole, %zu streamed",
             whole.tool_calls.size(), streamed.tool_calls.size());
  for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
    FUZZ_CHECK(whole.tool_calls[i].name == streamed.tool_calls[i].name, "call %zu: names differ", i);
    FUZZ_CHECK(whole.tool_calls[i].arguments == streamed.tool_calls[i].arguments, "call %zu: arguments differ", i);
  }
  if (!o.parallel_tool_calls) FUZZ_CHECK(whole.tool_calls.size() <= 1, "parallel_tool_calls false gave several calls");
  return 0;
}
