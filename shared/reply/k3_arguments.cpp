#include "shared/reply/k3_arguments.h"

#include "shared/reply/json_text.h"

namespace waste::reply {

namespace {

std::string_view trim(std::string_view s) {
  const auto ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

bool K3CallArguments::begin_argument(std::string_view key, std::string_view type) {
  if (mode_ == Mode::Raw) return false;
  std::string head = mode_ == Mode::Empty ? "{" : ", ";
  mode_ = Mode::Typed;
  head += json_quote(key);
  head += ": ";
  // Only string values can be written before the body is complete: their JSON form is known
  // piece by piece. Every other type (and an unknown one) must be checked whole first.
  streams_string_ = type == "string";
  if (streams_string_) head += '"';
  held_.clear();
  emit(head);
  return true;
}

void K3CallArguments::argument_text(std::string_view utf8) {
  if (streams_string_) {
    std::string piece;
    append_json_escaped(piece, utf8);
    emit(piece);
    return;
  }
  if (held_.size() + utf8.size() <= kMaxHeldValueBytes) {
    held_ += utf8;
    return;
  }
  // Too long to hold: give up checking and stream the value as a string from here on.
  std::string piece = "\"";
  append_json_escaped(piece, held_);
  append_json_escaped(piece, utf8);
  held_.clear();
  streams_string_ = true;
  emit(piece);
}

void K3CallArguments::end_argument(bool cut) {
  if (streams_string_) {
    streams_string_ = false;
    emit("\"");
    return;
  }
  const std::string_view value = trim(held_);
  if (is_json_value(value)) {
    emit(value);
  } else if (auto suffix = cut ? json_closing_suffix(value) : std::nullopt) {
    emit(std::string(value) + *suffix);
  } else {
    emit(json_quote(held_));  // not JSON: the model's text, as a string
  }
  held_.clear();
}

bool K3CallArguments::begin_json() {
  if (mode_ != Mode::Empty) return false;
  mode_ = Mode::Raw;
  return true;
}

void K3CallArguments::end_json(bool cut) {
  if (!cut) return;
  // In raw mode the arguments are exactly the json element's body.
  if (auto suffix = json_closing_suffix(sink_.reply().tool_calls[index_].arguments)) emit(*suffix);
}

void K3CallArguments::end_call() {
  if (mode_ == Mode::Empty) emit("{}");
  if (mode_ == Mode::Typed) emit("}");
}

}  // namespace waste::reply
