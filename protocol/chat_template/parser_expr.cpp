#include <cerrno>
#include <cstdlib>

#include "protocol/chat_template/parser.hpp"
#include "protocol/chat_template/template_error.hpp"

namespace actorserve::protocol::jinja {
namespace {

/// Nesting budget for parsing: bounds the AST depth, hence the renderer's recursion.
constexpr int max_nesting = 256;

std::string describe(const token& t) {
  switch (t.kind) {
    case token_kind::eof: return "end of template";
    case token_kind::data: return "template data";
    case token_kind::var_begin: return "'{{'";
    case token_kind::var_end: return "'}}'";
    case token_kind::block_begin: return "'{%'";
    case token_kind::block_end: return "'%}'";
    case token_kind::string: return "string literal";
    default: return "'" + t.text + "'";
  }
}

}  // namespace

parser::depth_guard::depth_guard(parser& p) : p_(p) {
  if (++p_.depth_ > max_nesting) fail(p_.cur().line, "template nested too deeply");
}

void parser::chain_guard::step() {
  ++steps_;
  if (++p_.depth_ > max_nesting) fail(p_.cur().line, "template nested too deeply");
}

const token& parser::peek(std::size_t ahead) const {
  const std::size_t i = pos_ + ahead;
  return i < tokens_.size() ? tokens_[i] : tokens_.back();
}

token parser::next() {
  token t = tokens_[pos_];
  if (pos_ + 1 < tokens_.size()) ++pos_;
  return t;
}

bool parser::skip_op(std::string_view op) {
  if (!is_op(op)) return false;
  next();
  return true;
}

bool parser::skip_name(std::string_view name) {
  if (!is_name(name)) return false;
  next();
  return true;
}

void parser::expect_op(std::string_view op) {
  if (!skip_op(op)) unexpected("'" + std::string(op) + "'");
}

std::string parser::expect_name() {
  if (cur().kind != token_kind::name) unexpected("a name");
  return next().text;
}

void parser::expect_block_end() {
  if (cur().kind != token_kind::block_end) unexpected("end of block tag '%}'");
  next();
}

void parser::unexpected(std::string_view expected) const {
  fail(cur().line, "unexpected " + describe(cur()) + ", expected " + std::string(expected));
}

std::unique_ptr<expr> parser::make(expr_kind kind, int line) {
  auto e = std::make_unique<expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

expr_ptr parser::parse_tuple() {
  const int line = cur().line;
  expr_ptr first = parse_expression();
  if (!is_op(",")) return first;
  auto list = std::make_unique<expr>();
  list->kind = expr_kind::list;
  list->line = line;
  list->items.push_back(std::move(first));
  while (skip_op(",")) {
    if (cur().kind == token_kind::var_end || cur().kind == token_kind::block_end) break;
    list->items.push_back(parse_expression());
  }
  return list;
}

expr_ptr parser::parse_expression(bool with_condexpr) {
  depth_guard guard(*this);
  expr_ptr node = parse_or();
  if (!with_condexpr) return node;
  chain_guard chain(*this);
  while (is_name("if")) {
    chain.step();
    const int line = next().line;
    auto cond = std::make_unique<expr>();
    cond->kind = expr_kind::conditional;
    cond->line = line;
    cond->a = parse_or();
    cond->b = std::move(node);
    if (skip_name("else")) cond->c = parse_expression();
    node = std::move(cond);
  }
  return node;
}

namespace {

expr_ptr binary(op_kind op, int line, expr_ptr a, expr_ptr b) {
  auto e = std::make_unique<expr>();
  e->kind = expr_kind::binary;
  e->line = line;
  e->op = op;
  e->a = std::move(a);
  e->b = std::move(b);
  return e;
}

}  // namespace

template <class Operand>
expr_ptr parser::parse_binary(std::initializer_list<binary_op> ops, Operand operand) {
  const auto op_here = [&] {
    for (const binary_op& o : ops)
      if (cur().kind == o.kind && cur().text == o.text) return o.op;
    return op_kind::none;
  };
  expr_ptr left = operand();
  chain_guard chain(*this);
  for (op_kind op = op_here(); op != op_kind::none; op = op_here()) {
    chain.step();
    const int line = next().line;
    left = binary(op, line, std::move(left), operand());
  }
  return left;
}

expr_ptr parser::parse_or() {
  return parse_binary({{token_kind::name, "or", op_kind::or_}}, [this] { return parse_and(); });
}

expr_ptr parser::parse_and() {
  return parse_binary({{token_kind::name, "and", op_kind::and_}}, [this] { return parse_not(); });
}

expr_ptr parser::parse_not() {
  if (is_name("not")) {
    depth_guard guard(*this);
    auto e = std::make_unique<expr>();
    e->kind = expr_kind::unary;
    e->line = next().line;
    e->op = op_kind::not_;
    e->a = parse_not();
    return e;
  }
  return parse_compare();
}

expr_ptr parser::parse_compare() {
  const int line = cur().line;
  expr_ptr left = parse_math1();
  std::vector<std::pair<op_kind, expr_ptr>> chain;
  while (true) {
    op_kind op = op_kind::none;
    if (cur().kind == token_kind::op) {
      const std::string& t = cur().text;
      if (t == "==") op = op_kind::eq;
      else if (t == "!=") op = op_kind::ne;
      else if (t == "<") op = op_kind::lt;
      else if (t == "<=") op = op_kind::le;
      else if (t == ">") op = op_kind::gt;
      else if (t == ">=") op = op_kind::ge;
      if (op != op_kind::none) next();
    } else if (is_name("in")) {
      next();
      op = op_kind::in;
    } else if (is_name("not") && peek().kind == token_kind::name && peek().text == "in") {
      next();
      next();
      op = op_kind::not_in;
    }
    if (op == op_kind::none) break;
    chain.emplace_back(op, parse_math1());
  }
  if (chain.empty()) return left;
  auto e = std::make_unique<expr>();
  e->kind = expr_kind::compare;
  e->line = line;
  e->a = std::move(left);
  e->chain = std::move(chain);
  return e;
}

expr_ptr parser::parse_math1() {
  return parse_binary({{token_kind::op, "+", op_kind::add}, {token_kind::op, "-", op_kind::sub}},
                      [this] { return parse_concat(); });
}

expr_ptr parser::parse_concat() {
  return parse_binary({{token_kind::op, "~", op_kind::concat}}, [this] { return parse_math2(); });
}

expr_ptr parser::parse_math2() {
  return parse_binary({{token_kind::op, "*", op_kind::mul},
                       {token_kind::op, "/", op_kind::div},
                       {token_kind::op, "//", op_kind::floordiv},
                       {token_kind::op, "%", op_kind::mod}},
                      [this] { return parse_pow(); });
}

expr_ptr parser::parse_pow() {
  return parse_binary({{token_kind::op, "**", op_kind::pow}}, [this] { return parse_unary(true); });
}

expr_ptr parser::parse_unary(bool with_filter) {
  depth_guard guard(*this);
  expr_ptr node;
  if (is_op("-") || is_op("+")) {
    const token t = next();
    auto u = make(expr_kind::unary, t.line);
    u->op = t.text == "-" ? op_kind::neg : op_kind::pos;
    u->a = parse_unary(false);
    node = std::move(u);
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

expr_ptr parser::parse_primary() {
  depth_guard guard(*this);
  const token& t = cur();
  auto e = std::make_unique<expr>();
  e->line = t.line;
  switch (t.kind) {
    case token_kind::name: {
      const std::string& n = t.text;  // tokens_ is never modified: the reference stays valid
      next();
      if (n == "true" || n == "True" || n == "false" || n == "False") {
        e->constant = value(n == "true" || n == "True");
      } else if (n == "none" || n == "None") {
        e->constant = value::none();
      } else {
        e->kind = expr_kind::name;
        e->name = n;
      }
      return e;
    }
    case token_kind::string: {
      std::string s = next().text;
      while (cur().kind == token_kind::string) s += next().text;
      e->constant = value(std::move(s));
      return e;
    }
    case token_kind::integer: {
      const std::string text = next().text;
      errno = 0;
      const long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(e->line, "integer literal out of range: " + text);
      e->constant = value(static_cast<std::int64_t>(v));
      return e;
    }
    case token_kind::floating:
      e->constant = value(std::strtod(next().text.c_str(), nullptr));
      return e;
    case token_kind::op:
      if (skip_op("(")) {
        if (skip_op(")")) {
          e->kind = expr_kind::list;
          return e;
        }
        expr_ptr inner = parse_expression();
        if (!is_op(",")) {
          expect_op(")");
          return inner;
        }
        e->kind = expr_kind::list;
        e->items.push_back(std::move(inner));
        while (skip_op(",")) {
          if (is_op(")")) break;
          e->items.push_back(parse_expression());
        }
        expect_op(")");
        return e;
      }
      if (skip_op("[")) {
        e->kind = expr_kind::list;
        comma_items("]", [&] { e->items.push_back(parse_expression()); });
        return e;
      }
      if (skip_op("{")) {
        e->kind = expr_kind::dict;
        comma_items("}", [&] {
          e->items.push_back(parse_expression());
          expect_op(":");
          e->items.push_back(parse_expression());
        });
        return e;
      }
      break;
    default: break;
  }
  unexpected("an expression");
}

expr_ptr parser::parse_postfix(expr_ptr node) {
  chain_guard chain(*this);
  while (true) {
    chain.step();
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

expr_ptr parser::parse_filter_expr(expr_ptr node) {
  chain_guard chain(*this);
  while (true) {
    chain.step();
    if (is_op("|")) {
      node = parse_filter(std::move(node));
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

expr_ptr parser::parse_call(expr_ptr callee) {
  auto call = make(expr_kind::call, cur().line);
  call->a = std::move(callee);
  call->args = parse_call_args();
  return call;
}

expr_ptr parser::parse_filter(expr_ptr node) {
  const int line = cur().line;
  expect_op("|");
  auto f = std::make_unique<expr>();
  f->kind = expr_kind::filter;
  f->line = line;
  f->name = expect_name();
  while (skip_op(".")) f->name += "." + expect_name();
  if (is_op("(")) f->args = parse_call_args();
  f->a = std::move(node);
  return f;
}

expr_ptr parser::parse_test(expr_ptr node) {
  const int line = next().line;  // 'is'
  auto t = std::make_unique<expr>();
  t->kind = expr_kind::test;
  t->line = line;
  t->negated = skip_name("not");
  t->name = expect_name();
  while (skip_op(".")) t->name += "." + expect_name();
  if (is_op("(")) {
    t->args = parse_call_args();
  } else {
    const token& c = cur();
    const bool arg_start = c.kind == token_kind::name || c.kind == token_kind::string || c.kind == token_kind::integer ||
                           c.kind == token_kind::floating || is_op("[") || is_op("{");
    if (arg_start && !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if")) {
      if (is_name("is")) fail(c.line, "you cannot chain multiple tests with 'is'");
      t->args.push_back(call_arg{{}, parse_postfix(parse_primary())});
    }
  }
  t->a = std::move(node);
  return t;
}

expr_ptr parser::parse_subscript(expr_ptr node) {
  const token t = next();
  if (t.text == ".") {
    if (cur().kind == token_kind::integer) {
      auto s = make(expr_kind::subscript, t.line);
      auto* e = s.get();
      e->a = std::move(node);
      e->b = parse_primary();
      return s;
    }
    auto s = make(expr_kind::attribute, t.line);
    auto* e = s.get();
    e->a = std::move(node);
    e->name = expect_name();
    return s;
  }
  // '[': index or slice
  expr_ptr parts[3];
  int part = 0;
  bool is_slice = false;
  while (!is_op("]")) {
    if (skip_op(":")) {
      is_slice = true;
      if (++part > 2) unexpected("']'");
      continue;
    }
    if (parts[part]) unexpected("':' or ']'");
    parts[part] = parse_expression();
  }
  expect_op("]");
  auto s = make(is_slice ? expr_kind::slice : expr_kind::subscript, t.line);
  auto* e = s.get();
  e->a = std::move(node);
  if (!is_slice && !parts[0]) fail(t.line, "empty subscript");
  e->b = std::move(parts[0]);
  e->c = std::move(parts[1]);
  e->d = std::move(parts[2]);
  return s;
}

std::vector<call_arg> parser::parse_call_args() {
  expect_op("(");
  std::vector<call_arg> args;
  while (!is_op(")")) {
    if (!args.empty()) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (is_op("*") || is_op("**")) fail(cur().line, "unsupported syntax: *args/**kwargs in a call", error_code::unsupported);
    call_arg arg;
    if (cur().kind == token_kind::name && peek().kind == token_kind::op && peek().text == "=") {
      arg.name = next().text;
      next();
    } else if (!args.empty() && !args.back().name.empty()) {
      fail(cur().line, "positional argument follows keyword argument");
    }
    arg.value = parse_expression();
    args.push_back(std::move(arg));
  }
  expect_op(")");
  return args;
}

}  // namespace actorserve::protocol::jinja
