// The OpenAI arguments string of one K3 call, written to the sink while the model writes the
// call's argument elements (or its raw json element), so clients see the JSON grow.
//
//   argument key="city" type="string"  -> `{"city": "` at the header, the escaped body as it
//                                         comes, `"` at the close
//   argument key="n" type="number"     -> `, "n": ` at the header; the body is held until the
//                                         close, checked, and written as is (or as a JSON string)
//   json                               -> the body verbatim
//   end of the call                    -> `}` (or `{}` for a call without children)
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include "shared/reply/reply_sink.h"

namespace waste::reply {

class K3CallArguments {
 public:
  K3CallArguments(ReplySink& sink, size_t call_index) : sink_(sink), index_(call_index) {}

  // False (write nothing) when the call already took a json element.
  bool begin_argument(std::string_view key, std::string_view type);
  void argument_text(std::string_view utf8);
  // cut: the element was not closed by the model (cut off or closed implicitly), so a held value
  // may be repaired with its missing closing brackets.
  void end_argument(bool cut);

  // False when the call already has an argument or json element.
  bool begin_json();
  void json_text(std::string_view utf8) { emit(utf8); }
  // An explicitly closed json element is left as the model wrote it; a cut one gets its missing
  // closing brackets when that makes it valid JSON.
  void end_json(bool cut);

  void end_call();

 private:
  enum class Mode { Empty, Typed, Raw };
  void emit(std::string_view s) { sink_.arguments(index_, s); }

  ReplySink& sink_;
  size_t index_;
  Mode mode_ = Mode::Empty;
  bool streams_string_ = false;  // the open argument is written as a JSON string as it comes
  std::string held_;             // the open non-string argument's body, <= kMaxHeldValueBytes
};

}  // namespace waste::reply
