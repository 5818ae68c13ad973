#pragma once
/// Internal state of a loaded tokenizer: the pipeline stages read from tokenizer.json, in the
/// order Hugging Face applies them. Built by tokenizer_load.cpp, used by encode/decode.
#include <cstdint>
#include <array>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "protocol/tokenizer/bpe.hpp"
#include "protocol/tokenizer/regex_splitter.hpp"
#include "protocol/tokenizer/unicode_normalize.hpp"

namespace actorserve::protocol::detail {

/// A normalizer step (Sequence is flattened): Prepend or Replace of a literal string.
struct normalizer_step {
  /// unicode: the Unicode normalization form in `form` (NFC, NFD, NFKC, NFKD; utf8proc)
  enum class kind { prepend, replace, unicode } type = kind::replace;
  unicode_form form = unicode_form::nfc;
  std::string pattern;  ///< replace: the literal searched for
  std::string content;  ///< prepend: the prefix; replace: the replacement
};

/// Metaspace pre-tokenizer settings.
struct metaspace_settings {
  std::string replacement = "\xE2\x96\x81";  // U+2581
  enum class prepend { always, first, never } prepend_scheme = prepend::always;
  bool split = true;
};

/// One added token from `added_tokens`.
struct added_token {
  int32_t id = 0;
  std::string content;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
  bool single_word = false;
};

/// A decoder step (Sequence is flattened).
struct decoder_step {
  enum class kind { byte_level, replace, byte_fallback, fuse, strip, metaspace } type = kind::fuse;
  std::string pattern;  ///< replace: literal searched for; metaspace: the replacement char
  std::string content;  ///< replace: replacement; strip: the character stripped
  int start = 0;        ///< strip: characters stripped at the start; metaspace: 1 to strip a leading space
  int stop = 0;         ///< strip: characters stripped at the end
};

/// Everything one tokenizer.json (+ tokenizer_config.json) describes.
struct tokenizer_impl {
  std::string source;  ///< the tokenizer.json path, for messages

  // Vocabulary as written in the file (byte-level strings stay in their mapped form here).
  std::vector<std::string> id_to_token;  ///< empty string = hole in the id space
  string_id_map token_to_id;

  std::vector<normalizer_step> normalizers;
  std::vector<regex_splitter> splitters;  ///< Split / ByteLevel(use_regex) in order
  bool byte_level_prefix_space = false;   ///< ByteLevel pre-tokenizer add_prefix_space
  std::optional<metaspace_settings> metaspace;
  bpe_model model;

  std::vector<added_token> added;  ///< in file order
  std::vector<uint8_t> special;    ///< per id: 1 when an added token marked special
  /// Added tokens by first byte, longest first: matched on raw text (normalized=false) and on
  /// normalized text (normalized=true).
  struct added_index {
    std::array<std::vector<uint32_t>, 256> by_first_byte;
    bool empty = true;
  };
  added_index raw_added;
  added_index normalized_added;

  /// TemplateProcessing "single": ids before and after the sequence.
  std::vector<int32_t> post_prefix;
  std::vector<int32_t> post_suffix;
  bool has_post_processor = false;

  std::vector<decoder_step> decoders;
  /// Per id: the decoded bytes when the decoder chain is exactly ByteLevel (fast path).
  std::vector<std::string> byte_level_bytes;
  std::vector<int16_t> byte_token_value;  ///< per id: NN of a `<0xNN>` token, else -1

  // tokenizer_config.json / generation_config.json
  std::string bos_token;
  std::string eos_token;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::string chat_template;
  /// Named templates (tokenizer_config.json's list, additional_chat_templates/*.jinja), e.g. tool_use.
  std::vector<std::pair<std::string, std::string>> named_chat_templates;
  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;

  /// Whether decode() treats `id` as a `<0xNN>` byte token (ByteFallback decoding).
  bool is_byte_token(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < byte_token_value.size() && byte_token_value[id] >= 0;
  }
  /// Whether the decoder chain contains ByteFallback.
  bool decodes_byte_fallback() const;
  /// Whether the decoder chain contains ByteLevel.
  bool decodes_byte_level() const;
  /// The vocabulary string of an id, or nullptr when out of range or a hole.
  const std::string* token_of(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token.size() || id_to_token[id].empty()) return nullptr;
    return &id_to_token[id];
  }
};

/// Appends the ids of `text`; see tokenizer::encode.
void encode_text(const tokenizer_impl& t, std::string_view text, bool add_special_tokens, std::vector<int32_t>& out);
/// Decodes `ids` through the decoder chain; see tokenizer::decode.
std::string decode_ids(const tokenizer_impl& t, std::span<const int32_t> ids, bool skip_special_tokens);
/// The raw bytes of one token in the middle of a text; see tokenizer::token_bytes.
std::optional<std::string> token_bytes(const tokenizer_impl& t, int32_t id);

}  // namespace actorserve::protocol::detail
