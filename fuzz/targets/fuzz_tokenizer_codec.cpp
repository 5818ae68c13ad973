// Tokenizer encode/decode on arbitrary bytes and ids, over the byte-level (Llama-3 style) and
// SentencePiece-style (Llama-2 style) fixture tokenizers. Input: one flags byte, then the text,
// which is also read as little-endian 16-bit ids. Checks: ids in range, decode gives valid UTF-8,
// byte-level BPE round-trips valid UTF-8, the streaming detokenizer's pieces add up to decode().
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "protocol/tokenizer/incremental_detokenizer.hpp"
#include "protocol/tokenizer/tokenizer.hpp"

using actorserve::protocol::tokenizer;
using actorserve::fuzz::valid_utf8;

namespace {

const tokenizer& fixture(int which) {
  static const auto load = [](const char* name) {
    auto t = tokenizer::from_files(actorserve::fuzz::data_dir() + "/tokenizers/" + name + "/tokenizer.json", "");
    FUZZ_CHECK(t.ok(), "cannot load fixture tokenizer %s: %s", name, t.err().message.c_str());
    return std::move(t).value();
  };
  static const tokenizer byte_level = load("bytelevel");
  static const tokenizer sentencepiece = load("sentencepiece");
  return which == 0 ? byte_level : sentencepiece;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)fixture(0);
  (void)fixture(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const bool is_byte_level = (flags & 1) == 0;
  const bool add_special = flags & 2;
  const bool skip_special = flags & 4;
  const tokenizer& tok = fixture(is_byte_level ? 0 : 1);
  std::string_view text = actorserve::fuzz::as_text(data + 1, size - 1);

  // Encode arbitrary bytes.
  std::vector<int32_t> ids = tok.encode(text, add_special);
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tok.vocab_size(), "encode produced id %d", id);
  std::string back = tok.decode(ids, false);
  FUZZ_CHECK(valid_utf8(back), "decode(encode(text)) is not valid UTF-8");
  if (is_byte_level && !add_special && valid_utf8(text))
    FUZZ_CHECK(back == text, "byte-level round trip lost text (%zu bytes in, %zu out)", text.size(), back.size());

  // Decode arbitrary ids, some negative or past the vocabulary.
  std::vector<int32_t> raw;
  const int32_t span = tok.vocab_size() + 16;
  for (size_t i = 0; i + 1 < text.size(); i += 2) {
    auto v = static_cast<uint16_t>(static_cast<uint8_t>(text[i]) | (static_cast<uint8_t>(text[i + 1]) << 8));
    raw.push_back(static_cast<int32_t>(v % span) - 8);
  }
  std::string decoded = tok.decode(raw, skip_special);
  FUZZ_CHECK(valid_utf8(decoded), "decode(ids) is not valid UTF-8");
  for (int32_t id : raw) {
    if (auto s = tok.id_to_token(id)) {
      auto back_id = tok.token_to_id(*s);
      FUZZ_CHECK(back_id.has_value(), "token_to_id(id_to_token(%d)) is empty", id);
    }
  }

  // The streaming detokenizer's pieces, concatenated, equal decode() of the same ids.
  actorserve::protocol::incremental_detokenizer detok(tok, {}, skip_special);
  std::string streamed;
  for (int32_t id : raw) {
    std::string piece = detok.push(id);
    FUZZ_CHECK(valid_utf8(piece), "incremental piece is not valid UTF-8");
    streamed += piece;
  }
  streamed += detok.flush();
  FUZZ_CHECK(streamed == decoded, "streamed text (%zu bytes) != decode (%zu bytes)", streamed.size(), decoded.size());
  return 0;
}
