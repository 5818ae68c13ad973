#include "grammar/matcher.hpp"

#include <algorithm>

#include "grammar/closure.hpp"

namespace actorserve::grammar {
namespace {
constexpr uint32_t bottom = ~0u;
constexpr uint32_t none = ~0u;
/// Frames kept before unreachable ones are dropped (and at least this many times the live ones).
constexpr size_t compact_floor = 4096;
}  // namespace

matcher::matcher(std::shared_ptr<const compiled_grammar> g)
    : g_(std::move(g)),
      max_closure_items_(std::max(closure_items_floor, closure_items_per_element * g_->rules().num_elements())) {
  const grammar& gr = g_->rules();
  for (uint32_t a : gr.alternatives(gr.root())) work_.push_back({a, bottom, none});
  if (!expand(tops_, complete_)) {
    tops_.clear();
    complete_ = false;
  }
  live_after_compact_ = nodes_.size();
}

/// The matcher's stacks for detail::expand: nodes with parent links, `bottom` under the root.
struct matcher::stacks {
  using item = matcher::item;
  matcher& m;
  bool& complete;

  // NOTE: a new top is not interned: a closure's tops are distinct already (its visited set),
  // and a top never lies below another frame, so no later stack can share it.
  uint32_t top(const item& it) {
    if (it.existing != none) return it.existing;
    m.nodes_.push_back({it.pos, it.below});
    return static_cast<uint32_t>(m.nodes_.size() - 1);
  }
  void pop(const item& it, std::vector<item>& work) {
    if (it.below == bottom) {
      complete = true;  // the root rule ended: the input may end here
      return;
    }
    const stack_node parent = m.nodes_[it.below];
    work.push_back({parent.pos, parent.below, it.below});
  }
  uint32_t call_below(const item& it, bool tail) {
    if (tail) return it.below;
    return m.intern(it.pos + 1, it.below);  // where to return
  }
  item start(uint32_t pos, uint32_t below) { return {pos, below, none}; }
};

std::string matcher::overflow_message() {
  return "the output constraint is too ambiguous to follow: its readings of the output multiply past what one "
         "byte may expand (nested repetitions such as ((a*|b)*|c)* do this); simplify the regex or schema";
}

uint32_t matcher::intern(uint32_t pos, uint32_t below) {
  const uint64_t key = detail::frame_key(pos, below);
  if (const uint32_t* id = index_.find(key); id && *id < nodes_.size() && nodes_[*id].pos == pos && nodes_[*id].below == below)
    return *id;
  const auto id = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back({pos, below});
  // Stale entries (of truncated nodes) are overwritten as their keys recur; rebuilt when they
  // outnumber the nodes, so that the index stays as small as the state (and in cache).
  if (index_.size() > 2 * nodes_.size() + 256) reindex();
  index_.put(key, id);
  return id;
}

void matcher::reindex() {
  index_.clear(nodes_.size() + 256);
  for (size_t i = 0; i < nodes_.size(); ++i)
    index_.put(detail::frame_key(nodes_[i].pos, nodes_[i].below), static_cast<uint32_t>(i));
}

bool matcher::expand(std::vector<uint32_t>& tops, bool& complete) {
  stacks s{*this, complete};
  if (detail::expand(g_->rules(), s, work_, visited_, tops, max_closure_items_)) return true;
  overflowed_ = true;
  return false;
}

bool matcher::read(std::span<const uint32_t> from, std::string_view bytes, std::vector<uint32_t>& to,
                   bool& complete) {
  const grammar& g = g_->rules();
  std::vector<uint32_t>& a = scratch_a_;
  a.assign(from.begin(), from.end());
  complete = false;
  for (char c : bytes) {
    const uint8_t b = static_cast<uint8_t>(c);
    work_.clear();
    for (uint32_t t : a) {
      const stack_node n = nodes_[t];
      if (g.bytes_at(n.pos).test(b)) work_.push_back({n.pos + 1, n.below, none});
    }
    scratch_b_.clear();
    complete = false;
    const bool within_bounds = work_.empty() || expand(scratch_b_, complete);
    a.swap(scratch_b_);
    // No stack read the byte (or every one that did died), or the closure overflowed.
    if (!within_bounds || (a.empty() && !complete)) {
      to.clear();
      return false;
    }
  }
  to.assign(a.begin(), a.end());
  return true;
}

bool matcher::accept_bytes(std::string_view bytes) {
  if (bytes.empty()) return true;
  const size_t mark = nodes_.size();
  std::vector<uint32_t> next;
  bool complete = false;
  if (!read(tops_, bytes, next, complete)) {
    truncate(mark);
    return false;
  }
  tops_ = std::move(next);
  complete_ = complete;
  if (nodes_.size() > std::max(compact_floor, 4 * live_after_compact_)) compact();
  return true;
}

bool matcher::accept_token(int32_t id) {
  const vocabulary& v = g_->vocab();
  const auto& term = v.terminators();
  if (std::find(term.begin(), term.end(), id) != term.end()) return complete_;
  if (!v.allowed(id)) return false;
  return accept_bytes(v.bytes(id));
}

bool matcher::accepts(std::string_view bytes) {
  if (bytes.empty()) return true;
  const size_t mark = nodes_.size();
  std::vector<uint32_t> next;
  bool complete = false;
  const bool ok = read(tops_, bytes, next, complete);
  truncate(mark);
  return ok;
}

int64_t matcher::fill_next_token_bitmask(std::span<uint32_t> words) {
  const vocabulary& v = g_->vocab();
  std::vector<uint32_t>& indices = indices_;
  indices.clear();
  for (uint32_t t : tops_) indices.push_back(g_->table_index(nodes_[t].pos));
  std::sort(indices.begin(), indices.end());
  indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
  const auto c = g_->combined(indices);
  const size_t n = std::min(words.size(), c->accepted_bits.size());
  std::copy_n(c->accepted_bits.begin(), n, words.begin());
  std::fill(words.begin() + static_cast<std::ptrdiff_t>(n), words.end(), 0u);
  int64_t count = c->num_accepted;
  // The context-dependent tokens: read each from the stacks whose top has the table naming it.
  const size_t mark = nodes_.size();
  std::vector<uint32_t>& sink = scratch_to_;
  for (const auto& [id, table] : c->uncertain) {
    // Past an overflow the generation ends in an error: no more closures to the bound.
    if (overflowed_) break;
    uint32_t& w = words[static_cast<size_t>(id) >> 5];
    const uint32_t bit = 1u << (id & 31);
    if (w & bit) continue;
    for (uint32_t t : tops_) {
      if (g_->table_index(nodes_[t].pos) != table) continue;
      bool complete = false;
      const uint32_t from[] = {t};
      const bool ok = read(from, v.bytes(id), sink, complete);
      truncate(mark);
      if (ok) {
        w |= bit;
        ++count;
        break;
      }
    }
  }
  if (complete_) {
    for (int32_t id : v.terminators()) {
      uint32_t& w = words[static_cast<size_t>(id) >> 5];
      if (!(w >> (id & 31) & 1)) ++count;
      w |= 1u << (id & 31);
    }
  }
  return count;
}

void matcher::compact() {
  std::vector<uint32_t> remap(nodes_.size(), none);
  for (uint32_t t : tops_)
    for (uint32_t n = t; n != bottom && remap[n] == none; n = nodes_[n].below) remap[n] = 0;
  uint32_t next = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (remap[i] == none) continue;
    remap[i] = next;
    // NOTE: a node's `below` is always older than the node, so it is already renumbered.
    const uint32_t below = nodes_[i].below == bottom ? bottom : remap[nodes_[i].below];
    nodes_[next++] = {nodes_[i].pos, below};
  }
  nodes_.resize(next);
  for (uint32_t& t : tops_) t = remap[t];
  live_after_compact_ = nodes_.size();
  reindex();
}

}  // namespace actorserve::grammar
