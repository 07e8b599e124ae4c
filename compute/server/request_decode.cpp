#include "compute/server/request_decode.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "shared/image/data_url.h"
#include "shared/image/image_budget.h"
#include "shared/util/error.h"

namespace waste::server {

void add_image(std::vector<RequestImage>& out, uint64_t& total, std::vector<uint8_t> bytes, std::string field) {
  if (out.size() >= size_t(kMaxImagesPerRequest)) throw chat::RequestError(field, "more than " + std::to_string(kMaxImagesPerRequest) + " images in one request");
  total += bytes.size();
  if (total > kMaxImageBytesPerRequest)
    throw chat::RequestError(field, "the request's images are more than " + std::to_string(kMaxImageBytesPerRequest >> 20) + " MiB together");
  out.push_back({std::move(bytes), std::move(field)});
}

std::vector<uint8_t> bytes_of(capnp::Data::Reader d) { return {d.begin(), d.end()}; }

std::string str(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

std::vector<RequestImage> chat_images(capnp::List<proto::ChatMessage>::Reader msgs) {
  std::vector<RequestImage> out;
  uint64_t total = 0;
  for (uint32_t i = 0; i < msgs.size(); ++i) {
    auto parts = msgs[i].getParts();
    for (uint32_t k = 0; k < parts.size(); ++k) {
      std::string field = "messages[" + std::to_string(i) + "].content[" + std::to_string(k) + "]";
      if (!parts[k].getImage()) {
        if (parts[k].hasData()) throw chat::RequestError(field, "a text part carries image data");
        continue;
      }
      // Each blob read once: Cap'n Proto counts every read against the message's traversal
      // limit (chat_request_of does not read an image part's text).
      const capnp::Data::Reader data = parts[k].getData();
      const capnp::Text::Reader text = parts[k].getText();
      if (data.size() > 0 && text.size() > 0)
        throw chat::RequestError(field, "an image part gives both the file's bytes and a URL: give one");
      std::vector<uint8_t> bytes = data.size() > 0 ? bytes_of(data)
                                                   : decode_image_data_url(std::string_view(text.begin(), text.size()),
                                                                           field + ".image_url", kMaxImageBytesPerRequest);
      add_image(out, total, std::move(bytes), std::move(field));
    }
  }
  return out;
}

chat::Json json_field(capnp::Text::Reader t, const std::string& where) {
  if (t.size() == 0) return nullptr;
  chat::Json j = chat::Json::parse(std::string_view(t.cStr(), t.size()), nullptr, false);
  if (j.is_discarded()) throw chat::RequestError(where, "is not valid JSON");
  chat::check_json_depth(j, where);
  return j;
}

chat::ChatRequest chat_request_of(capnp::List<proto::ChatMessage>::Reader msgs, proto::ChatOptions::Reader o) {
  chat::ChatRequest r;
  for (auto m : msgs) {
    chat::Message msg;
    msg.role = str(m.getRole());
    if (msg.role == "developer") msg.role = "system";
    require(msg.role == "system" || msg.role == "user" || msg.role == "assistant" || msg.role == "tool",
            "chat: unknown role '" + msg.role + "' (expected system, user, assistant or tool)");
    if (m.getParts().size() > 0) {
      // An image part's reference is read by chat_images (the renderer needs only its place).
      for (auto part : m.getParts())
        msg.content.push_back(part.getImage() ? chat::ContentPart{chat::ContentPart::Kind::Image, "", {}}
                                              : chat::ContentPart{chat::ContentPart::Kind::Text, str(part.getText()), {}});
    } else if (m.getContent().size() > 0) {
      msg.content.push_back({chat::ContentPart::Kind::Text, str(m.getContent()), {}});
    }
    msg.name = str(m.getName());
    msg.reasoning = str(m.getReasoning());
    for (auto tc : m.getToolCalls()) {
      chat::ToolCall call;
      if (tc.getHasId()) call.id = str(tc.getId());
      call.name = str(tc.getName());
      call.arguments = str(tc.getArguments());
      msg.tool_calls.push_back(std::move(call));
    }
    if (m.getHasToolCallId()) msg.tool_call_id = str(m.getToolCallId());
    if (m.getHasTool()) msg.tool = str(m.getTool());
    msg.tools = json_field(m.getToolsJson(), "messages.tools");
    r.messages.push_back(std::move(msg));
  }
  r.tools = json_field(o.getToolsJson(), "tools");
  const std::string choice = str(o.getToolChoice());
  r.tool_choice.given = !choice.empty();
  if (choice == "none") r.tool_choice.mode = chat::ToolChoice::Mode::None;
  else if (choice == "required") r.tool_choice.mode = chat::ToolChoice::Mode::Required;
  else if (choice.rfind("function:", 0) == 0) {
    r.tool_choice.mode = chat::ToolChoice::Mode::Named;
    r.tool_choice.name = choice.substr(9);
  } else require(choice.empty() || choice == "auto", "tool_choice: unknown value '" + choice + "'");
  const std::string rf = str(o.getResponseFormat());
  if (rf == "json_object") r.response_format.type = chat::ResponseFormat::Type::JsonObject;
  else if (rf == "json_schema") {
    r.response_format.type = chat::ResponseFormat::Type::JsonSchema;
    r.response_format.schema = json_field(o.getSchemaJson(), "response_format.json_schema.schema");
  } else require(rf.empty() || rf == "text", "response_format: unknown type '" + rf + "'");
  r.thinking = o.getThinking();
  r.thinking_given = o.getThinkingGiven();
  r.thinking_effort = str(o.getThinkingEffort());
  r.add_generation_prompt = o.getAddGenerationPrompt();
  return r;
}

SamplingParams sampling_of(proto::GenerateRequest::Reader r) {
  SamplingParams p;
  p.temperature = r.getTemperature();
  p.top_p = r.getTopP();
  p.top_k = int(std::min<uint32_t>(r.getTopK(), 1u << 20));
  p.min_p = r.getMinP();
  p.repetition_penalty = r.getRepetitionPenalty();
  p.seed = r.getSeed();
  p.presence_penalty = r.getPresencePenalty();
  p.frequency_penalty = r.getFrequencyPenalty();
  require(std::isfinite(p.presence_penalty) && p.presence_penalty >= -2 && p.presence_penalty <= 2,
          "presence_penalty must be from -2 to 2");
  require(std::isfinite(p.frequency_penalty) && p.frequency_penalty >= -2 && p.frequency_penalty <= 2,
          "frequency_penalty must be from -2 to 2");
  p.max_tokens = int(std::min<uint32_t>(r.getMaxTokens(), 1u << 24));
  require(std::isfinite(p.temperature) && p.temperature >= 0 && p.temperature <= 100,
          "temperature must be a number from 0 to 100");
  require(std::isfinite(p.top_p) && p.top_p > 0 && p.top_p <= 1, "top_p must be in (0, 1]");
  require(std::isfinite(p.min_p) && p.min_p >= 0 && p.min_p < 1, "min_p must be in [0, 1)");
  require(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0 && p.repetition_penalty <= 100,
          "repetition_penalty must be in (0, 100]");
  auto stops = r.getStop();
  require(stops.size() <= kMaxStopStrings, "at most " + std::to_string(kMaxStopStrings) + " stop strings");
  for (auto s : stops) {
    require(s.size() > 0 && s.size() <= kMaxStopBytes,
            "a stop string must have 1 to " + std::to_string(kMaxStopBytes) + " bytes");
    p.stop.emplace_back(s.cStr(), s.size());
  }
  return p;
}

}  // namespace waste::server
