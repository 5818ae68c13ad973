#include "grammar/compiled_grammar.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>

#include "grammar/closure.hpp"
#include "grammar/flat_map.hpp"

namespace actorserve::grammar {
namespace {

/// A stack reference below a frame: a node id, a sentinel (flag | sentinel id) or the bottom.
constexpr uint32_t sentinel_flag = 0x40000000u;
constexpr uint32_t bottom_ref = 0x3FFFFFFFu;
constexpr uint32_t ref_mask = 0x7FFFFFFFu;
/// In a node's `below`: the branch depends on the stack under the starting position.
constexpr uint32_t taint_flag = 0x80000000u;
/// Merged tables kept per grammar (each a mask over the vocabulary: 16 KiB at 128k tokens).
constexpr size_t max_combined_tables = 1024;
/// Units of compile work (see compiled_grammar::compile_within), weighted by what they cost: a
/// trie node whose transition is known is a table lookup; a new transition hashes and interns a
/// set of stacks; each stack top it reads from and each frame its closure expands is a few hash
/// lookups more.
constexpr uint64_t known_step_work = 1;
constexpr uint64_t new_transition_work = 16;
constexpr uint64_t frame_work = 4;
/// A return site meaning "the end of the input" (the root rule ends).
constexpr uint32_t end_site = ~0u;

/// The positions each rule returns to: the element after each non-tail reference to it, those of
/// the rules that reference it as a tail call, and end_site for the root.
std::vector<std::vector<uint32_t>> return_sites(const grammar& g) {
  const uint32_t n = g.num_rules();
  std::vector<std::vector<uint32_t>> sites(n);
  std::vector<std::vector<rule_id>> tail_callees(n);
  for (uint32_t p = 0; p < g.num_elements(); ++p) {
    const element& e = g.at(p);
    if (e.type != element::kind::rule) continue;
    if (g.at(p + 1).type == element::kind::end) tail_callees[g.rule_of(p)].push_back(e.value);
    else sites[e.value].push_back(p + 1);
  }
  sites[g.root()].push_back(end_site);
  for (auto& s : sites) {
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
  }
  std::vector<rule_id> work(n);
  for (rule_id r = 0; r < n; ++r) work[r] = r;
  std::vector<uint8_t> queued(n, 1);
  while (!work.empty()) {
    const rule_id r = work.back();
    work.pop_back();
    queued[r] = 0;
    for (rule_id callee : tail_callees[r]) {
      auto& to = sites[callee];
      const size_t before = to.size();
      std::vector<uint32_t> merged;
      std::set_union(to.begin(), to.end(), sites[r].begin(), sites[r].end(), std::back_inserter(merged));
      if (merged.size() == before) continue;
      to = std::move(merged);
      if (!queued[callee]) {
        queued[callee] = 1;
        work.push_back(callee);
      }
    }
  }
  return sites;
}

/// Runs the automaton from single positions over sets of hash-consed stacks (see the header).
class walker {
 public:
  walker(const grammar& g, uint64_t max_work, uint64_t max_closure)
      : g_(g), max_work_(max_work), max_closure_(max_closure) {
    const auto sites = return_sites(g);
    std::map<std::vector<uint32_t>, uint32_t> ids;
    sentinel_of_rule_.resize(g.num_rules());
    for (rule_id r = 0; r < g.num_rules(); ++r) {
      auto [it, fresh] = ids.emplace(sites[r], static_cast<uint32_t>(sentinel_sites_.size()));
      if (fresh) sentinel_sites_.push_back(sites[r]);
      sentinel_of_rule_[r] = it->second;
    }
    states_.emplace_back();  // state 0: no stack left
    reads_.emplace_back();
    lookups_.push_back(0);
  }

  /// The state of a stack holding only `pos` (a byte-reading position).
  uint32_t start(uint32_t pos) {
    const uint32_t id = node(pos, sentinel_flag | sentinel_of_rule_[g_.rule_of(pos)]);
    return intern({id});
  }

