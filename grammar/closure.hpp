#pragma once
/// The automaton's closure, one algorithm for the matcher (real stacks) and the mask compiler
/// (stacks over sentinels): expands stack items until every stack top reads a byte. An item is
/// a frame (`pos`, an element index) over a stack (`below`); a rule reference pushes the
/// rule's alternatives (over a new frame for the rest of the alternative, or over the same
/// stack for a tail call), the end of an alternative pops. Private to grammar/.
///
/// `Stacks` supplies the stack representation:
///   using item = ...;                        with members pos, below
///   uint32_t top(const item&)                the node of a byte-reading stack top
///   void pop(const item&, std::vector<item>&)  the alternative ended: the items below it
///   uint32_t call_below(const item&, bool tail)  the stack a called rule's alternatives go on
///   item start(uint32_t pos, uint32_t below)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "grammar/flat_map.hpp"  // visited_items
#include "grammar/grammar.hpp"

namespace actorserve::grammar::detail {

/// The key of a frame at `pos` over the stack `below`: the closure's visited items, the matcher's
/// and the mask compiler's node indexes.
constexpr uint64_t frame_key(uint32_t pos, uint32_t below) { return (uint64_t{pos} << 32) | below; }

/// Expands `work` until every stack top reads a byte (appended to `tops`). False, with `work`
/// dropped, once the closure would expand more than `max_items` items.
template <class Stacks>
bool expand(const grammar& g, Stacks& stacks, std::vector<typename Stacks::item>& work, visited_items& visited,
            std::vector<uint32_t>& tops, size_t max_items = std::numeric_limits<size_t>::max()) {
  visited.clear();
  while (!work.empty()) {
    const auto it = work.back();
    work.pop_back();
    // NOTE: a frame over a stack is expanded once per closure; this also ends the loops that
    // tail calls through rules matching "" would make.
    if (!visited.insert(frame_key(it.pos, it.below))) continue;
    if (visited.size() > max_items) {
      work.clear();
      return false;
    }
    const element& e = g.at(it.pos);
    switch (e.type) {
      case element::kind::bytes: tops.push_back(stacks.top(it)); break;
      case element::kind::end: stacks.pop(it, work); break;
      case element::kind::rule: {
        const uint32_t below = stacks.call_below(it, g.at(it.pos + 1).type == element::kind::end);
        for (uint32_t a : g.alternatives(e.value)) work.push_back(stacks.start(a, below));
        break;
      }
    }
  }
  return true;
}

}  // namespace actorserve::grammar::detail
