#pragma once
/// A Hugging Face `tokenizer.json` tokenizer: BPE with the byte-level pipeline (GPT-2, Llama-3,
/// Qwen) or the SentencePiece-style pipeline (Llama-2, Mistral), added/special tokens, the
/// TemplateProcessing post-processor and the usual decoders. Immutable after loading; encode and
/// decode are safe to call from several threads at once.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.hpp"

namespace actorserve::protocol {

namespace detail {
struct tokenizer_impl;
}

class tokenizer {
 public:
  /// Loads `tokenizer.json` and, when the path is non-empty and the file exists,
  /// `tokenizer_config.json` (bos/eos tokens, add_bos_token, chat_template).
  static result<tokenizer> from_files(const std::string& tokenizer_json_path,
                                      const std::string& tokenizer_config_path);
  /// Loads `dir/tokenizer.json`, `dir/tokenizer_config.json` and the EOS ids of
  /// `dir/generation_config.json` when those exist.
  static result<tokenizer> from_model_dir(const std::string& dir);

  /// Token ids of `text` (arbitrary bytes; invalid UTF-8 is encoded losslessly where the
  /// vocabulary allows). `add_special_tokens` applies the post-processor (BOS).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  /// Text of `ids`; ids outside the vocabulary are skipped.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  /// The raw bytes `id` adds to a decoded text after other tokens (possibly part of a UTF-8
  /// sequence; the decoders' stripping of the text's first space does not apply), or nullopt
  /// when out of range. What grammar-constrained decoding matches tokens by.
  std::optional<std::string> token_bytes(int32_t id) const;
  /// The vocabulary string of `id` (as written in tokenizer.json), or nullopt when out of range.
  std::optional<std::string> id_to_token(int32_t id) const;
  /// The id of a vocabulary or added-token string, or nullopt.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// One past the largest id (vocabulary plus added tokens).
  int32_t vocab_size() const;
  /// True for added tokens marked `special` (skipped by decode with skip_special_tokens).
  bool is_special(int32_t id) const;

  /// The BOS id (tokenizer_config.json's bos_token, else the post-processor's first special token).
  std::optional<int32_t> bos_token_id() const;
  /// EOS ids: tokenizer_config.json's eos_token plus generation_config.json's eos_token_id.
  const std::vector<int32_t>& eos_token_ids() const;
  /// The BOS/EOS strings from tokenizer_config.json (empty when unknown).
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  /// tokenizer_config.json's add_bos_token, when present.
  std::optional<bool> add_bos_token() const;
  /// The Jinja chat template: chat_template.jinja, else tokenizer_config.json's (the "default"
  /// one of a list); empty if none.
  const std::string& chat_template() const;
  /// The most input bytes one token of this tokenizer can stand for (after normalization shrinks
  /// text), so that a text of B bytes has at least B / this tokens; nullopt when the pipeline can
  /// drop input (then no such bound holds). Walks the vocabulary: call once and keep the value.
  std::optional<int64_t> max_input_bytes_per_token() const;
  /// A named chat template (e.g. "tool_use"), or nullptr when the model has none by that name.
  const std::string* chat_template(std::string_view name) const;

  /// Internal state shared with the incremental detokenizer.
  const detail::tokenizer_impl& impl() const { return *impl_; }

 private:
  explicit tokenizer(std::shared_ptr<const detail::tokenizer_impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const detail::tokenizer_impl> impl_;
};

}  // namespace actorserve::protocol
