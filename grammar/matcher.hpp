#pragma once
/// One generation's position in a grammar: a pushdown automaton over bytes. Its state is a set
/// of stacks (the grammar may be ambiguous: every reading is kept), each a chain of frames
/// (grammar positions) shared through parent links; reading a byte makes new frames and never
/// changes old ones, so a rejected token leaves the state as it was (no rollback needed).
///
///   matcher m(compiled);
///   m.fill_next_token_bitmask(words);   // tokens allowed next, for the sampler
///   m.accept_token(sampled);             // advance by its bytes
///   m.is_complete(), m.can_continue()    // may the output end here / go on
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.hpp"

namespace actorserve::grammar {

class matcher {
 public:
  explicit matcher(std::shared_ptr<const compiled_grammar> g);

  /// Reads the token's bytes; false (state unchanged) when the grammar rejects them. A
  /// terminator (EOS) is accepted only where the grammar is complete, and changes nothing.
  bool accept_token(int32_t id);
  /// Reads raw bytes (tests); false (state unchanged) when rejected.
  bool accept_bytes(std::string_view bytes);
  /// Whether the bytes read so far are a whole sentence of the grammar.
  bool is_complete() const { return complete_; }
  /// Whether some byte may follow.
  bool can_continue() const { return !tops_.empty(); }
  /// Whether `bytes` could be read next (state unchanged).
  bool accepts(std::string_view bytes);

  /// Writes the mask of tokens allowed next into `words` (vocab().mask_words() words): every
  /// token whose bytes the grammar can read next, plus the terminators when complete. Returns
  /// the number of allowed tokens.
  int64_t fill_next_token_bitmask(std::span<uint32_t> words);

  const compiled_grammar& compiled() const { return *g_; }
  /// Stack tops (stacks) of the current state; for tests and statistics.
  size_t num_stacks() const { return tops_.size(); }

 private:
  struct stack_node {
    uint32_t pos;
    uint32_t below;  ///< a node id or `bottom`
  };
  struct item {
    uint32_t pos;
    uint32_t below;
    uint32_t existing;  ///< the node already holding (pos, below), or none
  };

  struct stacks;
  /// Reads `bytes` from `from`; the stack tops after them in `to` (empty: rejected).
  bool read(std::span<const uint32_t> from, std::string_view bytes, std::vector<uint32_t>& to, bool& complete);
  /// Expands work_ until every stack top reads a byte.
  void expand(std::vector<uint32_t>& tops, bool& complete);
  /// Drops nodes no stack reaches any more.
  void compact();

  std::shared_ptr<const compiled_grammar> g_;
  std::vector<stack_node> nodes_;
  std::vector<uint32_t> tops_;
  bool complete_ = false;
  size_t live_after_compact_ = 0;
  // Scratch, kept to avoid allocations per byte.
  std::vector<item> work_;
  std::vector<uint64_t> visited_;
  std::vector<uint32_t> scratch_a_, scratch_b_;  ///< read(): the stack tops before and after a byte
  std::vector<uint32_t> scratch_to_;             ///< fill_next_token_bitmask(): read()'s output
  std::vector<uint32_t> indices_;                ///< fill_next_token_bitmask(): the tops' tables
};

}  // namespace actorserve::grammar
