#include "shared/reply/reply_sink.h"

#include <utility>

namespace waste::reply {

void ReplySink::reasoning(std::string_view s) {
  reply_.reasoning += s;
  delta_.reasoning += s;
}

void ReplySink::content(std::string_view s) {
  reply_.content += s;
  delta_.content += s;
}

size_t ReplySink::begin_call(std::string id, std::string name) {
  const size_t index = reply_.tool_calls.size();
  reply_.tool_calls.push_back({id, name, ""});
  ToolCallDelta d;
  d.index = index;
  d.id = std::move(id);
  d.name = std::move(name);
  delta_.tool_calls.push_back(std::move(d));
  return index;
}

void ReplySink::arguments(size_t index, std::string_view s) {
  if (s.empty() || index >= reply_.tool_calls.size()) return;
  reply_.tool_calls[index].arguments += s;
  // Pieces of the same call within one delta are merged into one ToolCallDelta.
  if (!delta_.tool_calls.empty() && delta_.tool_calls.back().index == index) {
    delta_.tool_calls.back().arguments += s;
  } else {
    ToolCallDelta d;
    d.index = index;
    d.arguments = std::string(s);
    delta_.tool_calls.push_back(std::move(d));
  }
}

ReplyDelta ReplySink::take() { return std::exchange(delta_, ReplyDelta{}); }

}  // namespace waste::reply
