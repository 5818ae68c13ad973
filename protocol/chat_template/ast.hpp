#pragma once
/// The parsed template: an immutable tree of statements and expressions. Built once by the parser,
/// then only read, so any number of threads may render one tree at the same time.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "protocol/chat_template/value.hpp"

namespace actorserve::protocol::jinja {

enum class expr_kind {
  literal,      ///< constant
  name,         ///< variable `name`
  list,         ///< [items...] (tuples are lists too)
  dict,         ///< {items[0]: items[1], ...}
  attribute,    ///< a.name
  subscript,    ///< a[b]
  slice,        ///< a[b:c:d], each of b, c, d optional
  call,         ///< a(args)
  filter,       ///< a | name(args); a is null inside {% filter %} / {% set x | f %}
  test,         ///< a is [not] name(args)
  unary,        ///< op a
  binary,       ///< a op b
  compare,      ///< a op0 chain[0] op1 chain[1] ...
  conditional,  ///< b if a else c (c may be null: undefined)
};

enum class op_kind { none, add, sub, mul, div, floordiv, mod, pow, concat, and_, or_, not_, neg, pos, eq, ne, lt, le, gt, ge, in, not_in };

struct expr;
using expr_ptr = std::unique_ptr<const expr>;

/// One call argument; `name` is empty for a positional one.
struct call_arg {
  std::string name;
  expr_ptr value;
};

struct expr {
  expr_kind kind = expr_kind::literal;
  int line = 0;
  op_kind op = op_kind::none;
  bool negated = false;               ///< test: `is not`
  value constant;                     ///< literal
  std::string name;                   ///< name, attribute, filter or test name
  expr_ptr a, b, c, d;                ///< operands (see expr_kind)
  std::vector<expr_ptr> items;        ///< list items; dict keys and values alternating
  std::vector<call_arg> args;         ///< call, filter and test arguments
  std::vector<std::pair<op_kind, expr_ptr>> chain;  ///< compare: the operators and right operands
};

enum class stmt_kind { text, output, if_, for_, set, set_block, macro, break_, continue_, filter_block, block };

struct stmt;
using stmt_ptr = std::unique_ptr<const stmt>;
using stmt_list = std::vector<stmt_ptr>;

struct stmt {
  stmt_kind kind = stmt_kind::text;
  int line = 0;
  std::string text;                                   ///< text: the literal output
  expr_ptr value;                                     ///< output, set, for (iterable)
  expr_ptr cond;                                      ///< for: `if` filter; filter_block/set_block: filter chain
  std::vector<std::pair<expr_ptr, stmt_list>> branches;  ///< if / elif conditions and bodies
  stmt_list body;                                     ///< for, set_block, macro, filter_block, block
  stmt_list else_body;                                ///< if / for else
  std::vector<std::string> targets;                   ///< for / set target names (set ns.attr: {ns})
  std::string attr;                                   ///< set ns.attr: attr
  std::string name;                                   ///< macro name
  std::vector<std::pair<std::string, expr_ptr>> params;  ///< macro parameters and defaults (may be null)
};

/// A parsed template: its top-level statements.
struct template_ast {
  stmt_list body;
};

}  // namespace actorserve::protocol::jinja
