/// Expression evaluation: names, literals, attribute/item access, slicing, calls, filters, tests,
/// logic and comparisons. Arithmetic lives in operators.cpp.
#include "protocol/chat_template/renderer.hpp"
#include "protocol/chat_template/template_error.hpp"
#include "protocol/chat_template/utf8_text.hpp"

namespace actorserve::protocol::jinja {

void require_defined(const value& v, int line) {
  if (!v.is_undefined()) return;
  if (v.undefined_name().empty()) fail(line, "value is undefined");
  fail(line, "'" + v.undefined_name() + "' is undefined");
}

value renderer::lookup(const std::string& name) const {
  if (const value* v = scope_->lookup(name)) return *v;
  return value::undefined(name);
}

call_args renderer::eval_args(const std::vector<call_arg>& args) {
  call_args out;
  for (const auto& a : args) {
    if (a.name.empty()) {
      out.pos.push_back(eval(*a.value));
    } else {
      out.kw.emplace_back(a.name, eval(*a.value));
    }
  }
  return out;
}

value get_attr(const value& obj, const std::string& name, int line) {
  switch (obj.type()) {
    case value::kind::undefined: require_defined(obj, line); break;
    case value::kind::map:
      if (const value* v = obj.as_map().find(name)) return *v;
      break;
    case value::kind::ns:
      if (const value* v = obj.as_ns().attrs.find(name)) return *v;
      break;
    case value::kind::loop: {
      const loop_state& l = obj.as_loop();
      if (name == "index") return value(l.index0 + 1);
      if (name == "index0") return value(l.index0);
      if (name == "revindex") return value(l.length - l.index0);
      if (name == "revindex0") return value(l.length - l.index0 - 1);
      if (name == "first") return value(l.index0 == 0);
      if (name == "last") return value(l.index0 + 1 == l.length);
      if (name == "length") return value(l.length);
      if (name == "depth") return value(l.depth0 + 1);
      if (name == "depth0") return value(l.depth0);
      if (name == "previtem") {
        return l.index0 > 0 ? (*l.items)[static_cast<std::size_t>(l.index0 - 1)] : value::undefined("loop.previtem");
      }
      if (name == "nextitem") {
        return l.index0 + 1 < l.length ? (*l.items)[static_cast<std::size_t>(l.index0 + 1)] : value::undefined("loop.nextitem");
      }
      break;
    }
    default: break;
  }
  return value::undefined(name);
}

namespace {

/// Python index normalization: negative counts from the end; false when out of range.
bool normalize_index(std::int64_t& i, std::size_t size) {
  const auto n = static_cast<std::int64_t>(size);
  if (i < 0) i += n;
  return i >= 0 && i < n;
}

bool as_index(const value& key, std::int64_t& i) {
  if (key.is(value::kind::integer)) {
    i = key.as_int();
    return true;
  }
  if (key.is(value::kind::boolean)) {
    i = key.as_bool() ? 1 : 0;
    return true;
  }
  return false;
}

}  // namespace

value get_item(const value& obj, const value& key, int line) {
  std::int64_t i = 0;
  switch (obj.type()) {
    case value::kind::undefined: require_defined(obj, line); break;
    case value::kind::list:
      if (as_index(key, i) && normalize_index(i, obj.as_list().size())) return obj.as_list()[static_cast<std::size_t>(i)];
      break;
    case value::kind::string: {
      if (!as_index(key, i)) break;
      const std::string& s = obj.as_string();
      if (is_ascii(s)) {
        if (normalize_index(i, s.size())) return value(std::string(1, s[static_cast<std::size_t>(i)]));
        break;
      }
      const auto offsets = code_point_offsets(s);
      if (normalize_index(i, offsets.size() - 1)) {
        const auto k = static_cast<std::size_t>(i);
        return value(s.substr(offsets[k], offsets[k + 1] - offsets[k]));
      }
      break;
    }
    case value::kind::map:
    case value::kind::ns:
    case value::kind::loop:
      if (key.is_string()) return get_attr(obj, key.as_string(), line);
      break;
    default: break;
  }
  return value::undefined(key.is_string() ? key.as_string() : to_str(key));
}

value get_slice(const value& obj, const value* start, const value* stop, const value* step, int line) {
  require_defined(obj, line);
  auto int_or = [&](const value* v, std::int64_t dflt) {
    if (!v || v->is_none()) return dflt;
    std::int64_t i = 0;
    if (!as_index(*v, i)) fail(line, "slice indices must be integers or None");
    return i;
  };
  const std::int64_t st = int_or(step, 1);
  if (st == 0) fail(line, "slice step cannot be zero");
  std::vector<std::size_t> offsets;
  std::int64_t n = 0;
  if (obj.is_list()) {
    n = static_cast<std::int64_t>(obj.as_list().size());
  } else if (obj.is_string()) {
    offsets = code_point_offsets(obj.as_string());
    n = static_cast<std::int64_t>(offsets.size() - 1);
  } else {
    return value::undefined("slice");  // jinja2: an unsliceable value gives undefined
  }
  // PySlice_AdjustIndices.
  auto adjust = [&](const value* v, std::int64_t dflt) {
    if (!v || v->is_none()) return dflt;
    std::int64_t i = int_or(v, 0);
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  const std::int64_t b = adjust(start, st < 0 ? n - 1 : 0);
  const std::int64_t e = adjust(stop, st < 0 ? -1 : n);
  std::vector<std::int64_t> picks;
  for (std::int64_t i = b; st > 0 ? i < e : i > e; i += st) picks.push_back(i);
  if (obj.is_list()) {
    value_list out;
    out.reserve(picks.size());
    for (auto i : picks) out.push_back(obj.as_list()[static_cast<std::size_t>(i)]);
    return value(std::move(out));
  }
  std::string out;
  const std::string& s = obj.as_string();
  for (auto i : picks) {
    const auto k = static_cast<std::size_t>(i);
    out.append(s, offsets[k], offsets[k + 1] - offsets[k]);
  }
  return value(std::move(out));
}

value renderer::eval(const expr& e) {
  tick(e.line);
  depth_guard guard(*this, e.line);
  switch (e.kind) {
    case expr_kind::literal: return e.constant;
    case expr_kind::name: return lookup(e.name);
    case expr_kind::list: {
      value_list items;
      items.reserve(e.items.size());
      for (const auto& item : e.items) items.push_back(eval(*item));
      return value(std::move(items));
    }
    case expr_kind::dict: {
      value_map m;
      for (std::size_t i = 0; i + 1 < e.items.size(); i += 2) {
        const value k = eval(*e.items[i]);
        if (!k.is_string()) fail(e.line, "dict keys must be strings (got '" + type_name(k) + "')", error_code::unsupported);
        m.set(k.as_string(), eval(*e.items[i + 1]));
      }
      return value(std::move(m));
    }
    case expr_kind::attribute: return get_attr(eval(*e.a), e.name, e.line);
    case expr_kind::subscript: return get_item(eval(*e.a), eval(*e.b), e.line);
    case expr_kind::slice: {
      const value obj = eval(*e.a);
      const value b = e.b ? eval(*e.b) : value::none();
      const value c = e.c ? eval(*e.c) : value::none();
      const value d = e.d ? eval(*e.d) : value::none();
      return get_slice(obj, &b, &c, &d, e.line);
    }
    case expr_kind::call: return eval_call(e);
    case expr_kind::filter: return eval_filter_chain(e, nullptr);
    case expr_kind::test: {
      const bool r = apply_test(e.name, eval(*e.a), eval_args(e.args), e.line);
      return value(e.negated ? !r : r);
    }
    case expr_kind::unary: {
      const value v = eval(*e.a);
      if (e.op == op_kind::not_) return value(!truthy(v));
      require_defined(v, e.line);
      if (v.is(value::kind::floating)) return value(e.op == op_kind::neg ? -v.as_float() : v.as_float());
      if (v.is(value::kind::integer) || v.is(value::kind::boolean)) {
        const std::int64_t i = v.is(value::kind::boolean) ? v.as_bool() : v.as_int();
        return value(e.op == op_kind::neg ? -i : i);
      }
      fail(e.line, "bad operand type for unary " + std::string(e.op == op_kind::neg ? "-" : "+") + ": '" + type_name(v) + "'");
    }
    case expr_kind::binary: {
      const value a = eval(*e.a);
      if (e.op == op_kind::and_) return truthy(a) ? eval(*e.b) : a;
      if (e.op == op_kind::or_) return truthy(a) ? a : eval(*e.b);
      return binary_op(*this, e.op, a, eval(*e.b), e.line);
    }
    case expr_kind::compare: {
      value left = eval(*e.a);
      for (const auto& [op, rhs] : e.chain) {
        value right = eval(*rhs);
        bool r = false;
        switch (op) {
          case op_kind::eq: r = equals(left, right); break;
          case op_kind::ne: r = !equals(left, right); break;
          case op_kind::lt: r = compare(left, right, e.line, "<") < 0; break;
          case op_kind::le: r = compare(left, right, e.line, "<=") <= 0; break;
          case op_kind::gt: r = compare(left, right, e.line, ">") > 0; break;
          case op_kind::ge: r = compare(left, right, e.line, ">=") >= 0; break;
          default: r = truthy(binary_op(*this, op, left, right, e.line)); break;
        }
        if (!r) return value(false);
        left = std::move(right);
      }
      return value(true);
    }
    case expr_kind::conditional:
      if (truthy(eval(*e.a))) return eval(*e.b);
      return e.c ? eval(*e.c) : value::undefined({});
  }
  return value::undefined({});
}

value renderer::eval_call(const expr& e) {
  const expr& callee = *e.a;
  if (callee.kind == expr_kind::attribute) {
    const value obj = eval(*callee.a);
    require_defined(obj, e.line);
    const call_args args = eval_args(e.args);
    bool found = false;
    value r = call_method(*this, obj, callee.name, args, e.line, found);
    if (found) return r;
    const value fn = get_attr(obj, callee.name, e.line);
    if (fn.is_undefined()) fail(e.line, "'" + type_name(obj) + "' object has no attribute '" + callee.name + "'");
    return call(fn, args, e.line);
  }
  const value fn = eval(callee);
  return call(fn, eval_args(e.args), e.line);
}

value renderer::eval_filter_chain(const expr& f, const value* input) {
  value operand;
  if (!f.a) {
    operand = input ? *input : value::undefined({});
  } else if (input && f.a->kind == expr_kind::filter) {
    operand = eval_filter_chain(*f.a, input);
  } else {
    operand = eval(*f.a);
  }
  return apply_filter(f.name, operand, eval_args(f.args), f.line);
}

}  // namespace actorserve::protocol::jinja
