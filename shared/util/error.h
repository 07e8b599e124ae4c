// The one exception type of WASTE. Messages name the file, tensor, record or field at fault,
// so a user can act on them without a debugger. Its kind says what sort of failure it is: the
// one list that crosses the RPC boundary (shared/ipc/rpc_error.h) and that waste-serve maps to
// HTTP statuses in one place, so no front end matches message text.
#pragma once
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace waste {

enum class ErrorKind {
  Internal,        // a defect, damaged data, anything not below (HTTP 500)
  InvalidRequest,  // the request itself is wrong; param names the field when one is at fault (400)
  ContextLength,   // the prompt does not fit the session's context (400 context_length_exceeded)
  Overloaded,      // too many sessions or requests right now: try again later (429)
  Unavailable,     // a process the caller needs went away or stopped answering; param names it (503)
};

// The kind's name on the wire and in logs ("invalid_request", ...); kind_of_name is its inverse.
constexpr std::string_view error_kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::Internal: return "internal";
    case ErrorKind::InvalidRequest: return "invalid_request";
    case ErrorKind::ContextLength: return "context_length";
    case ErrorKind::Overloaded: return "overloaded";
    case ErrorKind::Unavailable: return "unavailable";
  }
  return "internal";
}
inline std::optional<ErrorKind> kind_of_name(std::string_view name) {
  for (ErrorKind k : {ErrorKind::Internal, ErrorKind::InvalidRequest, ErrorKind::ContextLength, ErrorKind::Overloaded,
                      ErrorKind::Unavailable})
    if (error_kind_name(k) == name) return k;
  return std::nullopt;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, ErrorKind kind = ErrorKind::Internal, std::string param = "")
      : std::runtime_error(what), kind_(kind), param_(std::move(param)) {}
  // A relayed error (rpc_call): `what` names the peer and the call; `message` is the peer's own.
  Error(const std::string& what, ErrorKind kind, std::string param, std::string message)
      : std::runtime_error(what), kind_(kind), param_(std::move(param)), message_(std::move(message)) {}
  ErrorKind kind() const { return kind_; }
  const std::string& param() const { return param_; }  // the request field at fault ("" when none)
  // What failed, without where it was called from: a relayed error's own text, else what().
  std::string message() const { return message_.empty() ? std::string(what()) : message_; }
  // Relayed: a peer reported it (it failed over there), not the call to the peer itself.
  bool relayed() const { return relayed_; }
  Error& set_relayed() {
    relayed_ = true;
    return *this;
  }
  // Unanswered: the peer is there (connected) but gave no answer within the call's deadline
  // (stopped or wedged), as opposed to gone. Set by rpc_call from within()'s own exception.
  bool unanswered() const { return unanswered_; }
  Error& set_unanswered() {
    unanswered_ = true;
    return *this;
  }

 private:
  ErrorKind kind_;
  std::string param_, message_;
  bool relayed_ = false;
  bool unanswered_ = false;
};

// True when `e` is an Error of a peer that did not answer in time (Error::unanswered).
inline bool unanswered(const std::exception& e) {
  const auto* w = dynamic_cast<const Error*>(&e);
  return w && w->unanswered();
}

// The kind of any exception: an Error's own, else Internal.
inline ErrorKind kind_of(const std::exception& e) {
  const auto* w = dynamic_cast<const Error*>(&e);
  return w ? w->kind() : ErrorKind::Internal;
}

// `e` with `context` before its text ("eval: ..."), keeping its kind and param.
inline Error with_context(const std::string& context, const std::exception& e) {
  const auto* w = dynamic_cast<const Error*>(&e);
  return Error(context + e.what(), w ? w->kind() : ErrorKind::Internal, w ? w->param() : "");
}

// Throws Error(message) when `ok` is false. Use for checks on data read from disk or a peer.
inline void require(bool ok, const std::string& message) {
  if (!ok) throw Error(message);
}
// The same with a kind (a refused limit: Overloaded, ContextLength, ...).
inline void require_kind(bool ok, ErrorKind kind, const std::string& message) {
  if (!ok) throw Error(message, kind);
}
// The same for a check of a request: the client's fault, not ours.
inline void require_request(bool ok, const std::string& message, const std::string& param = "") {
  if (!ok) throw Error(message, ErrorKind::InvalidRequest, param);
}

}  // namespace waste
