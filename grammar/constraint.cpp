#include "grammar/constraint.hpp"

#include <fmt/format.h>

#include "grammar/json_rules.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/matcher.hpp"
#include "grammar/regex.hpp"

namespace actorserve::grammar {
namespace {

/// Most alternatives of a guided_choice.
constexpr size_t max_choices = 4096;

result<expr> parameters_expr(json_rules& j, const tool_schema& t, size_t index, const std::string& field) {
  if (t.parameters_json.empty()) return lit("{}");
  return json_schema_expr(j, t.parameters_json, fmt::format("{}[{}].function.parameters", field, index));
}

result<expr> spec_expr(const constraint_spec& spec, json_rules& j) {
  switch (spec.type) {
    case constraint_spec::kind::json_object: return ref(j.object());
    case constraint_spec::kind::json_schema: return json_schema_expr(j, spec.text, spec.field);
    case constraint_spec::kind::regex: return regex_expr(spec.text, regex_target::raw, regex_match::whole, spec.field);
    case constraint_spec::kind::choice: {
      if (spec.choices.empty())
        return make_error(error_code::invalid_argument, fmt::format("{}: expected at least one choice", spec.field));
      if (spec.choices.size() > max_choices)
        return make_error(error_code::unsupported,
                          fmt::format("{}: more than {} choices are not supported", spec.field, max_choices));
      std::vector<expr> alts;
      for (const auto& c : spec.choices) alts.push_back(c.empty() ? empty() : lit(c));
      return alt(std::move(alts));
    }
    case constraint_spec::kind::tool_arguments: {
      if (spec.tools.empty())
        return make_error(error_code::invalid_argument, fmt::format("{}: names no function", spec.field));
      return parameters_expr(j, spec.tools[0], 0, spec.field);
    }
    case constraint_spec::kind::tool_calls: {
      if (spec.tools.empty())
        return make_error(error_code::invalid_argument, fmt::format("{}: tool_choice required needs tools", spec.field));
      std::vector<expr> calls;
      for (size_t i = 0; i < spec.tools.size(); ++i) {
        auto params = parameters_expr(j, spec.tools[i], i, spec.field);
        if (!params) return params.err();
        calls.push_back(seq({byte('{'), lit(json_rules::quote("name")), json_rules::colon(),
                             lit(json_rules::quote(spec.tools[i].name)), json_rules::comma(),
                             lit(json_rules::quote("parameters")), json_rules::colon(), std::move(*params), byte('}')}));
      }
      const rule_id call = j.builder().add("tool_call", alt(std::move(calls)));
      const expr more = spec.parallel_tool_calls ? star(seq({json_rules::comma(), ref(call)})) : empty();
      return seq({byte('['), ref(call), more, byte(']')});
    }
  }
  return never();
}

/// The cache key: everything that shapes the grammar.
std::string key_of(const constraint_spec& s) {
  std::string k = fmt::format("{}|{}|{}|", static_cast<int>(s.type), s.parallel_tool_calls, s.text.size());
  k += s.text;
  for (const auto& c : s.choices) k += fmt::format("|c{}:{}", c.size(), c);
  for (const auto& t : s.tools)
    k += fmt::format("|t{}:{}{}:{}", t.name.size(), t.name, t.parameters_json.size(), t.parameters_json);
  return k;
}

}  // namespace

result<grammar> constraint_grammar(const constraint_spec& spec) {
  grammar_builder b;
  json_rules j(b);
  auto e = spec_expr(spec, j);
  if (!e) return e.err();
  const rule_id root = b.add("root", *e);
  auto g = b.build(root);
  if (!g) return make_error(g.err().code, fmt::format("{}: {}", spec.field, g.err().message));
  return g;
}

std::string grammar_compiler::too_complex_message() {
  return "the output constraint is too complex to compile: preparing its token masks takes more work than a "
         "constraint of its size may (nested or adjacent repetitions whose readings overlap, such as ((a*|a)*|a)* "
         "or [a-z]{1,8}[a-z0-9]{1,8}..., do this); simplify the regex or schema";
}

grammar_compiler::grammar_compiler(std::shared_ptr<const vocabulary> vocab, size_t cache_entries)
    : vocab_(std::move(vocab)), capacity_(std::max<size_t>(cache_entries, 1)) {}

result<std::shared_ptr<const compiled_grammar>> grammar_compiler::compile(const constraint_spec& spec) {
  const std::string key = key_of(spec);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = by_key_.find(key); it != by_key_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // NOTE: compiled outside the lock: two requests with a new spec may both compile it.
  auto g = constraint_grammar(spec);
  if (!g) return g.err();
  auto compiled = compiled_grammar::compile_within(std::move(*g), vocab_, compile_work);
  // NOTE: a refusal is not cached: it costs at most the budget again, and caching refusals
  // would let distinct hostile specs push legitimate grammars out of the cache.
  if (!compiled)
    return make_error(error_code::invalid_argument, fmt::format("{}: {}", spec.field, too_complex_message()));
  // A grammar whose start alone overflows the matcher could generate nothing.
  if (matcher(compiled).overflowed())
    return make_error(error_code::invalid_argument, fmt::format("{}: {}", spec.field, matcher::overflow_message()));
  std::lock_guard<std::mutex> lock(mu_);
  if (by_key_.count(key) == 0) {
    lru_.emplace_front(key, compiled);
    by_key_[key] = lru_.begin();
    if (lru_.size() > capacity_) {
      by_key_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  return compiled;
}

}  // namespace actorserve::grammar
