#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "protocol/json/writer.hpp"
#include "protocol/openai/sse.hpp"

namespace actorserve::protocol {
namespace {

std::string escaped(std::string_view s) {
  std::string out;
  json::append_string(out, s);
  return out;
}

TEST(JsonWriter, EscapesQuotesBackslashAndControlCharacters) {
  EXPECT_EQ(escaped("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(escaped("l1\nl2\r\t\b\f"), R"("l1\nl2\r\t\b\f")");
  EXPECT_EQ(escaped(std::string("\x01\x1f\x00", 3)), R"("\u0001\u001f\u0000")");
  EXPECT_EQ(escaped("\x7f"), "\"\x7f\"");  // DEL needs no escape
}

TEST(JsonWriter, KeepsValidUtf8) {
  EXPECT_EQ(escaped("h\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80"), "\"h\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80\"");
}

TEST(JsonWriter, ReplacesInvalidUtf8ByteByByte) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(escaped("a\xFF" "b"), "\"a" + r + "b\"");                 // never valid
  EXPECT_EQ(escaped("\xC3"), "\"" + r + "\"");                        // truncated 2-byte
  EXPECT_EQ(escaped("\xE4\xB8"), "\"" + r + r + "\"");                // truncated 3-byte
  EXPECT_EQ(escaped("\xC0\xAF"), "\"" + r + r + "\"");                // overlong '/'
  EXPECT_EQ(escaped("\xED\xA0\x80"), "\"" + r + r + r + "\"");        // UTF-16 surrogate
  EXPECT_EQ(escaped("\xF4\x90\x80\x80"), "\"" + r + r + r + r + "\"");  // above U+10FFFF
  EXPECT_EQ(escaped("\x80x"), "\"" + r + "x\"");                      // lone continuation
}

TEST(JsonWriter, WritesNestedStructuresWithCommas) {
  std::string out;
  json::writer w(out);
  const int32_t ids[] = {1, -2, 300};
  w.begin_object();
  w.key("a").num(-5).key("b").str("x").key("c").begin_array().boolean(true).null().real(0.5).end_array();
  w.key("d").begin_object().end_object().key("e").int_array(ids).key("f").raw("{\"z\":1}");
  w.end_object();
  EXPECT_EQ(out, R"({"a":-5,"b":"x","c":[true,null,0.5],"d":{},"e":[1,-2,300],"f":{"z":1}})");
}

TEST(JsonWriter, DoublesRoundTripAndNonFiniteValuesStayValidJson) {
  std::string out;
  json::append_double(out, -0.125);
  out += ' ';
  json::append_double(out, 1e-7);
  out += ' ';
  json::append_double(out, -std::numeric_limits<double>::infinity());
  out += ' ';
  json::append_double(out, std::nan(""));
  EXPECT_EQ(out, "-0.125 1e-07 -9999.0 null");
}

TEST(Sse, FramesEventsAndDone) {
  EXPECT_EQ(sse::event(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse::done, "data: [DONE]\n\n");
}

}  // namespace
}  // namespace actorserve::protocol
