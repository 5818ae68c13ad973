#pragma once
/// A tokenizer's vocabulary as the grammar engine sees it: each token id's bytes (what the token
/// adds to the decoded text), which ids may never appear inside a grammar (special tokens, holes
/// in the id space, padding ids past the tokenizer's), the terminators (EOS ids, allowed only
/// where the grammar is complete) and a trie of the byte strings in preorder, which the mask
/// tables are computed over.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actorserve::grammar {

/// The vocabulary's byte strings as a trie, nodes in preorder: node i's subtree is [i, end[i]),
/// its first child (if any) is i + 1, and the ids of the tokens whose bytes end at node i are
/// token_ids[first_token[i] .. first_token[i + 1]).
struct token_trie {
  std::vector<uint8_t> byte;
  std::vector<uint32_t> depth;        ///< 1 for nodes under the (implicit) root
  std::vector<uint32_t> end;
  std::vector<uint32_t> first_token;  ///< size nodes + 1
  std::vector<int32_t> token_ids;

  uint32_t num_nodes() const { return static_cast<uint32_t>(byte.size()); }
  std::span<const int32_t> tokens_at(uint32_t node) const {
    return std::span<const int32_t>(token_ids).subspan(first_token[node], first_token[node + 1] - first_token[node]);
  }
};

class vocabulary {
 public:
  /// `size`: the mask width in tokens (the model's vocabulary, which may exceed the tokenizer's).
  /// `token_bytes[id]` for ids below token_bytes.size(); `excluded[id]` (same length) marks ids
  /// never allowed inside a grammar. Ids from token_bytes.size() to size are excluded too, as are
  /// ids with no bytes.
  vocabulary(int32_t size, std::vector<std::string> token_bytes, std::vector<uint8_t> excluded,
             std::vector<int32_t> terminators);

  int32_t size() const { return size_; }
  /// 32-bit words of a mask over this vocabulary.
  size_t mask_words() const { return (static_cast<size_t>(size_) + 31) / 32; }
  /// The bytes of an allowed token id (empty for excluded ones).
  std::string_view bytes(int32_t id) const;
  bool allowed(int32_t id) const;
  const std::vector<int32_t>& terminators() const { return terminators_; }
  /// The longest token in bytes (a token completes at most this many repetition items).
  uint32_t max_token_bytes() const { return max_token_bytes_; }
  const token_trie& trie() const { return trie_; }

 private:
  int32_t size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<uint8_t> allowed_;
  std::vector<int32_t> terminators_;
  uint32_t max_token_bytes_ = 0;
  token_trie trie_;
};

}  // namespace actorserve::grammar
