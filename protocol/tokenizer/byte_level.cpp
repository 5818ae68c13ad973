#include "protocol/tokenizer/byte_level.hpp"

#include "protocol/tokenizer/utf8.hpp"

namespace actorserve::protocol::detail {
namespace {

struct byte_tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> from_cp{};  // code points 0..323 cover the whole image of the map

  byte_tables() {
    from_cp.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = printable ? b : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const byte_tables& tables() {
  static const byte_tables t;
  return t;
}

}  // namespace

uint32_t byte_to_code_point(uint8_t b) { return tables().to_cp[b]; }

std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  const auto& t = tables();
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    size_t len = utf8_char_len(token, i);
    if (len == 0) return std::nullopt;
    uint32_t cp = 0;
    auto b0 = static_cast<uint8_t>(token[i]);
    if (len == 1) {
      cp = b0;
    } else if (len == 2) {
      cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3Fu);
    } else {
      return std::nullopt;  // three- and four-byte characters are outside the map
    }
    if (cp >= t.from_cp.size() || t.from_cp[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(t.from_cp[cp]));
    i += len;
  }
  return out;
}

}  // namespace actorserve::protocol::detail
