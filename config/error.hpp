#pragma once
/// The project's error value: a code and a message that names the offending flag, file or field.
/// Every layer returns these (no exceptions cross folders); the server maps `code` to HTTP status
/// in exactly one place.
#include <string>
#include <utility>
#include <variant>

namespace actorserve {

enum class error_code {
  invalid_argument,   ///< bad flag, request field or value (HTTP 400)
  not_found,          ///< missing file, tensor, model or route (HTTP 404)
  unsupported,        ///< valid input that this build cannot serve (HTTP 400)
  malformed_file,     ///< a model file that cannot be parsed (start-up error)
  too_large,          ///< body/prompt over a configured limit (HTTP 413 / 400)
  unauthorized,       ///< missing or wrong API key (HTTP 401)
  out_of_memory,      ///< KV pool or device memory exhausted at start-up
  cancelled,          ///< request cancelled by client, deadline or shutdown
  unavailable,        ///< engine restarting or shut down (HTTP 503)
  internal,           ///< a bug or device failure (HTTP 500)
};

/// Short stable name of an error code, used in logs and OpenAI error objects.
const char* to_string(error_code code);

struct error {
  error_code code = error_code::internal;
  std::string message;
};

/// A value or an error; a minimal std::expected for C++20.
template <class T>
class result {
 public:
  result(T value) : v_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  result(error err) : v_(std::move(err)) {}          // NOLINT(google-explicit-constructor)
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  const error& err() const { return std::get<1>(v_); }

 private:
  std::variant<T, error> v_;
};

/// Success or an error.
class status {
 public:
  status() = default;
  status(error err) : err_(std::move(err)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const error& err() const { return err_; }

 private:
  error err_;
  bool ok_ = true;
};

inline error make_error(error_code code, std::string message) { return error{code, std::move(message)}; }

}  // namespace actorserve
