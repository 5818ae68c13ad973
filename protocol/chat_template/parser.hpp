#pragma once
/// Tokens -> AST. Jinja2's grammar and operator precedence (parser.py) for the subset chat
/// templates use; anything else fails with the construct's name and line.
#include <initializer_list>
#include <memory>
#include <string_view>
#include <vector>

#include "protocol/chat_template/ast.hpp"
#include "protocol/chat_template/lexer.hpp"

namespace actorserve::protocol::jinja {

/// Parses a whole template; throws template_error (syntax: invalid_argument, unsupported tags:
/// unsupported) with the line.
std::shared_ptr<const template_ast> parse_template(std::string_view source);

class parser {
 public:
  explicit parser(std::vector<token> tokens) : tokens_(std::move(tokens)) {}
  stmt_list parse_all();

 private:
  // statements (parser.cpp)
  stmt_list parse_until(const std::vector<std::string_view>& ends, std::string& which, int open_line,
                        std::string_view opener);
  stmt_ptr parse_statement();
  stmt_ptr parse_if(int line);
  stmt_ptr parse_for(int line);
  stmt_ptr parse_set(int line);
  stmt_ptr parse_macro(int line);
  stmt_ptr parse_filter_block(int line);
  std::vector<std::string> parse_target_names();
  expr_ptr parse_filter_chain();

  // expressions (parser_expr.cpp)
  expr_ptr parse_tuple();
  expr_ptr parse_expression(bool with_condexpr = true);
  expr_ptr parse_or();
  expr_ptr parse_and();
  expr_ptr parse_not();
  expr_ptr parse_compare();
  expr_ptr parse_math1();
  expr_ptr parse_concat();
  expr_ptr parse_math2();
  expr_ptr parse_pow();
  /// An operator of one binary level: a name token ("or") or an operator token ("+").
  struct binary_op {
    token_kind kind;
    std::string_view text;
    op_kind op;
  };
  /// One left-associative level, `operand (op operand)*` for the operators in `ops`.
  template <class Operand>
  expr_ptr parse_binary(std::initializer_list<binary_op> ops, Operand operand);
  expr_ptr parse_unary(bool with_filter);
  expr_ptr parse_primary();
  expr_ptr parse_postfix(expr_ptr node);
  expr_ptr parse_filter_expr(expr_ptr node);
  expr_ptr parse_filter(expr_ptr node);
  /// `callee(args...)`, the current token its "(".
  expr_ptr parse_call(expr_ptr callee);
  expr_ptr parse_test(expr_ptr node);
  expr_ptr parse_subscript(expr_ptr node);
  std::vector<call_arg> parse_call_args();

  // token stream
  const token& cur() const { return tokens_[pos_]; }
  const token& peek(std::size_t ahead = 1) const;
  token next();
  bool is_op(std::string_view op) const { return cur().kind == token_kind::op && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().kind == token_kind::name && cur().text == name; }
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view name);
  void expect_op(std::string_view op);
  /// Items separated by commas up to and including `close` (a trailing comma allowed), each
  /// read by `item`: the bodies of list and dict literals.
  template <class Item>
  void comma_items(std::string_view close, Item&& item) {
    for (bool first = true; !is_op(close); first = false) {
      if (!first) expect_op(",");
      if (is_op(close)) break;
      item();
    }
    expect_op(close);
  }
  std::string expect_name();
  void expect_block_end();
  [[noreturn]] void unexpected(std::string_view expected) const;
  static std::unique_ptr<expr> make(expr_kind kind, int line);

  /// Guards recursion: deep nesting fails cleanly instead of overflowing the stack.
  struct depth_guard {
    explicit depth_guard(parser& p);
    ~depth_guard() { --p_.depth_; }
    parser& p_;
  };

  /// Guards a loop that wraps the node it built so far (a.b.c, x|f|g, a + b + c): each step
  /// nests the tree one level deeper, so it counts against the same depth budget.
  struct chain_guard {
    explicit chain_guard(parser& p) : p_(p) {}
    ~chain_guard() { p_.depth_ -= steps_; }
    void step();
    parser& p_;
    int steps_ = 0;
  };

  std::vector<token> tokens_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace actorserve::protocol::jinja
