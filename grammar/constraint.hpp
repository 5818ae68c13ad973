#pragma once
/// What a request constrains its output to, and the compiler that turns it into a grammar
/// prepared for one vocabulary (cached, since clients repeat their schemas).
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/error.hpp"
#include "grammar/compiled_grammar.hpp"
#include "grammar/grammar.hpp"
#include "grammar/matcher.hpp"

namespace actorserve::grammar {

/// One function a tool call may name.
struct tool_schema {
  std::string name;
  std::string parameters_json;  ///< its parameters' JSON schema; empty: no parameters ({})
};

struct constraint_spec {
  enum class kind {
    json_object,  ///< any JSON object (response_format json_object)
    json_schema,  ///< `text` is a JSON schema
    regex,        ///< `text` is a regex the whole output matches
    choice,       ///< the output is one of `choices`
    tool_calls,   ///< a JSON array of {"name": ..., "parameters": ...} over `tools` (tool_choice required)
    tool_arguments,  ///< the arguments object of `tools[0]` (tool_choice naming a function)
  };
  kind type = kind::json_object;
  std::string text;
  std::vector<std::string> choices;
  std::vector<tool_schema> tools;
  bool parallel_tool_calls = true;  ///< tool_calls: false allows exactly one call
  /// The request field errors name ("response_format.json_schema.schema", "guided_regex", ...).
  std::string field;
};

/// The grammar of a spec (no vocabulary needed).
result<grammar> constraint_grammar(const constraint_spec& spec);

/// Compiles specs for one vocabulary; thread-safe. Keeps the last `cache_entries` compiled
/// grammars by spec.
class grammar_compiler {
 public:
  /// What one compile may do (compiled_grammar::compile_within). Work: this floor plus this
  /// much per position whose token table is computed; the floor holds three times the work of
  /// the benchmark's user-record schema (email and date-time formats: 41M units, ~0.5 s) at a
  /// 128k vocabulary, the per-position part large choices and enums (a 6,000-value enum: 12M)
  /// many times over. A closure: four times the matcher's bound (the tables' stacks end in
  /// stand-ins for every place a rule returns to, so their closures run larger than the
  /// matcher's), so that a grammar whose readings multiply (((t*|t)*|t)* nested 250 deep) is
  /// refused at its first such closure, in milliseconds, and one whose work does (a pattern of
  /// a thousand [a-z0-9]{1,8}: 3.2G units, a minute) at the floor, instead of holding the thread.
  static constexpr compiled_grammar::work_budget compile_work{128'000'000, 16384, 4 * matcher::closure_items_floor,
                                                              4 * matcher::closure_items_per_element};
  /// What a request is told when its constraint passes the budget.
  static std::string too_complex_message();

  explicit grammar_compiler(std::shared_ptr<const vocabulary> vocab, size_t cache_entries = 64);

  result<std::shared_ptr<const compiled_grammar>> compile(const constraint_spec& spec);
  const std::shared_ptr<const vocabulary>& vocab() const { return vocab_; }

 private:
  using entry = std::pair<std::string, std::shared_ptr<const compiled_grammar>>;
  std::shared_ptr<const vocabulary> vocab_;
  size_t capacity_;
  std::mutex mu_;
  std::list<entry> lru_;  ///< most recent first
  std::unordered_map<std::string, std::list<entry>::iterator> by_key_;
};

}  // namespace actorserve::grammar
