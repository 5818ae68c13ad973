#pragma once
/// Walks the AST and produces the text. One renderer per render() call holds all mutable state
/// (scopes, namespaces, counters), so a template can be rendered from many threads at once.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/chat_template/ast.hpp"
#include "protocol/chat_template/value.hpp"

namespace actorserve::protocol::jinja {

/// Bounds that keep a hostile or buggy template from running away.
struct limits {
  std::size_t max_output_bytes = 0;  ///< also caps any single string value
  std::size_t max_items = 0;         ///< cap on any list built during rendering
  std::uint64_t max_steps = 0;       ///< expressions evaluated + loop iterations + calls
  int max_call_depth = 0;            ///< nested macro calls
  std::int64_t now = 0;              ///< strftime_now's time (unix seconds, shown as UTC)
};

/// One variable scope; loops open one per iteration, macros one per call.
struct frame : std::enable_shared_from_this<frame> {
  std::shared_ptr<frame> parent;
  value_map vars;
  const value* lookup(std::string_view name) const;
};
using frame_ptr = std::shared_ptr<frame>;

/// Evaluated call arguments: positional, then keyword.
struct call_args {
  std::vector<value> pos;
  std::vector<std::pair<std::string, value>> kw;
  /// The argument at position `index` or named `name`, or nullptr.
  const value* get(std::size_t index, std::string_view name) const;
};

class renderer;
using builtin_fn = value (*)(renderer&, const call_args&, int line);

/// A macro (closure over its defining scope) or a builtin global function.
struct callable {
  std::string name;
  const stmt* macro = nullptr;
  /// The scope the macro was defined in. Not owning (a frame holds its macros, so owning would be
  /// a cycle): the renderer keeps every such frame alive until the render ends.
  frame* closure = nullptr;
  builtin_fn fn = nullptr;
};

class renderer {
 public:
  explicit renderer(const limits& lim) : limits_(lim) {}

  /// Renders the template with `context` as its variables (globals are added beneath them).
  std::string render(const template_ast& ast, value_map context);

  value eval(const expr& e);
  /// Counts one unit of work; fails once the step budget is spent.
  void tick(int line);
  /// Fails when a string of `size` bytes would pass the output cap.
  void check_size(std::size_t size, int line) const;
  /// Fails when a list of `size` items would pass the item cap.
  void check_items(std::size_t size, int line) const;
  const limits& lim() const { return limits_; }

  /// Applies a filter / test by name (filters.cpp, predicates.cpp): used by map/select too.
  value apply_filter(const std::string& name, const value& operand, const call_args& args, int line);
  bool apply_test(const std::string& name, const value& operand, const call_args& args, int line);
  /// Calls a callable value.
  value call(const value& fn, const call_args& args, int line);
  /// Keeps a namespace() made by this render; when the render ends, every such namespace is
  /// emptied, which frees the ones a template made hold themselves (`set ns.x = ns`, a
  /// shared_ptr cycle that would otherwise leak).
  void adopt_namespace(std::shared_ptr<namespace_obj> ns) { namespaces_.push_back(std::move(ns)); }

 private:
  enum class flow { normal, break_, continue_ };
  flow render_body(const stmt_list& body, std::string& out);
  flow render_stmt(const stmt& s, std::string& out);
  flow render_for(const stmt& s, std::string& out);
  void render_set(const stmt& s, std::string& out);
  void append(std::string& out, std::string_view text, int line) const;
  void bind_targets(frame& f, const std::vector<std::string>& targets, const value& item, int line);
  value call_macro(const callable& m, const call_args& args, int line);

  value eval_call(const expr& e);
  value eval_filter_chain(const expr& f, const value* input);
  call_args eval_args(const std::vector<call_arg>& args);
  value lookup(const std::string& name) const;

  const limits& limits_;
  frame_ptr scope_;
  std::vector<frame_ptr> macro_scopes_;  ///< frames macros close over, kept for the whole render
  std::vector<std::shared_ptr<namespace_obj>> namespaces_;  ///< adopt_namespace(): emptied at the end
  std::uint64_t steps_ = 0;
  int call_depth_ = 0;
  int depth_ = 0;  ///< eval/render recursion depth, across macro calls

  /// Bounds recursion across macro calls so a deep template cannot overflow the stack.
  struct depth_guard {
    depth_guard(renderer& r, int line);
    ~depth_guard() { --r_.depth_; }
    renderer& r_;
  };
};

// Free helpers shared by the evaluator and the builtins.

/// Attribute access (a.name): dict key, namespace attribute or loop field; undefined otherwise.
value get_attr(const value& obj, const std::string& name, int line);
/// Subscript (a[key]) with Python indexing; undefined when missing.
value get_item(const value& obj, const value& key, int line);
/// Python slicing of a list or a string.
value get_slice(const value& obj, const value* start, const value* stop, const value* step, int line);
/// The items a for-loop visits: list items, dict keys, string characters; undefined: none.
std::shared_ptr<const value_list> iterate(const value& v, int line);
/// Python len().
std::int64_t length_of(const value& v, int line);
/// a op b for arithmetic, concatenation and membership.
value binary_op(renderer& r, op_kind op, const value& a, const value& b, int line);
/// Fails with "'x' is undefined" when `v` is undefined.
void require_defined(const value& v, int line);
/// A method call on a str, dict, list or loop (e.g. "x".strip(), d.items(), loop.cycle()); sets
/// `found` false when `obj` has no such method.
value call_method(renderer& r, const value& obj, const std::string& name, const call_args& args, int line, bool& found);
/// The global functions: range, namespace, dict, raise_exception, strftime_now.
void add_globals(value_map& globals);
/// Python json.dumps(v, ensure_ascii, indent, separators, sort_keys); indent < 0: none.
struct json_options {
  std::string indent;  ///< used only when has_indent
  bool has_indent = false;
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_sep;  ///< empty: Python's default for the indent mode
  std::string key_sep = ": ";
};
std::string to_json(const value& v, const json_options& opts, int line);

}  // namespace actorserve::protocol::jinja
