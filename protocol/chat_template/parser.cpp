#include "protocol/chat_template/parser.hpp"

#include <algorithm>

#include "protocol/chat_template/template_error.hpp"

namespace actorserve::protocol::jinja {

std::shared_ptr<const template_ast> parse_template(std::string_view source) {
  parser p(tokenize(source));
  auto ast = std::make_shared<template_ast>();
  ast->body = p.parse_all();
  return ast;
}

stmt_list parser::parse_all() {
  std::string which;
  return parse_until({}, which, 0, {});
}

stmt_list parser::parse_until(const std::vector<std::string_view>& ends, std::string& which, int open_line,
                              std::string_view opener) {
  depth_guard guard(*this);
  stmt_list body;
  while (true) {
    const token& t = cur();
    if (t.kind == token_kind::eof) {
      if (ends.empty()) return body;
      fail(t.line, "unexpected end of template: '" + std::string(opener) + "' opened on line " + std::to_string(open_line) +
                       " was never closed (expected 'end" + std::string(opener) + "')");
    }
    if (t.kind == token_kind::data) {
      auto s = std::make_unique<stmt>();
      s->kind = stmt_kind::text;
      s->line = t.line;
      s->text = next().text;
      body.push_back(std::move(s));
    } else if (t.kind == token_kind::var_begin) {
      auto s = std::make_unique<stmt>();
      s->kind = stmt_kind::output;
      s->line = next().line;
      s->value = parse_tuple();
      if (cur().kind != token_kind::var_end) unexpected("end of print statement '}}'");
      next();
      body.push_back(std::move(s));
    } else if (t.kind == token_kind::block_begin) {
      const token& tag = peek();
      if (tag.kind == token_kind::name && std::find(ends.begin(), ends.end(), tag.text) != ends.end()) {
        next();
        which = next().text;
        return body;
      }
      next();
      body.push_back(parse_statement());
    } else {
      unexpected("template data or a tag");
    }
  }
}

stmt_ptr parser::parse_statement() {
  const token t = cur();
  if (t.kind != token_kind::name) unexpected("a tag name");
  const std::string& tag = t.text;
  if (tag == "if") {
    next();
    return parse_if(t.line);
  }
  if (tag == "for") {
    next();
    return parse_for(t.line);
  }
  if (tag == "set") {
    next();
    return parse_set(t.line);
  }
  if (tag == "macro") {
    next();
    return parse_macro(t.line);
  }
  if (tag == "filter") {
    next();
    return parse_filter_block(t.line);
  }
  if (tag == "break" || tag == "continue") {
    next();
    if (loop_depth_ == 0) fail(t.line, "'" + tag + "' outside of a loop");
    expect_block_end();
    auto s = std::make_unique<stmt>();
    s->kind = tag == "break" ? stmt_kind::break_ : stmt_kind::continue_;
    s->line = t.line;
    return s;
  }
  if (tag == "generation") {
    next();
    expect_block_end();
    auto s = std::make_unique<stmt>();
    s->kind = stmt_kind::block;
    s->line = t.line;
    std::string which;
    s->body = parse_until({"endgeneration"}, which, t.line, "generation");
    expect_block_end();
    return s;
  }
  static constexpr std::string_view closers[] = {"endif", "endfor", "endset", "endmacro", "endfilter", "elif", "else",
                                                 "endgeneration", "endraw"};
  if (std::find(std::begin(closers), std::end(closers), tag) != std::end(closers)) {
    fail(t.line, "unexpected '" + tag + "' (no matching opening tag)");
  }
  fail(t.line, "unsupported tag '" + tag + "'", error_code::unsupported);
}

stmt_ptr parser::parse_if(int line) {
  auto s = std::make_unique<stmt>();
  s->kind = stmt_kind::if_;
  s->line = line;
  expr_ptr cond = parse_expression(false);  // jinja2: no `a if b else c` here
  expect_block_end();
  while (true) {
    std::string which;
    stmt_list body = parse_until({"elif", "else", "endif"}, which, line, "if");
    s->branches.emplace_back(std::move(cond), std::move(body));
    if (which == "elif") {
      cond = parse_expression(false);
      expect_block_end();
      continue;
    }
    if (which == "else") {
      expect_block_end();
      s->else_body = parse_until({"endif"}, which, line, "if");
    }
    expect_block_end();
    return s;
  }
}

std::vector<std::string> parser::parse_target_names() {
  std::vector<std::string> names;
  const bool paren = skip_op("(");
  names.push_back(expect_name());
  while (skip_op(",")) {
    if (paren && is_op(")")) break;
    names.push_back(expect_name());
  }
  if (paren) expect_op(")");
  return names;
}

stmt_ptr parser::parse_for(int line) {
  auto s = std::make_unique<stmt>();
  s->kind = stmt_kind::for_;
  s->line = line;
  s->targets = parse_target_names();
  if (!skip_name("in")) unexpected("'in'");
  s->value = parse_expression(false);
  if (is_op(",")) fail(cur().line, "unsupported syntax: tuple as a for-loop iterable", error_code::unsupported);
  if (skip_name("if")) s->cond = parse_expression();
  if (is_name("recursive")) fail(cur().line, "unsupported syntax: recursive for-loop", error_code::unsupported);
  expect_block_end();
  ++loop_depth_;
  std::string which;
  s->body = parse_until({"endfor", "else"}, which, line, "for");
  --loop_depth_;
  if (which == "else") {
    expect_block_end();
    s->else_body = parse_until({"endfor"}, which, line, "for");
  }
  expect_block_end();
  return s;
}

stmt_ptr parser::parse_set(int line) {
  auto s = std::make_unique<stmt>();
  s->line = line;
  const std::string first = expect_name();
  s->targets.push_back(first);
  if (skip_op(".")) {
    s->attr = expect_name();
  } else {
    while (skip_op(",")) s->targets.push_back(expect_name());
  }
  if (skip_op("=")) {
    s->kind = stmt_kind::set;
    s->value = parse_tuple();
    expect_block_end();
    return s;
  }
  if (!s->attr.empty() || s->targets.size() > 1) unexpected("'='");
  s->kind = stmt_kind::set_block;
  if (is_op("|")) s->cond = parse_filter_chain();
  expect_block_end();
  std::string which;
  s->body = parse_until({"endset"}, which, line, "set");
  expect_block_end();
  return s;
}

expr_ptr parser::parse_filter_chain() {
  expr_ptr chain;
  while (is_op("|")) chain = parse_filter(std::move(chain));
  return chain;
}

stmt_ptr parser::parse_macro(int line) {
  auto s = std::make_unique<stmt>();
  s->kind = stmt_kind::macro;
  s->line = line;
  s->name = expect_name();
  expect_op("(");
  while (!is_op(")")) {
    if (!s->params.empty()) expect_op(",");
    if (is_op(")")) break;
    std::string param = expect_name();
    expr_ptr def;
    if (skip_op("=")) {
      def = parse_expression();
    } else if (!s->params.empty() && s->params.back().second) {
      fail(cur().line, "non-default argument follows default argument");
    }
    s->params.emplace_back(std::move(param), std::move(def));
  }
  expect_op(")");
  expect_block_end();
  const int saved_loops = loop_depth_;
  loop_depth_ = 0;
  std::string which;
  s->body = parse_until({"endmacro"}, which, line, "macro");
  loop_depth_ = saved_loops;
  expect_block_end();
  return s;
}

stmt_ptr parser::parse_filter_block(int line) {
  auto s = std::make_unique<stmt>();
  s->kind = stmt_kind::filter_block;
  s->line = line;
  expr_ptr chain;
  do {
    auto f = std::make_unique<expr>();
    f->kind = expr_kind::filter;
    f->line = cur().line;
    f->name = expect_name();
    if (is_op("(")) f->args = parse_call_args();
    f->a = std::move(chain);
    chain = std::move(f);
  } while (skip_op("|"));
  s->cond = std::move(chain);
  expect_block_end();
  std::string which;
  s->body = parse_until({"endfilter"}, which, line, "filter");
  expect_block_end();
  return s;
}

}  // namespace actorserve::protocol::jinja
