#pragma once
/// A pre-tokenizer split by a PCRE2 regex (JIT-compiled, Unicode properties, safe on invalid
/// UTF-8). Splitting is lossless: the bytes between matches are emitted as their own pieces.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.hpp"

namespace actorserve::protocol::detail {

class regex_splitter {
 public:
  /// What happens to the matches: kept as pieces (HF "Isolated") or dropped ("Removed").
  enum class behavior { isolated, removed };

  /// Compiles `pattern`; the error message names `what` (file and field).
  static result<regex_splitter> compile(std::string_view pattern, behavior b, const std::string& what);

  /// Appends the pieces of `text` to `out` (views into `text`).
  void split(std::string_view text, std::vector<std::string_view>& out) const;
  /// Whether matches are dropped (then the split loses input).
  bool removes() const { return behavior_ == behavior::removed; }

 private:
  struct code;
  regex_splitter(std::shared_ptr<const code> c, behavior b) : code_(std::move(c)), behavior_(b) {}
  std::shared_ptr<const code> code_;
  behavior behavior_ = behavior::isolated;
};

/// The GPT-2 pattern ByteLevel uses when `use_regex` is true.
inline constexpr std::string_view gpt2_split_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace actorserve::protocol::detail
