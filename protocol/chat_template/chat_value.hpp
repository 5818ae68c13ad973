#pragma once
/// A JSON-like value for chat template inputs: messages, tools and extra variables.
/// Arrays and objects are shared and immutable once built, so copies are cheap and a value can be
/// read from several threads at once. Objects keep their keys in insertion order (as Python dicts).
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace actorserve::protocol {

class chat_value {
 public:
  using array = std::vector<chat_value>;
  using member = std::pair<std::string, chat_value>;
  using object = std::vector<member>;
  enum class kind { null, boolean, integer, number, string, array, object };

  /// null.
  chat_value() = default;
  chat_value(std::nullptr_t) {}                                   // NOLINT
  chat_value(bool b) : v_(b) {}                                   // NOLINT
  chat_value(int i) : v_(static_cast<std::int64_t>(i)) {}         // NOLINT
  chat_value(std::int64_t i) : v_(i) {}                           // NOLINT
  chat_value(double d) : v_(d) {}                                 // NOLINT
  chat_value(std::string s) : v_(std::move(s)) {}                 // NOLINT
  chat_value(std::string_view s) : v_(std::string(s)) {}          // NOLINT
  chat_value(const char* s) : v_(std::string(s)) {}               // NOLINT
  chat_value(array a) : v_(std::make_shared<const array>(std::move(a))) {}    // NOLINT
  chat_value(object o) : v_(std::make_shared<const object>(std::move(o))) {}  // NOLINT

  /// An object from {key, value} pairs, in the given order (a repeated key keeps the last value).
  static chat_value make_object(std::initializer_list<member> members);
  /// An array from values.
  static chat_value make_array(std::initializer_list<chat_value> items);
  /// A chat message {"role": role, "content": content}.
  static chat_value message(std::string_view role, std::string_view content);

  kind type() const { return static_cast<kind>(v_.index()); }
  bool is_null() const { return type() == kind::null; }
  bool is_string() const { return type() == kind::string; }
  bool is_array() const { return type() == kind::array; }
  bool is_object() const { return type() == kind::object; }

  bool as_bool() const { return std::get<bool>(v_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(v_); }
  double as_double() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const array& as_array() const { return *std::get<std::shared_ptr<const array>>(v_); }
  const object& as_object() const { return *std::get<std::shared_ptr<const object>>(v_); }

  /// The member named `key` of an object, or nullptr (also when this is not an object).
  const chat_value* find(std::string_view key) const;
  /// A copy of this object with `key` set to `v` (appended when new, replaced in place when not).
  /// Any non-object (e.g. null) counts as an empty object.
  chat_value with(std::string_view key, chat_value v) const;

 private:
  std::variant<std::nullptr_t, bool, std::int64_t, double, std::string, std::shared_ptr<const array>,
               std::shared_ptr<const object>>
      v_{nullptr};
};

}  // namespace actorserve::protocol
