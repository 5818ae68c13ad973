#pragma once
/// Streaming detokenization: text for each generated token as soon as it is safe to show.
/// Uses vLLM/TGI's prefix/read-offset technique: decode a short window of ids that starts at a
/// safe boundary and emit the part beyond the already-emitted prefix. A boundary is safe when
/// decoding cannot change across it: not inside a run of `<0xNN>` byte-fallback tokens and not
/// inside a multi-byte UTF-8 character of byte-level tokens. So every output is whole UTF-8
/// characters and the concatenation of all outputs equals tokenizer::decode of the generated
/// ids (given after the prompt's text when a prompt is supplied). O(window) work per token.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "protocol/tokenizer/tokenizer.hpp"

namespace actorserve::protocol {

class incremental_detokenizer {
 public:
  /// `prompt_ids` (may be empty) give the context the first generated token is decoded in.
  explicit incremental_detokenizer(tokenizer tok, std::span<const int32_t> prompt_ids = {},
                                   bool skip_special_tokens = true);

  /// Appends one generated id; returns the text that became safe to emit (maybe empty).
  std::string push(int32_t id);
  /// Returns whatever is still held back (e.g. an unfinished byte run) and resets the window.
  std::string flush();

 private:
  bool keeps(int32_t id) const;
  bool end_is_safe() const;
  bool boundary_safe_before(std::span<const int32_t> ids, size_t k) const;
  std::string emit_pending();

  tokenizer tok_;
  bool skip_special_;
  std::vector<int32_t> window_;  ///< ids from the prefix offset on
  size_t read_ = 0;              ///< ids of window_ before this index were already emitted
};

}  // namespace actorserve::protocol
