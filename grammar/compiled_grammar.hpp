#pragma once
/// A grammar prepared for one vocabulary: per grammar position (an element that reads a byte),
/// the tokens that are accepted or rejected from there whatever the stack below holds
/// (context-independent, computed once here) and the few whose fate depends on the stack
/// (context-dependent, checked against the real stack at each step by the matcher). This is the
/// split XGrammar published; the code is this project's own.
///
/// How a position's table is made: the vocabulary trie is walked from a stack holding only that
/// position, above a stand-in for "whatever continues the rule" (a sentinel). When the rule ends,
/// the walk continues into the places the rule can return to: with exactly one such place the
/// walk stays context-independent; with several it goes on into each of them but marks the branch
/// as depending on the stack. A token is accepted when an unmarked branch reads all its bytes,
/// uncertain when only marked branches do, rejected otherwise. The walk memoises transitions
/// between sets of (hash-consed) stacks, so a trie node costs one lookup once its state was seen.
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <span>
#include <vector>

#include "grammar/grammar.hpp"
#include "grammar/vocabulary.hpp"

namespace actorserve::grammar {

/// The tokens of one position.
struct token_table {
  std::vector<uint32_t> accepted_bits;  ///< a mask over the vocabulary, when many are accepted
  std::vector<int32_t> accepted_ids;    ///< else the accepted ids
  std::vector<int32_t> uncertain_ids;   ///< checked against the stack at each step
};

/// The tables of several positions at once (the stack tops of one matcher state), merged.
struct combined_table {
  std::vector<uint32_t> accepted_bits;  ///< a mask over the vocabulary
  int64_t num_accepted = 0;
  /// (token id, table index): tokens to check against the stacks whose top has that table.
  std::vector<std::pair<int32_t, uint32_t>> uncertain;
};

/// Sizes and time of a compilation (for logs and the benchmark).
struct compile_stats {
  uint32_t num_positions = 0;      ///< byte-reading positions
  uint32_t num_tables = 0;         ///< tables computed (positions of deep repetition levels share)
  uint64_t num_uncertain = 0;      ///< uncertain entries over all tables
  uint32_t num_states = 0;         ///< distinct stack sets the walks met
  uint64_t work = 0;               ///< units of work done (see compiled_grammar::compile_within)
  uint64_t largest_closure = 0;    ///< the most frames one transition's closure expanded
  double milliseconds = 0.0;
};

class compiled_grammar {
 public:
  static std::shared_ptr<const compiled_grammar> compile(grammar g, std::shared_ptr<const vocabulary> vocab);
  /// The same within a budget, or nullptr once the compile would pass it. Work is counted in
  /// units, not time (see compiled_grammar.cpp: trie nodes walked, new transitions, stack tops
  /// read and closure frames expanded), so the same grammar always passes or always fails. The
  /// budget is `floor` plus `per_position` per position whose table is computed (positions of
  /// deep repetition levels share one and count once); besides, no one transition's closure may
  /// expand more than max(closure_floor, closure_per_element x elements) frames (a grammar
  /// whose readings multiply with every byte is caught at its first large closure, long before
  /// its work reaches the budget). The defaults are no bound (tests, benchmarks).
  struct work_budget {
    uint64_t floor = std::numeric_limits<uint64_t>::max();
    uint64_t per_position = 0;
    uint64_t closure_floor = std::numeric_limits<uint64_t>::max();
    uint64_t closure_per_element = 0;
  };
  static std::shared_ptr<const compiled_grammar> compile_within(grammar g, std::shared_ptr<const vocabulary> vocab,
                                                                work_budget budget);

  const grammar& rules() const { return grammar_; }
  const vocabulary& vocab() const { return *vocab_; }
  /// The table of a byte-reading position.
  const token_table& table_at(uint32_t pos) const { return tables_[table_of_[pos]]; }
  /// The index of that table (positions of deep repetition levels share one).
  uint32_t table_index(uint32_t pos) const { return table_of_[pos]; }
  /// The tables `indices` (sorted, unique) merged; cached, since a generation meets the same
  /// sets of stack tops again and again. Thread-safe.
  std::shared_ptr<const combined_table> combined(const std::vector<uint32_t>& indices) const;
  const compile_stats& stats() const { return stats_; }

 private:
  compiled_grammar(grammar g, std::shared_ptr<const vocabulary> vocab) : grammar_(std::move(g)), vocab_(std::move(vocab)) {}
  grammar grammar_;
  std::shared_ptr<const vocabulary> vocab_;
  std::vector<uint32_t> table_of_;  ///< per element index
  std::vector<token_table> tables_;
  compile_stats stats_;
  mutable std::mutex combined_mu_;
  mutable std::map<std::vector<uint32_t>, std::shared_ptr<const combined_table>> combined_;
};

}  // namespace actorserve::grammar
