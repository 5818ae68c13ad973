#pragma once
/// Stop strings on streamed text: text is pushed as it is detokenized, and only what can no
/// longer turn out to be (part of) a stop string is emitted.
///
/// Invariant: the concatenation of everything `push` and `flush` return equals the full pushed
/// text cut before the first occurrence of any stop string (or the full text when none occurs),
/// however the text was split into pushes. The first occurrence is the one that ENDS first (for
/// equal ends, the longer one): with stops {"abcd", "bc"}, "xabcd" stops at "bc" and emits "xa",
/// because generation stops as soon as any stop string is complete.
/// The stop string itself, and anything after it, is never emitted. A stop string split across
/// pushes is still caught. Emitted text never ends inside a UTF-8 character: an incomplete
/// trailing character is held back until it completes (or until `flush`).
#include <string>
#include <string_view>
#include <vector>

namespace actorserve::protocol {

class stop_matcher {
 public:
  /// What one push releases.
  struct output {
    std::string text_to_emit;  ///< safe to send now
    bool stopped = false;      ///< a stop string matched; nothing more will be emitted
  };

  /// Empty stop strings are ignored (they would match before any text).
  explicit stop_matcher(std::vector<std::string> stops);

  /// Appends `new_text`; returns the text that can be emitted now.
  output push(std::string_view new_text);

  /// Returns the held-back text at the end of the stream ("" once stopped).
  std::string flush();

  /// Whether a stop string has matched.
  bool stopped() const { return stopped_; }

  /// Bytes currently held back.
  size_t held_back() const { return pending_.size(); }

 private:
  /// Length of the longest suffix of pending_ that is a proper prefix of some stop string.
  size_t partial_match_length() const;

  std::vector<std::string> stops_;
  std::string pending_;  ///< pushed but not yet emitted
  bool stopped_ = false;
};

}  // namespace actorserve::protocol
