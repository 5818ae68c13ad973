#pragma once
/// The interpreter's runtime value: chat_value's kinds plus Jinja's undefined, namespace(), the
/// loop object and callables (macros, builtins). Python semantics for truth, str(), ==, <.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "protocol/chat_template/chat_value.hpp"

namespace actorserve::protocol::jinja {

class value;
using value_list = std::vector<value>;

/// A dict: string keys in insertion order.
struct value_map {
  std::vector<std::pair<std::string, value>> entries;
  const value* find(std::string_view key) const;
  void set(std::string_view key, value v);
};

/// What an undefined value was looked up as, for "'x' is undefined" errors.
struct undefined_t {
  std::string name;
};

/// A namespace() object: the one mutable container templates can write to (`set ns.x = ...`).
struct namespace_obj {
  value_map attrs;
};

/// The `loop` variable of one for-loop iteration.
struct loop_state {
  std::int64_t index0 = 0;
  std::int64_t length = 0;
  std::int64_t depth0 = 0;
  std::shared_ptr<const value_list> items;  ///< the (filtered) sequence, for previtem/nextitem
};

struct callable;

class value {
 public:
  enum class kind { undefined, none, boolean, integer, floating, string, list, map, ns, loop, callable };

  value() : v_(undefined_t{}) {}
  static value undefined(std::string name) { return value(undefined_t{std::move(name)}); }
  static value none() { return value(nullptr); }
  value(bool b) : v_(b) {}                                      // NOLINT
  value(std::int64_t i) : v_(i) {}                              // NOLINT
  value(double d) : v_(d) {}                                    // NOLINT
  value(std::string s) : v_(std::move(s)) {}                    // NOLINT
  value(const char* s) : v_(std::string(s)) {}                  // NOLINT
  value(value_list l) : v_(std::make_shared<const value_list>(std::move(l))) {}  // NOLINT
  value(value_map m) : v_(std::make_shared<const value_map>(std::move(m))) {}    // NOLINT
  value(std::shared_ptr<const value_list> l) : v_(std::move(l)) {}              // NOLINT
  value(std::shared_ptr<namespace_obj> n) : v_(std::move(n)) {}                 // NOLINT
  value(std::shared_ptr<const loop_state> l) : v_(std::move(l)) {}              // NOLINT
  value(std::shared_ptr<const callable> c) : v_(std::move(c)) {}                // NOLINT

  kind type() const { return static_cast<kind>(v_.index()); }
  bool is(kind k) const { return type() == k; }
  bool is_undefined() const { return is(kind::undefined); }
  bool is_none() const { return is(kind::none); }
  bool is_string() const { return is(kind::string); }
  bool is_list() const { return is(kind::list); }
  bool is_map() const { return is(kind::map); }
  /// int, float or bool (Python's bool is an int).
  bool is_number() const { return is(kind::integer) || is(kind::floating) || is(kind::boolean); }

  bool as_bool() const { return std::get<bool>(v_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const value_list& as_list() const { return *std::get<std::shared_ptr<const value_list>>(v_); }
  const std::shared_ptr<const value_list>& list_ptr() const {
    return std::get<std::shared_ptr<const value_list>>(v_);
  }
  const value_map& as_map() const { return *std::get<std::shared_ptr<const value_map>>(v_); }
  namespace_obj& as_ns() const { return *std::get<std::shared_ptr<namespace_obj>>(v_); }
  const loop_state& as_loop() const { return *std::get<std::shared_ptr<const loop_state>>(v_); }
  const callable& as_callable() const { return *std::get<std::shared_ptr<const callable>>(v_); }
  const std::string& undefined_name() const { return std::get<undefined_t>(v_).name; }

  /// Numeric value of an int, float or bool.
  double to_double() const;

 private:
  explicit value(undefined_t u) : v_(std::move(u)) {}
  explicit value(std::nullptr_t) : v_(nullptr) {}
  std::variant<undefined_t, std::nullptr_t, bool, std::int64_t, double, std::string,
               std::shared_ptr<const value_list>, std::shared_ptr<const value_map>,
               std::shared_ptr<namespace_obj>, std::shared_ptr<const loop_state>,
               std::shared_ptr<const callable>>
      v_;
};

/// Converts an input value (arrays and objects are copied once, at render start).
value from_chat(const chat_value& v);

/// Python truth: undefined, none, false, 0, 0.0, "", [] and {} are false.
bool truthy(const value& v);
/// Python str(v) as Jinja prints it; undefined prints as "".
std::string to_str(const value& v);
/// Python repr(v) (how list/dict members print).
std::string repr(const value& v);
/// Python float repr: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string float_repr(double d);
/// Python type name, for error messages ("str", "int", "list", "dict", "NoneType", ...).
std::string type_name(const value& v);

/// Python ==.
bool equals(const value& a, const value& b);
/// Python ordering (<0, 0, >0) of numbers, strings or lists; throws a template_error otherwise.
int compare(const value& a, const value& b, int line, std::string_view op);

}  // namespace actorserve::protocol::jinja
