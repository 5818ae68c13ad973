#pragma once
/// One generation's position in a grammar: a pushdown automaton over bytes. Its state is a set
/// of stacks (the grammar may be ambiguous: every reading is kept), each a chain of frames
/// (grammar positions) shared through parent links; reading a byte makes new frames and never
/// changes old ones, so a rejected token leaves the state as it was (no rollback needed).
/// Return frames are interned: one node per (position, node below), so two readings that reach
/// the same stack share it and are expanded once (an ambiguous grammar such as a nested `(t*)*` would
/// otherwise multiply its stacks with every byte). A grammar whose readings still multiply (such
/// as a regex of nested repetitions, `((t*|u)*|u)*...`) is stopped: a closure of more frames
/// than the bound below makes the read fail and marks the matcher overflowed() for good, so
/// the request ends with an error instead of holding the scheduler.
///
///   matcher m(compiled);
///   m.fill_next_token_bitmask(words);   // tokens allowed next, for the sampler
///   m.accept_token(sampled);             // advance by its bytes
///   m.is_complete(), m.can_continue()    // may the output end here / go on
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.hpp"
#include "grammar/flat_map.hpp"

namespace actorserve::grammar {

class matcher {
 public:
  /// The most frames one byte's closure may expand: this many, or closure_items_per_element
  /// per element of the grammar if more. The closures of real schemas and regexes expand a few
  /// dozen frames; a choice among n strings, n at the start.
  static constexpr size_t closure_items_floor = 4096;
  static constexpr size_t closure_items_per_element = 4;

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
  /// Whether some closure (of the start, a read or a mask's probe) exceeded max_closure_items():
  /// from then on the masks may miss tokens, and the generation must end in an error.
  bool overflowed() const { return overflowed_; }
  size_t max_closure_items() const { return max_closure_items_; }
  /// What a request is told when its matcher overflowed (its constraint is at fault).
  static std::string overflow_message();

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
  /// Expands work_ until every stack top reads a byte; false (and overflowed_ set) past
  /// max_closure_items().
  bool expand(std::vector<uint32_t>& tops, bool& complete);
  /// Drops nodes no stack reaches any more.
  void compact();
  /// The node (pos, below): the existing one, or a new one.
  uint32_t intern(uint32_t pos, uint32_t below);
  /// Rebuilds index_ from nodes_.
  void reindex();
  /// Forgets the nodes made since `mark` (a read that is not kept).
  void truncate(size_t mark) { nodes_.resize(mark); }

  std::shared_ptr<const compiled_grammar> g_;
  size_t max_closure_items_;
  std::vector<stack_node> nodes_;
  /// (pos, below) -> node id. Entries of truncated nodes stay until overwritten: a hit counts
  /// only where the node it names still holds that key.
  detail::flat_map64 index_;
  std::vector<uint32_t> tops_;
  bool complete_ = false;
  bool overflowed_ = false;
  size_t live_after_compact_ = 0;
  // Scratch, kept to avoid allocations per byte.
  std::vector<item> work_;
  detail::visited_items visited_;
  std::vector<uint32_t> scratch_a_, scratch_b_;  ///< read(): the stack tops before and after a byte
  std::vector<uint32_t> scratch_to_;             ///< fill_next_token_bitmask(): read()'s output
  std::vector<uint32_t> indices_;                ///< fill_next_token_bitmask(): the tops' tables
};

}  // namespace actorserve::grammar
