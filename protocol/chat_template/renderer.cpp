#include "protocol/chat_template/renderer.hpp"

#include "protocol/chat_template/template_error.hpp"

namespace actorserve::protocol::jinja {

const value* frame::lookup(std::string_view name) const {
  for (const frame* f = this; f; f = f->parent.get()) {
    if (const value* v = f->vars.find(name)) return v;
  }
  return nullptr;
}

const value* call_args::get(std::size_t index, std::string_view name) const {
  if (index < pos.size()) return &pos[index];
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return nullptr;
}

std::string renderer::render(const template_ast& ast, value_map context) {
  struct empty_namespaces {  // on every exit, errors included (adopt_namespace)
    std::vector<std::shared_ptr<namespace_obj>>& all;
    ~empty_namespaces() {
      for (const auto& ns : all) ns->attrs = value_map{};
      all.clear();
    }
  } const empty_on_exit{namespaces_};
  auto globals = std::make_shared<frame>();
  add_globals(globals->vars);
  scope_ = std::make_shared<frame>();
  scope_->parent = globals;
  scope_->vars = std::move(context);
  std::string out;
  render_body(ast.body, out);
  scope_.reset();
  return out;
}

/// Recursion cap for eval/render (a few hundred bytes of stack each).
constexpr int max_render_depth = 1500;

renderer::depth_guard::depth_guard(renderer& r, int line) : r_(r) {
  if (++r_.depth_ > max_render_depth) {
    fail(line, "template recursion deeper than " + std::to_string(max_render_depth), error_code::too_large);
  }
}

void renderer::tick(int line) {
  if (++steps_ > limits_.max_steps) {
    fail(line, "rendering exceeded " + std::to_string(limits_.max_steps) + " steps (runaway loop?)", error_code::too_large);
  }
}

void renderer::check_size(std::size_t size, int line) const {
  if (size > limits_.max_output_bytes) {
    fail(line, "rendered text exceeds " + std::to_string(limits_.max_output_bytes) + " bytes", error_code::too_large);
  }
}

void renderer::check_items(std::size_t size, int line) const {
  if (size > limits_.max_items) {
    fail(line, "a list exceeds " + std::to_string(limits_.max_items) + " items", error_code::too_large);
  }
}

void renderer::append(std::string& out, std::string_view text, int line) const {
  check_size(out.size() + text.size(), line);
  out += text;
}

renderer::flow renderer::render_body(const stmt_list& body, std::string& out) {
  for (const auto& s : body) {
    const flow f = render_stmt(*s, out);
    if (f != flow::normal) return f;
  }
  return flow::normal;
}

renderer::flow renderer::render_stmt(const stmt& s, std::string& out) {
  depth_guard guard(*this, s.line);
  switch (s.kind) {
    case stmt_kind::text: append(out, s.text, s.line); break;
    case stmt_kind::output: {
      const value v = eval(*s.value);
      if (v.is_string()) {
        append(out, v.as_string(), s.line);
      } else {
        append(out, to_str(v), s.line);
      }
      break;
    }
    case stmt_kind::if_:
      for (const auto& [cond, body] : s.branches) {
        if (truthy(eval(*cond))) return render_body(body, out);
      }
      return render_body(s.else_body, out);
    case stmt_kind::for_: return render_for(s, out);
    case stmt_kind::set:
    case stmt_kind::set_block: render_set(s, out); break;
    case stmt_kind::macro: {
      auto m = std::make_shared<callable>();
      m->name = s.name;
      m->macro = &s;
      m->closure = scope_.get();
      if (macro_scopes_.empty() || macro_scopes_.back() != scope_) macro_scopes_.push_back(scope_);
      scope_->vars.set(s.name, value(std::shared_ptr<const callable>(std::move(m))));
      break;
    }
    case stmt_kind::break_: return flow::break_;
    case stmt_kind::continue_: return flow::continue_;
    case stmt_kind::filter_block: {
      std::string inner;
      const flow f = render_body(s.body, inner);
      const value input(std::move(inner));
      append(out, to_str(eval_filter_chain(*s.cond, &input)), s.line);
      return f;
    }
    case stmt_kind::block: return render_body(s.body, out);
  }
  return flow::normal;
}

void renderer::bind_targets(frame& f, const std::vector<std::string>& targets, const value& item, int line) {
  if (targets.size() == 1) {
    f.vars.set(targets[0], item);
    return;
  }
  const auto items = iterate(item, line);
  if (items->size() != targets.size()) {
    fail(line, std::string(items->size() > targets.size() ? "too many" : "not enough") + " values to unpack (expected " +
                   std::to_string(targets.size()) + ", got " + std::to_string(items->size()) + ")");
  }
  for (std::size_t i = 0; i < targets.size(); ++i) f.vars.set(targets[i], (*items)[i]);
}

renderer::flow renderer::render_for(const stmt& s, std::string& out) {
  std::shared_ptr<const value_list> items = iterate(eval(*s.value), s.line);
  const frame_ptr outer = scope_;
  if (s.cond) {
    value_list kept;
    for (const auto& item : *items) {
      tick(s.line);
      scope_ = std::make_shared<frame>();
      scope_->parent = outer;
      bind_targets(*scope_, s.targets, item, s.line);
      const bool keep = truthy(eval(*s.cond));
      scope_ = outer;
      if (keep) kept.push_back(item);
    }
    items = std::make_shared<const value_list>(std::move(kept));
  }
  if (items->empty()) return render_body(s.else_body, out);
  std::int64_t depth0 = 0;
  if (const value* parent_loop = outer->lookup("loop"); parent_loop && parent_loop->is(value::kind::loop)) {
    depth0 = parent_loop->as_loop().depth0 + 1;
  }
  const auto n = static_cast<std::int64_t>(items->size());
  for (std::int64_t i = 0; i < n; ++i) {
    tick(s.line);
    auto iteration = std::make_shared<frame>();
    iteration->parent = outer;
    bind_targets(*iteration, s.targets, (*items)[static_cast<std::size_t>(i)], s.line);
    auto state = std::make_shared<loop_state>();
    state->index0 = i;
    state->length = n;
    state->depth0 = depth0;
    state->items = items;
    iteration->vars.set("loop", value(std::shared_ptr<const loop_state>(std::move(state))));
    scope_ = iteration;
    flow f = flow::normal;
    try {
      f = render_body(s.body, out);
    } catch (...) {
      scope_ = outer;
      throw;
    }
    scope_ = outer;
    if (f == flow::break_) break;
  }
  return flow::normal;
}

void renderer::render_set(const stmt& s, std::string& out) {
  (void)out;
  value v;
  if (s.kind == stmt_kind::set_block) {
    std::string inner;
    render_body(s.body, inner);
    v = value(std::move(inner));
    if (s.cond) v = eval_filter_chain(*s.cond, &v);
  } else {
    v = eval(*s.value);
  }
  if (!s.attr.empty()) {
    const value* ns = scope_->lookup(s.targets[0]);
    if (!ns || !ns->is(value::kind::ns)) {
      fail(s.line, "cannot assign attribute '" + s.attr + "' on '" + s.targets[0] + "': not a namespace()");
    }
    ns->as_ns().attrs.set(s.attr, std::move(v));
    return;
  }
  bind_targets(*scope_, s.targets, v, s.line);
}

value renderer::call_macro(const callable& m, const call_args& args, int line) {
  const stmt& def = *m.macro;
  if (args.pos.size() > def.params.size()) {
    fail(line, "macro '" + def.name + "' takes not more than " + std::to_string(def.params.size()) + " argument(s)");
  }
  for (const auto& [k, v] : args.kw) {
    bool known = false;
    for (const auto& p : def.params) known = known || p.first == k;
    if (!known) fail(line, "macro '" + def.name + "' takes no keyword argument '" + k + "'");
  }
  if (call_depth_ >= limits_.max_call_depth) {
    fail(line, "macro calls nested deeper than " + std::to_string(limits_.max_call_depth), error_code::too_large);
  }
  auto f = std::make_shared<frame>();
  f->parent = m.closure->shared_from_this();
  const frame_ptr caller_scope = scope_;
  scope_ = f;
  ++call_depth_;
  std::string out;
  try {
    for (std::size_t i = 0; i < def.params.size(); ++i) {
      const auto& [pname, pdefault] = def.params[i];
      if (const value* a = args.get(i, pname)) {
        f->vars.set(pname, *a);
      } else if (pdefault) {
        f->vars.set(pname, eval(*pdefault));
      } else {
        f->vars.set(pname, value::undefined(pname));
      }
    }
    render_body(def.body, out);
  } catch (...) {
    scope_ = caller_scope;
    --call_depth_;
    throw;
  }
  scope_ = caller_scope;
  --call_depth_;
  return value(std::move(out));
}

value renderer::call(const value& fn, const call_args& args, int line) {
  tick(line);
  if (fn.is(value::kind::callable)) {
    const callable& c = fn.as_callable();
    if (c.macro) return call_macro(c, args, line);
    return c.fn(*this, args, line);
  }
  require_defined(fn, line);
  fail(line, "'" + type_name(fn) + "' object is not callable");
}

}  // namespace actorserve::protocol::jinja
