#pragma once
/// Hugging Face chat templates: a Jinja interpreter for the subset chat templates use, in the
/// environment transformers renders them in (jinja2 sandbox, trim_blocks, lstrip_blocks,
/// loopcontrols, raise_exception, strftime_now, json.dumps-style tojson).
///
///   auto tpl = chat_template::parse(source);          // once per model
///   auto text = apply_chat_template(*tpl, messages, true, "<s>", "</s>");  // per request
///
/// Parse once, render many: a parsed template is immutable and may be rendered from any number of
/// threads at once. Rendering is bounded (steps, output size, list size, call depth).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.hpp"
#include "protocol/chat_template/chat_value.hpp"

namespace actorserve::protocol {

namespace jinja {
struct template_ast;
}

/// Bounds on one render; a template that passes one fails with error_code::too_large.
struct chat_template_limits {
  std::size_t max_output_bytes = 8u << 20;  ///< rendered text, and any one string built on the way
  std::size_t max_items = 1u << 20;         ///< any one list built on the way (range(), +, *)
  std::uint64_t max_steps = 5'000'000;      ///< expressions evaluated + loop iterations + calls
  int max_call_depth = 64;                  ///< nested macro calls
  /// strftime_now's time in unix seconds, formatted as UTC; unset: the current time.
  std::optional<std::int64_t> fixed_time;
};

class chat_template {
 public:
  /// Parses a template. Syntax errors: invalid_argument; tags this interpreter does not support
  /// (include, extends, call, ...): unsupported. Both name the line ("chat template line 3: ...").
  /// An unknown filter or test fails (unsupported, with its line) only when a render reaches it,
  /// as jinja2 does for one inside a branch.
  static result<chat_template> parse(std::string_view source);

  /// Renders with the members of `context` (an object) as the template's variables.
  /// A template's raise_exception(msg) fails with invalid_argument and exactly `msg` as message.
  result<std::string> render(const chat_value& context) const;
  result<std::string> render(const chat_value& context, const chat_template_limits& limits) const;

 private:
  explicit chat_template(std::shared_ptr<const jinja::template_ast> ast) : ast_(std::move(ast)) {}
  std::shared_ptr<const jinja::template_ast> ast_;
};

/// What transformers' apply_chat_template passes to a template.
struct chat_template_inputs {
  std::vector<chat_value> messages;  ///< {"role", "content" (string or list of parts), ...}
  bool add_generation_prompt = true;
  std::optional<std::string> bos_token;  ///< nullopt: undefined (a tokenizer without that token)
  std::optional<std::string> eos_token;
  chat_value tools;      ///< list of tool definitions, or null (passed as tools=None)
  chat_value documents;  ///< list of documents, or null
  chat_value extra;      ///< an object of further variables (e.g. enable_thinking), or null
  std::optional<std::int64_t> fixed_time;  ///< strftime_now's time (unix seconds); unset: now
};

/// Renders `inputs` the way transformers does (`tokenize=False`).
result<std::string> apply_chat_template(const chat_template& tpl, const chat_template_inputs& inputs);

/// Convenience: messages only; an empty bos/eos token is left undefined.
result<std::string> apply_chat_template(const chat_template& tpl, const std::vector<chat_value>& messages,
                                        bool add_generation_prompt, std::string_view bos_token,
                                        std::string_view eos_token);

}  // namespace actorserve::protocol
