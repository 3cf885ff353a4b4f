// Status and Expected<T>: how every function that touches the outside world (files, configs,
// requests) reports failure. A failure carries a message a user can act on; it never aborts.
// KILN_CHECK is for broken internal invariants only.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the input is malformed or unsupported
  kNotFound,         // a file, tensor or key is missing
  kIoError,          // the operating system refused a read or write
  kUnimplemented,    // valid input that Kiln does not handle (yet)
  kInternal,         // a bug in Kiln
  kResourceExhausted,  // a limit is reached for now (a full queue); the same input may succeed later
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with context: "reading model.safetensors: " + message.
  Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    return {code_, context + ": " + message_};
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}
inline Status not_found(std::string message) { return {StatusCode::kNotFound, std::move(message)}; }
inline Status io_error(std::string message) { return {StatusCode::kIoError, std::move(message)}; }
inline Status unimplemented(std::string message) {
  return {StatusCode::kUnimplemented, std::move(message)};
}
inline Status resource_exhausted(std::string message) {
  return {StatusCode::kResourceExhausted, std::move(message)};
}
inline Status internal_error(std::string message) {
  return {StatusCode::kInternal, std::move(message)};
}

// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : data_(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Status status) : data_(std::move(status)) {  // NOLINT
    if (std::get<Status>(data_).is_ok()) {
      data_ = Status(StatusCode::kInternal, "Expected constructed from an ok Status");
    }
  }

  bool has_value() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return has_value(); }

  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  Status status() const { return has_value() ? Status::ok() : std::get<Status>(data_); }

 private:
  std::variant<T, Status> data_;
};

[[noreturn]] inline void check_failed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "kiln: internal invariant violated: %s at %s:%d\n", expr, file, line);
  std::abort();
}

}  // namespace kiln

#define KILN_CHECK(cond) \
  do { \
    if (!(cond)) ::kiln::check_failed(#cond, __FILE__, __LINE__); \
  } while (0)

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)

// KILN_RETURN_IF_ERROR(expr): returns the Status of expr from the calling function if not ok.
#define KILN_RETURN_IF_ERROR(expr) \
  do { \
    ::kiln::Status kiln_status_ = (expr); \
    if (!kiln_status_.is_ok()) return kiln_status_; \
  } while (0)

// KILN_ASSIGN_OR_RETURN(lhs, expr): lhs = value of Expected expr, or return its Status.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(kiln_expected_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr); \
  if (!tmp.has_value()) return tmp.status(); \
  lhs = std::move(tmp).value()