  /// The state after `byte`, packed: next state << 2 | some branch read it << 1 | some
  /// context-independent branch read it.
  uint32_t step(uint32_t state, uint8_t byte) {
    work_done_ += known_step_work;
    // A byte no stack top reads ends the branch: most of a trie's first level at most positions.
    if (!reads_[state].test(byte)) return 0;
    // A state met often (string content, digits) gets a direct table of its 256 transitions.
    if (state < dense_.size() && dense_[state]) {
      const uint32_t hit = (*dense_[state])[byte];
      if (hit != unknown) return hit;
    } else if (++lookups_[state] == dense_after && dense_.size() < max_dense_states) {
      if (dense_.size() <= state) dense_.resize(state + 1);
      dense_[state] = std::make_unique<std::array<uint32_t, 256>>();
      dense_[state]->fill(unknown);
    }
    const uint32_t packed = step_memo(state, byte);
    if (state < dense_.size() && dense_[state]) (*dense_[state])[byte] = packed;
    return packed;
  }

  uint32_t step_memo(uint32_t state, uint8_t byte) {
    const uint64_t key = (uint64_t{state} << 8) | byte;
    if (const uint32_t* hit = memo_.find(key)) return *hit;
    work_.clear();
    work_done_ += new_transition_work + frame_work * states_[state].size();
    bool read = false, untainted = false;
    for (uint32_t t : states_[state]) {
      const auto& n = nodes_[t];
      if (!g_.bytes_at(n.pos).test(byte)) continue;
      read = true;
      untainted |= (n.below & taint_flag) == 0;
      work_.push_back({n.pos + 1, n.below});
    }
    std::vector<uint32_t> tops;
    if (!expand(tops)) return 0;  // over the budget: the compile stops (see exhausted())
    const uint32_t next = intern(std::move(tops));
    const uint32_t packed = (next << 2) | (read ? 2u : 0u) | (untainted ? 1u : 0u);
    memo_.put(key, packed);
    return packed;
  }

  uint32_t num_states() const { return static_cast<uint32_t>(states_.size()); }
  uint64_t work_done() const { return work_done_; }
  uint64_t largest_closure() const { return largest_closure_; }
  /// Whether the work passed the budget or a closure its bound: the tables are incomplete and
  /// the compile fails.
  bool exhausted() const { return work_done_ > max_work_ || closure_overflowed_; }

 private:
  struct stack_node {
    uint32_t pos;
    uint32_t below;  ///< reference | taint_flag
  };
  struct item {
    uint32_t pos;
    uint32_t below;
  };

  uint32_t node(uint32_t pos, uint32_t below) {
    const uint64_t key = detail::frame_key(pos, below);
    if (const uint32_t* hit = node_ids_.find(key)) return *hit;
    const uint32_t id = static_cast<uint32_t>(nodes_.size());
    nodes_.push_back({pos, below});
    node_ids_.put(key, id);
    return id;
  }

  uint32_t intern(std::vector<uint32_t> tops) {
    std::sort(tops.begin(), tops.end());
    tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
    if (tops.empty()) return 0;
    std::string key(reinterpret_cast<const char*>(tops.data()), tops.size() * sizeof(uint32_t));
    auto [it, fresh] = state_ids_.emplace(std::move(key), static_cast<uint32_t>(states_.size()));
    if (fresh) {
      byte_set reads;
      for (uint32_t t : tops) reads |= g_.bytes_at(nodes_[t].pos);
      reads_.push_back(reads);
      states_.push_back(std::move(tops));
      lookups_.push_back(0);
    }
    return it->second;
  }

  /// The walker's stacks for detail::expand: hash-consed nodes over sentinels.
  struct stacks {
    using item = walker::item;
    walker& w;

    uint32_t top(const item& it) { return w.node(it.pos, it.below); }
    void pop(const item& it, std::vector<item>& work) {
      const uint32_t below = it.below & ref_mask;
      if (below == bottom_ref) return;  // the input may end here: nothing more to read
      if (below & sentinel_flag) {
        // Where the rule returns to: one place keeps the branch context-independent.
        const auto& sites = w.sentinel_sites_[below & ~sentinel_flag];
        const uint32_t marked = sites.size() > 1 ? taint_flag : (it.below & taint_flag);
        for (uint32_t site : sites)
          if (site != end_site)
            work.push_back({site, (sentinel_flag | w.sentinel_of_rule_[w.g_.rule_of(site)]) | marked});
        return;
      }
      const auto& parent = w.nodes_[below];
      work.push_back({parent.pos, parent.below});
    }
    uint32_t call_below(const item& it, bool tail) {
      return tail ? it.below : (w.node(it.pos + 1, it.below) | (it.below & taint_flag));
    }
    item start(uint32_t pos, uint32_t below) { return {pos, below}; }
  };

