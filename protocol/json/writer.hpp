#pragma once
/// A small streaming JSON writer: appends compact JSON text to a std::string. Strings are escaped
/// (quotes, backslash, control characters) and invalid UTF-8 is replaced by U+FFFD, so the
/// output is always valid JSON whatever bytes the model produced.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace actorserve::protocol::json {

/// Appends `s` as a quoted JSON string (escaped, invalid UTF-8 replaced by U+FFFD).
void append_string(std::string& out, std::string_view s);

/// Appends a finite double in shortest round-trip form; NaN becomes null, -inf -9999.0 (as the
/// OpenAI API reports impossible logprobs), +inf 1e308.
void append_double(std::string& out, double v);

/// Writes one JSON value; the caller makes a well-formed sequence of calls (keys inside
/// objects only). Commas are inserted automatically.
class writer {
 public:
  explicit writer(std::string& out) : out_(out) {}

  writer& begin_object() { sep(); out_ += '{'; comma_ = false; return *this; }
  writer& end_object() { out_ += '}'; comma_ = true; return *this; }
  writer& begin_array() { sep(); out_ += '['; comma_ = false; return *this; }
  writer& end_array() { out_ += ']'; comma_ = true; return *this; }
  /// An object key; the next call writes its value.
  writer& key(std::string_view k) { sep(); append_string(out_, k); out_ += ':'; comma_ = false; return *this; }
  writer& str(std::string_view s) { sep(); append_string(out_, s); comma_ = true; return *this; }
  writer& num(int64_t v);
  writer& real(double v) { sep(); append_double(out_, v); comma_ = true; return *this; }
  writer& boolean(bool v) { sep(); out_ += v ? "true" : "false"; comma_ = true; return *this; }
  writer& null() { sep(); out_ += "null"; comma_ = true; return *this; }
  /// A value that is already serialized JSON.
  writer& raw(std::string_view json) { sep(); out_ += json; comma_ = true; return *this; }
  /// An array of integers.
  writer& int_array(std::span<const int32_t> v);

  std::string& out() { return out_; }

 private:
  void sep() { if (comma_) out_ += ','; }
  std::string& out_;
  bool comma_ = false;
};

}  // namespace actorserve::protocol::json
