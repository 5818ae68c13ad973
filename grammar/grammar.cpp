#include "grammar/grammar.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

namespace actorserve::grammar {

std::string to_string(const byte_set& s) {
  auto printable = [](unsigned b) { return b >= 0x21 && b < 0x7F && b != '\'' && b != '\\' && b != ']' && b != '-' && b != '^'; };
  auto one = [&](unsigned b) { return printable(b) ? std::string(1, static_cast<char>(b)) : fmt::format("\\x{:02X}", b); };
  if (s.count() == 1) {
    for (unsigned b = 0; b < 256; ++b)
      if (s.test(static_cast<uint8_t>(b))) return "'" + one(b) + "'";
  }
  std::string out = "[";
  for (unsigned b = 0; b < 256;) {
    if (!s.test(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    unsigned e = b;
    while (e + 1 < 256 && s.test(static_cast<uint8_t>(e + 1))) ++e;
    out += one(b);
    if (e > b) out += (e > b + 1 ? "-" : "") + one(e);
    b = e + 1;
  }
  return out + "]";
}

std::string grammar::to_string() const {
  std::string out;
  for (rule_id r = 0; r < num_rules(); ++r) {
    out += names_[r] + " ::=";
    bool first_alt = true;
    for (uint32_t a : alternatives(r)) {
      out += first_alt ? " " : " | ";
      first_alt = false;
      if (elements_[a].type == element::kind::end) out += "\"\"";
      for (uint32_t p = a; elements_[p].type != element::kind::end; ++p) {
        if (p != a) out += " ";
        const element& e = elements_[p];
        out += e.type == element::kind::bytes ? actorserve::grammar::to_string(sets_[e.value]) : names_[e.value];
      }
    }
    out += "\n";
  }
  return out;
}

expr empty() { return expr{}; }

expr never() {
  expr e;
  e.type = expr::kind::alt;
  return e;
}

expr bytes(const byte_set& s) {
  expr e;
  e.type = expr::kind::bytes;
  e.set = s;
  return e;
}

expr byte(uint8_t b) { return bytes(byte_set::of(b)); }

expr lit(std::string_view text) {
  if (text.size() == 1) return byte(static_cast<uint8_t>(text[0]));
  expr e;
  e.type = expr::kind::seq;
  for (char c : text) e.items.push_back(byte(static_cast<uint8_t>(c)));
  return e;
}

expr ref(rule_id r) {
  expr e;
  e.type = expr::kind::ref;
  e.rule = r;
  return e;
}

expr seq(std::vector<expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  expr e;
  e.type = expr::kind::seq;
  e.items = std::move(items);
  return e;
}

expr alt(std::vector<expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  // A choice among choices is one choice (nothing-matching items drop out).
  expr e;
  e.type = expr::kind::alt;
  for (expr& item : items) {
    if (item.type == expr::kind::alt) {
      for (expr& inner : item.items) e.items.push_back(std::move(inner));
    } else {
      e.items.push_back(std::move(item));
    }
  }
  if (e.items.size() == 1) return std::move(e.items[0]);
  return e;
}

expr repeat(expr item, uint32_t min, uint32_t max) {
  expr e;
  e.type = expr::kind::repeat;
  e.items.push_back(std::move(item));
  e.min = min;
  e.max = max;
  return e;
}

expr star(expr item) { return repeat(std::move(item), 0, expr::unbounded); }
expr plus(expr item) { return repeat(std::move(item), 1, expr::unbounded); }
expr opt(expr item) { return repeat(std::move(item), 0, 1); }

rule_id grammar_builder::declare(std::string name) {
  if (rules_.size() >= max_rules) too_many_ = true;
  rules_.emplace_back();
  names_.push_back(std::move(name));
  return static_cast<rule_id>(rules_.size() - 1);
}

void grammar_builder::define(rule_id r, const expr& body) {
  const std::string name = names_[r];  // NOTE: a copy: lowering declares rules (names_ grows)
  auto alts = lower_alternatives(body, name);
  rules_[r].alts = std::move(alts);
  rules_[r].defined = true;
}

rule_id grammar_builder::add(std::string name, const expr& body) {
  const rule_id r = declare(std::move(name));
  define(r, body);
  return r;
}

uint32_t grammar_builder::set_index(const byte_set& s) {
  auto it = std::find(sets_.begin(), sets_.end(), s);
  if (it != sets_.end()) return static_cast<uint32_t>(it - sets_.begin());
  sets_.push_back(s);
  return static_cast<uint32_t>(sets_.size() - 1);
}

std::vector<std::vector<element>> grammar_builder::lower_alternatives(const expr& e, const std::string& name) {
  std::vector<std::vector<element>> alts;
  if (e.type == expr::kind::alt) {
    for (const expr& item : e.items) lower_into(item, alts.emplace_back(), name);
  } else {
    lower_into(e, alts.emplace_back(), name);
  }
  return alts;
}

void grammar_builder::lower_into(const expr& e, std::vector<element>& out, const std::string& name) {
  switch (e.type) {
    case expr::kind::empty: return;
    case expr::kind::bytes: out.push_back({element::kind::bytes, set_index(e.set)}); return;
    case expr::kind::ref: out.push_back({element::kind::rule, e.rule}); return;
    case expr::kind::seq:
      for (const expr& item : e.items) lower_into(item, out, name);
      return;
    case expr::kind::alt: {
      if (e.items.size() == 1) {
        lower_into(e.items[0], out, name);
        return;
      }
      const rule_id r = declare(name + "_alt");
      auto alts = lower_alternatives(e, name + "_alt");
      rules_[r].alts = std::move(alts);
      rules_[r].defined = true;
      out.push_back({element::kind::rule, r});
      return;
    }
    case expr::kind::repeat:
      if (e.max == 0) return;
      if (e.min == 1 && e.max == 1) {
        lower_into(e.items[0], out, name);
        return;
      }
      out.push_back({element::kind::rule, lower_repeat(e, name)});
      return;
  }
}

rule_id grammar_builder::repeat_rule(std::string name, const std::vector<std::vector<element>>& base,
                                     next_ref next, bool optional) {
  const rule_id r = declare(std::move(name));
  auto& body = rules_[r];
  for (const auto& a : base) {
    body.alts.push_back(a);
    if (next.kind == next_ref::self) body.alts.back().push_back({element::kind::rule, r});
    if (next.kind == next_ref::other) body.alts.back().push_back({element::kind::rule, next.rule});
  }
  if (optional) body.alts.emplace_back();
  body.defined = true;
  repeats_.push_back({r, next.kind != next_ref::none});
  return r;
}

rule_id grammar_builder::lower_repeat(const expr& e, const std::string& name) {
  const auto base = lower_alternatives(e.items[0], name + "_item");
  const uint32_t n = e.min;
  next_ref below{next_ref::none, 0};
  if (e.max == expr::unbounded) {
    // star := item star | ""   (the self reference is a tail call)
    below = {next_ref::other, repeat_rule(name + "_star", base, {next_ref::self, 0}, true)};
  } else if (e.max > n) {
    // upto_j := item upto_{j-1} | ""   (j items still allowed)
    chain optional_chain;
    for (uint32_t j = 1; j <= e.max - n && !too_many_; ++j) {
      below = {next_ref::other, repeat_rule(fmt::format("{}_upto{}", name, j), base, below, true)};
      optional_chain.levels.push_back(below.rule);
    }
    if (optional_chain.levels.size() > 1) chains_.push_back(std::move(optional_chain));
  }
  // need_j := item need_{j-1}   (j items still required)
  chain mandatory;
  for (uint32_t j = 1; j <= n && !too_many_; ++j) {
    below = {next_ref::other, repeat_rule(fmt::format("{}_need{}", name, j), base, below, false)};
    mandatory.levels.push_back(below.rule);
  }
  if (mandatory.levels.size() > 1) chains_.push_back(std::move(mandatory));
  return below.rule;
}

namespace {

/// Strongly connected components (Tarjan, iterative); returns the component of each node.
std::vector<uint32_t> components(const std::vector<std::vector<uint32_t>>& edges) {
  const uint32_t n = static_cast<uint32_t>(edges.size());
  constexpr uint32_t none = ~0u;
  std::vector<uint32_t> index(n, none), low(n, 0), comp(n, none), stack;
  std::vector<uint8_t> on_stack(n, 0);
  uint32_t next_index = 0, next_comp = 0;
  struct frame {
    uint32_t v;
    size_t edge;
  };
  std::vector<frame> calls;
  for (uint32_t s = 0; s < n; ++s) {
    if (index[s] != none) continue;
    calls.push_back({s, 0});
    index[s] = low[s] = next_index++;
    stack.push_back(s);
    on_stack[s] = 1;
    while (!calls.empty()) {
      frame& f = calls.back();
      if (f.edge < edges[f.v].size()) {
        const uint32_t w = edges[f.v][f.edge++];
        if (index[w] == none) {
          index[w] = low[w] = next_index++;
          stack.push_back(w);
          on_stack[w] = 1;
          calls.push_back({w, 0});
        } else if (on_stack[w]) {
          low[f.v] = std::min(low[f.v], index[w]);
        }
        continue;
      }
      const uint32_t v = f.v;
      calls.pop_back();
      if (!calls.empty()) low[calls.back().v] = std::min(low[calls.back().v], low[v]);
      if (low[v] == index[v]) {
        uint32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = 0;
          comp[w] = next_comp;
        } while (w != v);
        ++next_comp;
      }
    }
  }
  return comp;
}

}  // namespace

result<grammar> grammar_builder::build(rule_id root) {
  if (too_many_)
    return make_error(error_code::unsupported, fmt::format("grammar: more than {} rules (a repetition bound too large?)",
                                                           max_rules));
  for (size_t r = 0; r < rules_.size(); ++r)
    if (!rules_[r].defined)
      return make_error(error_code::internal, fmt::format("grammar: rule '{}' is declared but never defined", names_[r]));
  grammar g;
  g.root_ = root;
  g.sets_ = sets_;
  g.names_ = names_;
  g.chains_ = chains_;
  g.rule_first_alt_.clear();
  for (rule_id r = 0; r < rules_.size(); ++r) {
    g.rule_first_alt_.push_back(static_cast<uint32_t>(g.alt_begin_.size()));
    for (const auto& a : rules_[r].alts) {
      g.alt_begin_.push_back(static_cast<uint32_t>(g.elements_.size()));
      for (const element& e : a) {
        g.elements_.push_back(e);
        g.element_rule_.push_back(r);
      }
      g.elements_.push_back({element::kind::end, 0});
      g.element_rule_.push_back(r);
    }
  }
  g.rule_first_alt_.push_back(static_cast<uint32_t>(g.alt_begin_.size()));
  const uint32_t num_rules = g.num_rules();

  // Nullable rules: a fixed point.
  g.nullable_.assign(num_rules, 0);
  auto element_nullable = [&](const element& e) {
    return e.type == element::kind::end || (e.type == element::kind::rule && g.nullable_[e.value]);
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (rule_id r = 0; r < num_rules; ++r) {
      if (g.nullable_[r]) continue;
      for (uint32_t a : g.alternatives(r)) {
        uint32_t p = a;
        while (g.elements_[p].type != element::kind::end && element_nullable(g.elements_[p])) ++p;
        if (g.elements_[p].type == element::kind::end) {
          g.nullable_[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  for (const auto& rep : repeats_) {
    for (uint32_t a : g.alternatives(rep.rule)) {
      uint32_t last = a;
      while (g.elements_[last].type != element::kind::end) ++last;
      if (last == a) continue;  // the empty alternative
      const uint32_t item_end = rep.continued ? last - 1 : last;
      bool all_nullable = true;
      for (uint32_t p = a; p < item_end && all_nullable; ++p) all_nullable = element_nullable(g.elements_[p]);
      if (all_nullable)
        return make_error(error_code::invalid_argument,
                          fmt::format("grammar: the repetition '{}' repeats something that may be empty",
                                      names_[rep.rule]));
    }
  }

  // Left recursion: references reachable without reading a byte. A cycle through such
  // references grows the stack forever unless every reference on it is a tail call.
  std::vector<std::vector<uint32_t>> left(num_rules);
  struct left_edge {
    rule_id from, to;
    bool tail;
  };
  std::vector<left_edge> left_edges;
  for (rule_id r = 0; r < num_rules; ++r) {
    for (uint32_t a : g.alternatives(r)) {
      for (uint32_t p = a; g.elements_[p].type == element::kind::rule; ++p) {
        const rule_id to = g.elements_[p].value;
        left[r].push_back(to);
        left_edges.push_back({r, to, g.elements_[p + 1].type == element::kind::end});
        if (!g.nullable_[to]) break;
      }
    }
  }
  const auto comp = components(left);
  for (const auto& e : left_edges)
    if (!e.tail && comp[e.from] == comp[e.to])
      return make_error(error_code::invalid_argument,
                        fmt::format("grammar: rule '{}' is left-recursive (through '{}')", names_[e.from], names_[e.to]));
  return g;
}

}  // namespace actorserve::grammar
