// Error handling at module boundaries: Status for operations without a result,
// Expected<T> for operations with one. Errors carry a kind that maps to the CLI's
// exit code (user error: 1, internal error: 2) and a message to which each layer
// prepends its context ("node 'conv3' (Conv): weight has rank 3, expected 4").
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace seqto {

enum class ErrorKind { kUser, kInternal };

struct Error {
  ErrorKind kind = ErrorKind::kUser;
  std::string message;
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)) {}  // NOLINT: implicit on purpose
  static Status Ok() { return Status(); }

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const {
    assert(error_);
    return *error_;
  }
  const std::string& message() const { return error().message; }

  // Returns this error with "context: " prepended; ok stays ok.
  Status WithContext(const std::string& context) && {
    if (error_) error_->message = context + ": " + error_->message;
    return std::move(*this);
  }

 private:
  std::optional<Error> error_;
};

inline Error UserError(std::string message) { return Error{ErrorKind::kUser, std::move(message)}; }
inline Error InternalError(std::string message) { return Error{ErrorKind::kInternal, std::move(message)}; }

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}      // NOLINT: implicit on purpose
  Expected(Error error) : v_(std::move(error)) {}  // NOLINT
  Expected(Status status) : v_(status.error()) {}  // NOLINT: only from a failed Status

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }
  Status status() const { return ok() ? Status() : Status(error()); }
  Expected WithContext(const std::string& context) && {
    if (!ok()) std::get<1>(v_).message = context + ": " + std::get<1>(v_).message;
    return std::move(*this);
  }

 private:
  std::variant<T, Error> v_;
};

}  // namespace seqto

#define SEQTO_CONCAT_INNER(a, b) a##b
#define SEQTO_CONCAT(a, b) SEQTO_CONCAT_INNER(a, b)

// Returns the error of a Status-returning expression from the enclosing function.
#define SEQTO_RETURN_IF_ERROR(expr)                        \
  do {                                                     \
    ::seqto::Status seqto_status_ = (expr);                \
    if (!seqto_status_.ok()) return seqto_status_.error(); \
  } while (0)

// `SEQTO_ASSIGN_OR_RETURN(auto x, Foo());` unwraps an Expected or returns its error.
#define SEQTO_ASSIGN_OR_RETURN(lhs, expr)                                                                    \
  auto SEQTO_CONCAT(seqto_expected_, __LINE__) = (expr);                                                     \
  if (!SEQTO_CONCAT(seqto_expected_, __LINE__).ok()) return SEQTO_CONCAT(seqto_expected_, __LINE__).error(); \
  lhs = std::move(SEQTO_CONCAT(seqto_expected_, __LINE__)).value()
