#pragma once
/// GPT-2's byte-to-unicode map: every byte becomes a printable code point so that byte-level
/// vocabularies are valid JSON strings. The tokenizer works on raw bytes internally and uses
/// this map only to translate vocabulary strings once, at load time.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace actorserve::protocol::detail {

/// The code point GPT-2's byte-to-unicode map assigns to byte `b`.
uint32_t byte_to_code_point(uint8_t b);
/// Raw bytes of a byte-level vocabulary string, or nullopt when a character is outside the map.
std::optional<std::string> byte_level_to_bytes(std::string_view token);

}  // namespace actorserve::protocol::detail