  /// The closure, its frames counted as work; false once they pass the budget.
  bool expand(std::vector<uint32_t>& tops) {
    stacks s{*this};
    const uint64_t left = exhausted() ? 0 : (max_work_ - work_done_) / frame_work;
    const uint64_t max_items = std::min<uint64_t>({left, max_closure_, SIZE_MAX});
    const bool within = detail::expand(g_, s, work_, visited_, tops, static_cast<size_t>(max_items));
    work_done_ += frame_work * visited_.size();
    largest_closure_ = std::max<uint64_t>(largest_closure_, visited_.size());
    if (!within) closure_overflowed_ = true;
    return !exhausted();
  }

  const grammar& g_;
  uint64_t max_work_;
  uint64_t max_closure_;
  bool closure_overflowed_ = false;
  uint64_t work_done_ = 0;
  uint64_t largest_closure_ = 0;
  std::vector<std::vector<uint32_t>> sentinel_sites_;
  std::vector<uint32_t> sentinel_of_rule_;
  std::vector<stack_node> nodes_;
  detail::flat_map64 node_ids_;
  std::vector<std::vector<uint32_t>> states_;
  std::vector<byte_set> reads_;  ///< per state: the bytes some stack top reads
  std::unordered_map<std::string, uint32_t> state_ids_;
  detail::flat_map64 memo_;
  static constexpr uint32_t unknown = ~0u;
  static constexpr uint32_t dense_after = 64;       ///< lookups before a state gets a direct table
  static constexpr size_t max_dense_states = 1 << 16;
  std::vector<uint32_t> lookups_;                   ///< per state
  std::vector<std::unique_ptr<std::array<uint32_t, 256>>> dense_;
  std::vector<item> work_;
  detail::visited_items visited_;
};

/// a x b and a + b, saturating (an unbounded compile's budget is the largest value).
uint64_t saturating_product(uint64_t a, uint64_t b) {
  return b != 0 && a > std::numeric_limits<uint64_t>::max() / b ? std::numeric_limits<uint64_t>::max() : a * b;
}
uint64_t saturating_sum(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max() : a + b;
}

/// Walks the trie from `pos`: the accepted and uncertain token ids.
void walk_position(walker& w, const token_trie& trie, uint32_t pos, std::vector<int32_t>& accepted,
                   std::vector<int32_t>& uncertain) {
  const uint32_t start = w.start(pos);
  std::vector<uint32_t> state_at(1, start);
  for (uint32_t i = 0; i < trie.num_nodes();) {
    const uint32_t d = trie.depth[i];
    const uint32_t r = w.step(state_at[d - 1], trie.byte[i]);
    if (w.exhausted()) return;
    if ((r & 2u) == 0) {
      i = trie.end[i];
      continue;
    }
    auto& into = (r & 1u) ? accepted : uncertain;
    for (int32_t id : trie.tokens_at(i)) into.push_back(id);
    const uint32_t next = r >> 2;
    if (next == 0) {
      i = trie.end[i];
      continue;
    }
    if (state_at.size() <= d) state_at.resize(d + 1);
    state_at[d] = next;
    ++i;
  }
}

token_table make_table(std::vector<int32_t>&& accepted, std::vector<int32_t>&& uncertain, const vocabulary& v) {
  token_table t;
  std::sort(uncertain.begin(), uncertain.end());
  t.uncertain_ids = std::move(uncertain);
  if (accepted.size() > v.mask_words()) {
    t.accepted_bits.assign(v.mask_words(), 0);
    for (int32_t id : accepted) t.accepted_bits[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
  } else {
    std::sort(accepted.begin(), accepted.end());
    t.accepted_ids = std::move(accepted);
  }
  return t;
}

}  // namespace

std::shared_ptr<const compiled_grammar> compiled_grammar::compile(grammar g, std::shared_ptr<const vocabulary> vocab) {
  return compile_within(std::move(g), std::move(vocab), work_budget{});
}

std::shared_ptr<const compiled_grammar> compiled_grammar::compile_within(grammar g,
                                                                         std::shared_ptr<const vocabulary> vocab,
                                                                         work_budget budget) {
  const auto t0 = std::chrono::steady_clock::now();
  auto out = std::shared_ptr<compiled_grammar>(new compiled_grammar(std::move(g), std::move(vocab)));
  const grammar& gr = out->grammar_;
  const vocabulary& v = *out->vocab_;
  constexpr uint32_t none = ~0u;
  out->table_of_.assign(gr.num_elements(), none);

  // Deep levels of a bounded repetition share the table of level L + 1 (L: the longest token).
  const uint32_t shared_level = std::max<uint32_t>(v.max_token_bytes() + 1, 2);
  std::vector<uint32_t> alias(gr.num_elements(), none);
  for (const chain& c : gr.chains()) {
    if (c.levels.size() <= shared_level) continue;
    const uint32_t rep_first = gr.alternatives(c.levels[shared_level - 1]).front();
    for (size_t j = shared_level; j < c.levels.size(); ++j) {
      const auto alts = gr.alternatives(c.levels[j]);
      const uint32_t first = alts.front();
      uint32_t last = alts.back();
      while (gr.at(last).type != element::kind::end) ++last;
      for (uint32_t p = first; p <= last; ++p) alias[p] = rep_first + (p - first);
    }
  }

  uint64_t walked = 0;
  for (uint32_t p = 0; p < gr.num_elements(); ++p) walked += gr.at(p).type == element::kind::bytes && alias[p] == none;
  walker w(gr, saturating_sum(budget.floor, saturating_product(budget.per_position, walked)),
           std::max(budget.closure_floor, saturating_product(budget.closure_per_element, gr.num_elements())));
  std::vector<int32_t> accepted, uncertain;
  for (uint32_t p = 0; p < gr.num_elements(); ++p) {
    if (gr.at(p).type != element::kind::bytes) continue;
    ++out->stats_.num_positions;
    if (alias[p] != none) continue;
    accepted.clear();
    uncertain.clear();
    walk_position(w, v.trie(), p, accepted, uncertain);
    if (w.exhausted()) return nullptr;
    out->stats_.num_uncertain += uncertain.size();
    out->table_of_[p] = static_cast<uint32_t>(out->tables_.size());
    out->tables_.push_back(make_table(std::move(accepted), std::move(uncertain), v));
  }
  for (uint32_t p = 0; p < gr.num_elements(); ++p)
    if (alias[p] != none && gr.at(p).type == element::kind::bytes) out->table_of_[p] = out->table_of_[alias[p]];
  out->stats_.num_tables = static_cast<uint32_t>(out->tables_.size());
  out->stats_.num_states = w.num_states();
  out->stats_.work = w.work_done();
  out->stats_.largest_closure = w.largest_closure();
  out->stats_.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::shared_ptr<const combined_table> compiled_grammar::combined(const std::vector<uint32_t>& indices) const {
  {
    std::lock_guard<std::mutex> lock(combined_mu_);
    if (auto it = combined_.find(indices); it != combined_.end()) return it->second;
  }
  auto c = std::make_shared<combined_table>();
  c->accepted_bits.assign(vocab_->mask_words(), 0);
  uint32_t* dst = c->accepted_bits.data();
  const size_t n = c->accepted_bits.size();
  for (uint32_t t : indices) {
    const token_table& tab = tables_[t];
    if (!tab.accepted_bits.empty()) {
      const uint32_t* src = tab.accepted_bits.data();
      for (size_t i = 0; i < n; ++i) dst[i] |= src[i];
    } else {
      for (int32_t id : tab.accepted_ids) dst[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    }
  }
  for (size_t i = 0; i < n; ++i) c->num_accepted += std::popcount(dst[i]);
  for (uint32_t t : indices)
    for (int32_t id : tables_[t].uncertain_ids)
      if (!(dst[static_cast<size_t>(id) >> 5] >> (id & 31) & 1)) c->uncertain.emplace_back(id, t);
  std::sort(c->uncertain.begin(), c->uncertain.end());
  std::lock_guard<std::mutex> lock(combined_mu_);
  // NOTE: bounded: a grammar whose states keep producing new sets of tops stops caching them.
  if (combined_.size() < max_combined_tables) combined_.emplace(indices, c);
  return c;
}

}  // namespace actorserve::grammar
