// The one writer of a reply: every piece of reasoning, content and tool call goes to the reply
// and to the pending delta together, so the streaming invariant (the deltas concatenated equal
// the reply) holds by construction, whatever a format parser does.
#pragma once
#include <string>
#include <string_view>

#include "shared/reply/reply_parser.h"

namespace waste::reply {

class ReplySink {
 public:
  void reasoning(std::string_view s);
  void content(std::string_view s);
  // Starts tool call number calls() (its first delta carries id and name); returns its index.
  size_t begin_call(std::string id, std::string name);
  // Appends to the arguments of call `index` (< calls()).
  void arguments(size_t index, std::string_view s);

  size_t calls() const { return reply_.tool_calls.size(); }
  const Reply& reply() const { return reply_; }
  // The delta since the last take().
  ReplyDelta take();

 private:
  Reply reply_;
  ReplyDelta delta_;
};

}  // namespace waste::reply
