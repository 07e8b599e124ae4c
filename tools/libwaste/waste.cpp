// libwaste's C API over the C++ client (engine_client.h), the chat renderer (shared/chat/) and
// the memory planner (shared/plan/): exceptions never cross into C.
#include "tools/libwaste/waste.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "shared/chat/render.h"
#include "shared/container/reader.h"
#include "shared/model/tensors.h"
#include "shared/plan/container_plan.h"
#include "shared/plan/memory_plan.h"
#include "shared/platform/memory.h"
#include "shared/tokenizer/tokenizer.h"
#include "shared/util/error.h"
#include "tools/libwaste/engine_client.h"

struct waste_client {
  waste::client::Client c;
  explicit waste_client(const std::string& w) : c(w) {}
};
struct waste_session {
  std::unique_ptr<waste::client::Session> s;
};
struct waste_tokenizer {
  waste::tok::Tokenizer t;
};

namespace {

using waste::Error;
using waste::ErrorKind;
using waste::chat::Json;

thread_local std::string g_error;
thread_local std::string g_field;

// A C argument at fault, named as the header names it (messages[2].tool_calls[0].name).
class ArgumentError : public Error {
 public:
  ArgumentError(std::string field, const std::string& message) : Error(field + ": " + message), field(std::move(field)) {}
  std::string field;
};

[[noreturn]] void bad(const std::string& field, const std::string& message) { throw ArgumentError(field, message); }

std::string c_field_name(const std::string& param);

// The field compute names when it refuses one (a relayed Error's param, rpc_call), as the C
// structs name it; "" when none. An Unavailable error's param names a process, not a field.
std::string compute_field(const Error& e) {
  if (!e.relayed() || e.kind() == ErrorKind::Unavailable || e.param().empty()) return "";
  return c_field_name(e.param());
}

// Compute itself is gone: the connection to it failed here (rpc_call's Unavailable, not one
// compute relayed such as "iod unavailable"), other than by a deadline (a stopped compute may
// come back). From the error's kind and flags, never its text.
bool compute_gone(const Error& e) { return e.kind() == ErrorKind::Unavailable && !e.relayed() && !e.unanswered(); }

// The message of the current exception into g_error / g_field; returns its status.
waste_status record_current_exception() {
  try {
    throw;
  } catch (const ArgumentError& e) {
    g_error = e.what();
    g_field = e.field;
    return WASTE_ERROR_ARGUMENT;
  } catch (const waste::chat::RequestError& e) {
    g_error = e.what();
    g_field = e.param;
    return WASTE_ERROR_ARGUMENT;
  } catch (const std::bad_alloc&) {
    g_error = "out of memory";
    return WASTE_ERROR_NO_MEMORY;
  } catch (const Error& e) {
    g_error = e.what();
    g_field = compute_field(e);
    return compute_gone(e) ? WASTE_ERROR_DISCONNECTED : WASTE_ERROR;
  } catch (const std::exception& e) {
    g_error = e.what();
    return WASTE_ERROR;
  } catch (...) {
    g_error = "unknown error";
    return WASTE_ERROR;
  }
}

void clear_error() {
  g_error.clear();
  g_field.clear();
}

// The first API: its own error values (NULL, -1).
template <typename F>
auto guarded(F&& f, decltype(f()) on_error) -> decltype(f()) {
  try {
    clear_error();
    return f();
  } catch (...) {
    record_current_exception();
  }
  return on_error;
}

// Everything later: a waste_status.
template <typename F>
waste_status status_of(F&& f) {
  try {
    clear_error();
    f();
    return WASTE_OK;
  } catch (...) {
    return record_current_exception();
  }
}

void need(const void* p, const char* field) {
  if (!p) bad(field, "must not be NULL");
}

// Text into (buf, cap) NUL-terminated and truncated; *len = the full length.
void copy_out(const std::string& text, char* buf, size_t cap, size_t* len) {
  if (cap > 0) {
    need(buf, "buf");
    const size_t n = std::min(cap - 1, text.size());
    std::memcpy(buf, text.data(), n);
    buf[n] = 0;
  }
  if (len) *len = text.size();
}

template <typename Id>
void copy_ids(const std::vector<Id>& v, int32_t* ids, size_t cap, size_t* n) {
  if (cap > 0) need(ids, "ids");
  for (size_t i = 0; i < v.size() && i < cap; ++i) ids[i] = int32_t(v[i]);
  if (n) *n = v.size();
}

void fill_result(const waste::client::Result& res, waste_result* out) {
  std::memset(out, 0, sizeof(*out));
  out->prompt_tokens = res.prompt_tokens;
  out->cached_tokens = res.cached_tokens;
  out->image_tokens = res.image_tokens;
  out->image_seconds = res.image_seconds;
  out->tokens = res.tokens;
  out->prefill_seconds = res.prefill_seconds;
  out->decode_seconds = res.decode_seconds;
  out->tok_per_s = res.tok_per_s;
  out->hits = res.experts.hits;
  out->misses = res.experts.misses;
  out->bytes_read = res.experts.bytes_read;
  std::strncpy(out->stop_reason, res.stop_reason.c_str(), sizeof(out->stop_reason) - 1);
}

// ---- waste_request -> the chat request ------------------------------------------------------
// The C structs are written as the JSON of a chat request and read by parse_chat_request, the
// parser of the HTTP body: one set of checks (roles, fields per role, tools, tool_choice,
// response_format, thinking), whose errors name the field. The JSON keys are the C fields' names
// where the parser accepts them (reasoning, tool_calls[].name), so its errors name those.

Json parse_json_field(const char* text, const std::string& field) {
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded()) bad(field, "is not valid JSON");
  return j;
}

// An image part given as its file: where it is, to be put into the parsed request (the JSON
// carries an empty URL in its place; bytes have no JSON form short of base64, which compute
// would only decode again).
struct ImageFile {
  size_t message = 0, part = 0;
  const waste_content_part* p = nullptr;
};

// One image part: a data: URL in text, or the file at (data, size); exactly one of them.
Json image_part_json(const waste_content_part& p, const std::string& pw, bool& is_file) {
  if (p.text && p.data) bad(pw + ".data", "give text (a data: URL) or data (the file), not both");
  if (!p.text && !p.data) bad(pw + ".data", "an image part needs data (the file) or text (a data: URL)");
  if (p.data && p.size == 0) bad(pw + ".size", "the image file is empty");
  is_file = p.data != nullptr;
  return {{"type", "image_url"}, {"image_url", {{"url", is_file ? "" : p.text}}}};
}

Json content_json(const waste_message& m, const std::string& w, size_t message, std::vector<ImageFile>& files) {
  if (m.n_parts == 0) return m.content ? Json(m.content) : Json(nullptr);
  if (m.content) bad(w + ".parts", "give content or parts, not both");
  need(m.parts, (w + ".parts").c_str());
  Json parts = Json::array();
  for (size_t k = 0; k < m.n_parts; ++k) {
    const std::string pw = w + ".parts[" + std::to_string(k) + "]";
    const waste_content_part& p = m.parts[k];
    if (p.kind == WASTE_PART_TEXT) {
      if (!p.text) bad(pw + ".text", "must not be NULL");
      if (p.data || p.size) bad(pw + ".data", "a text part has no data");
      parts.push_back({{"type", "text"}, {"text", p.text}});
    } else if (p.kind == WASTE_PART_IMAGE) {
      bool is_file = false;
      parts.push_back(image_part_json(p, pw, is_file));
      if (is_file) files.push_back({message, k, &p});
    } else {
      bad(pw + ".kind", "must be WASTE_PART_TEXT or WASTE_PART_IMAGE");
    }
  }
  return parts;
}

// The image files into the parsed request, at the parts the JSON left empty for them.
void attach_image_files(waste::chat::ChatRequest& c, const std::vector<ImageFile>& files) {
  for (const ImageFile& f : files) {
    waste::require(f.message < c.messages.size() && f.part < c.messages[f.message].content.size() &&
                       c.messages[f.message].content[f.part].kind == waste::chat::ContentPart::Kind::Image,
                   "libwaste: the parsed request lost an image part");  // the parser keeps parts 1:1
    const auto* b = static_cast<const uint8_t*>(f.p->data);
    c.messages[f.message].content[f.part].data.assign(b, b + f.p->size);
  }
}

Json tool_calls_json(const waste_message& m, const std::string& w) {
  need(m.tool_calls, (w + ".tool_calls").c_str());
  Json calls = Json::array();
  for (size_t k = 0; k < m.n_tool_calls; ++k) {
    const waste_tool_call& c = m.tool_calls[k];
    if (!c.name) bad(w + ".tool_calls[" + std::to_string(k) + "].name", "is required");
    // The un-nested form (K3's encoder accepts it): errors then name tool_calls[k].name.
    Json call = {{"name", c.name}};
    if (c.id) call["id"] = c.id;
    if (c.arguments && *c.arguments) call["arguments"] = c.arguments;
    calls.push_back(std::move(call));
  }
  return calls;
}

Json message_json(const waste_message& m, const std::string& w, size_t index, std::vector<ImageFile>& files) {
  if (!m.role) bad(w + ".role", "is required");
  Json j = {{"role", m.role}};
  Json content = content_json(m, w, index, files);
  if (!content.is_null()) j["content"] = std::move(content);
  // A field is written only when set, so that the parser refuses it for a role without it.
  if (m.name) j["name"] = m.name;
  if (m.reasoning) j["reasoning"] = m.reasoning;
  if (m.n_tool_calls > 0) j["tool_calls"] = tool_calls_json(m, w);
  if (m.tool_call_id) j["tool_call_id"] = m.tool_call_id;
  if (m.tools_json) j["tools"] = parse_json_field(m.tools_json, w + ".tools_json");
  return j;
}

Json thinking_json(waste_thinking t) {
  switch (t) {
    case WASTE_THINKING_ON: return true;
    case WASTE_THINKING_OFF: return false;
    case WASTE_THINKING_DEFAULT: return nullptr;
  }
  bad("thinking", "must be WASTE_THINKING_DEFAULT, WASTE_THINKING_ON or WASTE_THINKING_OFF");
}

// "auto" / "none" / "required" as they are; "function:NAME" as OpenAI's object.
Json tool_choice_json(const std::string& c) {
  if (c == "auto" || c == "none" || c == "required") return c;
  if (c.rfind("function:", 0) == 0 && c.size() > 9)
    return {{"type", "function"}, {"function", {{"name", c.substr(9)}}}};
  bad("tool_choice", "must be \"auto\", \"none\", \"required\" or \"function:NAME\" (got \"" + c + "\")");
}

// A field of the request's JSON as the C structs name it: the fields that carry JSON text are
// tools_json and response_format_json there (the rest have the same names).
std::string c_field_name(const std::string& param) {
  auto renamed = [&](const std::string& json_name, const std::string& c_name, size_t at) -> std::optional<std::string> {
    if (param.compare(at, json_name.size(), json_name) != 0) return std::nullopt;
    const size_t end = at + json_name.size();
    if (end < param.size() && param[end] != '.' && param[end] != '[') return std::nullopt;
    return param.substr(0, at) + c_name + param.substr(end);
  };
  if (auto f = renamed("tools", "tools_json", 0)) return *f;
  if (auto f = renamed("response_format", "response_format_json", 0)) return *f;
  // messages[N].tools, messages[N].content[K] (a part: parts[K] in the C struct)
  if (param.rfind("messages[", 0) == 0) {
    const size_t close = param.find("].");
    if (close != std::string::npos) {
      if (auto f = renamed("tools", "tools_json", close + 2)) return *f;
      if (param.compare(close + 2, 8, "content[") == 0) return param.substr(0, close + 2) + "parts" + param.substr(close + 9);
    }
  }
  return param;
}

waste::chat::ChatRequest chat_request_of(const waste_request& r) {
  Json j = Json::object();
  Json messages = Json::array();
  need(r.messages, "messages");
  std::vector<ImageFile> files;
  for (size_t i = 0; i < r.n_messages; ++i)
    messages.push_back(message_json(r.messages[i], "messages[" + std::to_string(i) + "]", i, files));
  j["messages"] = std::move(messages);
  if (r.tools_json) j["tools"] = parse_json_field(r.tools_json, "tools_json");
  if (r.tool_choice) j["tool_choice"] = tool_choice_json(r.tool_choice);
  if (r.response_format_json) j["response_format"] = parse_json_field(r.response_format_json, "response_format_json");
  if (Json t = thinking_json(r.thinking); !t.is_null()) j["thinking"] = t;
  if (r.thinking_effort) j["thinking_effort"] = r.thinking_effort;
  j["add_generation_prompt"] = r.add_generation_prompt != 0;
  try {
    waste::chat::ChatRequest c = waste::chat::parse_chat_request(j);
    attach_image_files(c, files);
    return c;
  } catch (const waste::chat::RequestError& e) {
    const std::string what = e.what();  // "PARAM: message"
    throw ArgumentError(c_field_name(e.param), what.substr(std::min(what.size(), e.param.size() + 2)));
  }
}

enum class PromptKind { Chat, Text, Ids };

// The first chat field set to something else than its default, or nullptr.
const char* chat_field_given(const waste_request& r) {
  if (r.tools_json) return "tools_json";
  if (r.tool_choice) return "tool_choice";
  if (r.response_format_json) return "response_format_json";
  if (r.thinking != WASTE_THINKING_DEFAULT) return "thinking";
  if (r.thinking_effort) return "thinking_effort";
  if (r.add_generation_prompt == 0) return "add_generation_prompt";
  return nullptr;
}

// Exactly one prompt, and the chat fields only with a chat (a text or ids prompt would ignore
// them: refused rather than silently dropped).
PromptKind prompt_kind(const waste_request& r) {
  const bool chat = r.messages || r.n_messages > 0, text = r.text != nullptr, ids = r.ids || r.n_ids > 0;
  if (int(chat) + int(text) + int(ids) != 1)
    bad("messages", "give exactly one prompt: messages (a chat), text or ids");
  if (!chat)
    if (const char* f = chat_field_given(r)) bad(f, "is a chat field: it needs messages");
  if (chat && r.n_messages == 0) bad("n_messages", "a chat needs at least one message");
  if (ids) need(r.ids, "ids");
  if (ids && r.n_ids == 0) bad("n_ids", "the prompt needs at least one id");
  // A chat's images are in its parts, and a text prompt has no placeholder ids to take them.
  if (!ids && (r.images || r.n_images > 0)) bad("images", "images go with an ids prompt (a chat's are image parts)");
  return chat ? PromptKind::Chat : text ? PromptKind::Text : PromptKind::Ids;
}

// An ids prompt's image files, copied (the request may outlive the caller's buffers only here).
std::vector<std::vector<uint8_t>> images_of(const waste_request& r) {
  std::vector<std::vector<uint8_t>> out;
  if (r.n_images > 0) need(r.images, "images");
  for (size_t i = 0; i < r.n_images; ++i) {
    const std::string w = "images[" + std::to_string(i) + "]";
    if (!r.images[i].data) bad(w + ".data", "must not be NULL");
    if (r.images[i].size == 0) bad(w + ".size", "the image file is empty");
    const auto* b = static_cast<const uint8_t*>(r.images[i].data);
    out.emplace_back(b, b + r.images[i].size);
  }
  return out;
}

void set_sampling(const waste_sampling& p, waste::client::Request& q) {
  q.max_tokens = p.max_tokens;
  q.temperature = p.temperature;
  q.top_p = p.top_p;
  q.top_k = p.top_k;
  q.min_p = p.min_p;
  q.repetition_penalty = p.repetition_penalty;
  q.presence_penalty = p.presence_penalty;
  q.frequency_penalty = p.frequency_penalty;
  q.seed = p.seed;
  if (p.n_stop > 0) need(p.stop, "sampling.stop");
  for (size_t i = 0; i < p.n_stop; ++i) {
    if (!p.stop[i]) bad("sampling.stop[" + std::to_string(i) + "]", "must not be NULL");
    q.stop.emplace_back(p.stop[i]);
  }
  // Ranges (top_p, penalties, top_logprobs <= 20) are checked by compute, which names them.
  if (!p.logprobs && p.top_logprobs > 0) bad("sampling.top_logprobs", "needs sampling.logprobs");
  q.logprobs = p.logprobs != 0;
  q.top_logprobs = p.top_logprobs;
}

waste::client::Request request_of(const waste_request& r) {
  waste::client::Request q;
  switch (prompt_kind(r)) {
    case PromptKind::Chat:
      q.kind = waste::client::Request::Kind::Chat;
      q.chat = chat_request_of(r);
      break;
    case PromptKind::Text:
      q.kind = waste::client::Request::Kind::Text;
      q.text = r.text;
      break;
    case PromptKind::Ids:
      q.kind = waste::client::Request::Kind::Tokens;
      q.tokens.assign(r.ids, r.ids + r.n_ids);
      q.images = images_of(r);
      break;
  }
  q.image_patches = r.image_patches;  // compute checks the range (and names image_patches)
  set_sampling(r.sampling, q);
  return q;
}

// ---- events and the reply ------------------------------------------------------------------

// One TokenEvent as a waste_event; owns the NUL-terminated copies the pointers point into.
struct EventView {
  std::string content, reasoning, token;
  std::vector<waste_tool_call_delta> calls;
  std::vector<waste_logprob> top;
  waste_event ev{};

  explicit EventView(const waste::client::TokenEvent& e) : content(e.text), reasoning(e.reasoning), token(e.token) {
    for (const auto& d : e.tool_calls)
      calls.push_back({d.index, d.id.c_str(), d.name.c_str(), d.arguments.c_str(), d.arguments.size()});
    for (const auto& t : e.top) top.push_back({t.id, t.bytes.data(), t.bytes.size(), t.logprob});
    ev.id = e.id;
    ev.content = content.c_str();
    ev.content_len = content.size();
    ev.reasoning = reasoning.c_str();
    ev.reasoning_len = reasoning.size();
    ev.tool_calls = calls.empty() ? nullptr : calls.data();
    ev.n_tool_calls = calls.size();
    ev.has_logprob = e.has_logprob;
    if (e.has_logprob) ev.token = {e.id, token.c_str(), token.size(), e.logprob};
    ev.top = top.empty() ? nullptr : top.data();
    ev.n_top = top.size();
  }
};

// The events' pieces joined (what compute's parser reply() holds: the deltas add up to it).
struct ReplyText {
  std::string reasoning, content;
  std::vector<waste::reply::ToolCall> calls;
  void add(const waste::client::TokenEvent& e) {
    reasoning += e.reasoning;
    content += e.text;
    for (const auto& d : e.tool_calls) {
      // A call's first delta names it (index == calls so far); later ones extend its arguments.
      if (d.index == calls.size()) calls.push_back({d.id, d.name, ""});
      if (d.index < calls.size()) calls[d.index].arguments += d.arguments;
    }
  }
};

char* malloc_copy(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (!p) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = 0;
  return p;
}

const char* finish_reason(const waste::client::Result& r) {
  // As waste-serve's OpenAI responses (tools/serve/openai.cpp).
  if (r.stop_reason == "max_tokens" || r.stop_reason == "context") return "length";
  if (r.tool_calls > 0) return "tool_calls";
  return "stop";
}

// malloc'd, so that waste_reply_free can free a half-built one.
waste_reply* make_reply(const ReplyText& t, const waste::client::Result& res) {
  auto* r = static_cast<waste_reply*>(std::calloc(1, sizeof(waste_reply)));
  if (!r) throw std::bad_alloc();
  try {
    r->reasoning = malloc_copy(t.reasoning);
    r->reasoning_len = t.reasoning.size();
    r->content = malloc_copy(t.content);
    r->content_len = t.content.size();
    if (!t.calls.empty()) {
      r->tool_calls = static_cast<waste_reply_tool_call*>(std::calloc(t.calls.size(), sizeof(waste_reply_tool_call)));
      if (!r->tool_calls) throw std::bad_alloc();
      for (const auto& c : t.calls) {
        waste_reply_tool_call& o = r->tool_calls[r->n_tool_calls++];
        o.id = malloc_copy(c.id);
        o.name = malloc_copy(c.name);
        o.arguments = malloc_copy(c.arguments);
      }
    }
    std::strncpy(r->finish_reason, finish_reason(res), sizeof(r->finish_reason) - 1);
    fill_result(res, &r->result);
  } catch (...) {
    waste_reply_free(r);
    throw;
  }
  return r;
}

waste_session& session_of(waste_session* s) {
  need(s, "session");
  need(s->s.get(), "session");
  return *s;
}

std::string absolute_path(const char* path) {
  need(path, "path");
  if (path[0] != '/') bad("path", "must be absolute (it names a file on the compute host): \"" + std::string(path) + "\"");
  return path;
}

// ---- the memory plan -----------------------------------------------------------------------

// As `waste plan MODEL_DIR`: the same inputs read off the container.
waste::plan::PlanRequest plan_request(const std::string& dir) { return waste::plan::plan_request_of_container(dir); }

void fill_plan(const waste::plan::MemoryPlan& p, waste_plan* out) {
  std::memset(out, 0, sizeof(*out));
  out->trunk_bytes = p.trunk;
  out->session_state_bytes = p.session_state;
  out->scratch_bytes = p.scratch;
  out->experts_in_flight_bytes = p.experts_in_flight;
  out->floor_bytes = p.floor;
  out->record_stride = p.record_stride;
  out->working_set_records = p.working_set_records;
  out->working_set_bytes = p.working_set_bytes;
  out->cache_bytes = p.cache;
  out->total_bytes = p.total;
  out->slots = p.slots;
  out->cache_working_sets = p.cache_working_sets;
  out->budget_limit_bytes = p.budget_limit;
  out->auto_budget = p.auto_budget;
  out->usable_bytes = p.memory.usable;
  out->physical_bytes = p.memory.physical;
  out->fits = p.fits;
}

nlohmann::json info_json(const waste::client::Info& i) {
  return {{"model", i.model},
          {"family", i.family},
          {"chat_format", i.chat_format},
          {"expert_path", i.expert_path},
          {"layers", i.layers},
          {"hidden", i.hidden},
          {"vocab", i.vocab},
          {"routed_experts", i.routed_experts},
          {"top_k", i.top_k},
          {"default_context", i.default_context},
          {"max_context", i.max_context},
          {"max_sessions", i.max_sessions},
          {"max_queued", i.max_queued},
          {"budget_bytes", i.budget_bytes},
          {"trunk_bytes", i.trunk_bytes},
          {"has_tokenizer", i.has_tokenizer},
          {"vision", i.vision},
          {"image_patches", i.image_patches}};
}

}  // namespace

extern "C" {

const char* waste_last_error(void) { return g_error.c_str(); }
const char* waste_last_error_field(void) { return g_field.c_str(); }

// ==== The first API ============================================================================

waste_client* waste_connect(const char* where) {
  return guarded([&] { return new waste_client(where ? where : waste::client::default_run_dir()); },
                 static_cast<waste_client*>(nullptr));
}

void waste_disconnect(waste_client* c) {
  try {
    delete c;
  } catch (...) {
  }
}

waste_session* waste_open_session(waste_client* c, uint32_t context) {
  return guarded(
      [&] {
        need(c, "client");
        return new waste_session{c->c.open_session(context)};
      },
      static_cast<waste_session*>(nullptr));
}

void waste_close_session(waste_session* s) {
  if (!s) return;
  try {
    delete s;
  } catch (...) {
  }
}

void waste_default_params(waste_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof(*p));
  p->max_tokens = 256;
  p->top_p = 1.0f;
}

int waste_generate(waste_session* s, const char* prompt, int chat, const waste_params* p, waste_token_fn on_token,
                   void* user, waste_result* out) {
  return guarded(
      [&] {
        waste_session& ss = session_of(s);
        need(prompt, "prompt");
        waste::client::Request r;
        if (chat) {
          r.set_chat({{"user", prompt}});
        } else {
          r.text = prompt;
        }
        waste_params d;
        waste_default_params(&d);
        if (!p) p = &d;
        r.max_tokens = p->max_tokens;
        r.temperature = p->temperature;
        r.top_p = p->top_p;
        r.top_k = p->top_k;
        r.seed = p->seed;
        if (p->n_stop > 0) need(p->stop, "stop");
        for (size_t i = 0; i < p->n_stop; ++i) {
          if (!p->stop[i]) bad("stop[" + std::to_string(i) + "]", "must not be NULL");
          r.stop.emplace_back(p->stop[i]);
        }
        auto res = ss.s->generate(r, [&](int32_t id, std::string_view t) {
          return on_token ? on_token(user, id, t.data(), t.size()) != 0 : true;
        });
        if (out) fill_result(res, out);
        return 0;
      },
      -1);
}

int waste_tokenize(waste_session* s, const char* text, int32_t* ids, size_t cap, size_t* n) {
  return guarded(
      [&] {
        waste_session& ss = session_of(s);
        need(text, "text");
        copy_ids(ss.s->tokenize(text), ids, cap, n);
        return 0;
      },
      -1);
}

int waste_reset(waste_session* s) {
  return guarded(
      [&] {
        session_of(s).s->reset();
        return 0;
      },
      -1);
}

long waste_stats_json(waste_client* c, char* buf, size_t cap) {
  return guarded(
      [&] {
        need(c, "client");
        const std::string j = c->c.stats().dump();
        copy_out(j, buf, cap, nullptr);
        return long(j.size());
      },
      -1L);
}

// ==== Chat requests and replies ================================================================

void waste_default_request(waste_request* r) {
  if (!r) return;
  std::memset(r, 0, sizeof(*r));
  r->thinking = WASTE_THINKING_DEFAULT;
  r->add_generation_prompt = 1;
  r->sampling.max_tokens = 256;
  r->sampling.top_p = 1.0f;
  r->sampling.repetition_penalty = 1.0f;
}

waste_status waste_generate_request(waste_session* s, const waste_request* r, waste_event_fn on_event, void* user,
                                    waste_reply** reply) {
  if (reply) *reply = nullptr;
  return status_of([&] {
    waste_session& ss = session_of(s);
    need(r, "request");
    const waste::client::Request q = request_of(*r);
    ReplyText text;
    // An exception inside the callback would reach the RPC's sink, which takes it for "stop":
    // it is kept and rethrown here instead, so it is reported, not mistaken for a cancel.
    std::exception_ptr failed;
    const waste::client::Result res = ss.s->generate_events(q, [&](const waste::client::TokenEvent& e) {
      try {
        text.add(e);
        if (!on_event) return true;
        const EventView v(e);
        return on_event(user, &v.ev) != 0;
      } catch (...) {
        failed = std::current_exception();
        return false;
      }
    });
    if (failed) std::rethrow_exception(failed);
    if (reply) *reply = make_reply(text, res);
  });
}

void waste_reply_free(waste_reply* r) {
  if (!r) return;
  std::free(r->reasoning);
  std::free(r->content);
  for (size_t i = 0; i < r->n_tool_calls; ++i) {
    std::free(r->tool_calls[i].id);
    std::free(r->tool_calls[i].name);
    std::free(r->tool_calls[i].arguments);
  }
  std::free(r->tool_calls);
  std::free(r);
}

// ==== More of the session ======================================================================

waste_status waste_detokenize(waste_session* s, const int32_t* ids, size_t n, char* buf, size_t cap, size_t* len) {
  return status_of([&] {
    waste_session& ss = session_of(s);
    if (n > 0) need(ids, "ids");
    copy_out(ss.s->detokenize(std::vector<int32_t>(ids, ids + n)), buf, cap, len);
  });
}

waste_status waste_save(waste_session* s, const char* path, uint64_t* tokens) {
  return status_of([&] {
    waste_session& ss = session_of(s);
    const uint64_t n = ss.s->save(absolute_path(path)).tokens;
    if (tokens) *tokens = n;
  });
}

waste_status waste_load(waste_session* s, const char* path, uint64_t* tokens) {
  return status_of([&] {
    waste_session& ss = session_of(s);
    const uint64_t n = ss.s->load(absolute_path(path)).tokens;
    if (tokens) *tokens = n;
  });
}

waste_status waste_eval(waste_session* s, const int32_t* ids, size_t n, int stepwise, float** logits_out,
                        uint32_t* vocab_out) {
  if (logits_out) *logits_out = nullptr;
  return status_of([&] {
    waste_session& ss = session_of(s);
    need(logits_out, "logits_out");
    if (n == 0) bad("n", "eval needs at least one id");
    need(ids, "ids");
    uint32_t vocab = 0;
    const std::vector<float> v = ss.s->eval(std::vector<int32_t>(ids, ids + n), stepwise != 0, &vocab);
    // malloc'd (a C caller's free-able memory), freed by waste_logits_free.
    auto* p = static_cast<float*>(std::malloc(std::max<size_t>(1, v.size()) * sizeof(float)));
    if (!p) throw std::bad_alloc();
    std::memcpy(p, v.data(), v.size() * sizeof(float));
    *logits_out = p;
    if (vocab_out) *vocab_out = vocab;
  });
}

void waste_logits_free(float* logits) { std::free(logits); }

waste_status waste_session_stats_json(waste_session* s, char* buf, size_t cap, size_t* len) {
  return status_of([&] { copy_out(session_of(s).s->stats().dump(), buf, cap, len); });
}

waste_status waste_info_json(waste_client* c, char* buf, size_t cap, size_t* len) {
  return status_of([&] {
    need(c, "client");
    copy_out(info_json(c->c.info()).dump(), buf, cap, len);
  });
}

// ==== Locally, from a container directory =======================================================

waste_status waste_tokenizer_open(const char* container_dir, waste_tokenizer** out) {
  if (out) *out = nullptr;
  return status_of([&] {
    need(container_dir, "container_dir");
    need(out, "out");
    const waste::Container c = waste::Container::open(container_dir);
    waste::require(!c.tokenizer_path().empty(), std::string(container_dir) + ": the container has no tokenizer");
    waste::require(!c.tokenizer_config_path().empty(),
                   std::string(container_dir) + ": has tokenizer.model but no tokenizer_config.json");
    *out = new waste_tokenizer{waste::tok::Tokenizer::load(c.tokenizer_path(), c.tokenizer_config_path())};
  });
}

void waste_tokenizer_close(waste_tokenizer* t) { delete t; }

waste_status waste_tokenizer_encode(const waste_tokenizer* t, const char* text, int32_t* ids, size_t cap, size_t* n) {
  return status_of([&] {
    need(t, "tokenizer");
    need(text, "text");
    copy_ids(t->t.encode(text), ids, cap, n);
  });
}

waste_status waste_tokenizer_decode(const waste_tokenizer* t, const int32_t* ids, size_t n, char* buf, size_t cap,
                                    size_t* len) {
  return status_of([&] {
    need(t, "tokenizer");
    if (n > 0) need(ids, "ids");
    std::vector<uint32_t> v;
    for (size_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || uint32_t(ids[i]) >= t->t.vocab_size())
        bad("ids[" + std::to_string(i) + "]", std::to_string(ids[i]) + " has no token");
      v.push_back(uint32_t(ids[i]));
    }
    copy_out(t->t.decode(v), buf, cap, len);
  });
}

waste_status waste_tokenizer_render_chat(const waste_tokenizer* t, const waste_request* r, int continuation,
                                         int32_t* ids, size_t cap, size_t* n) {
  return status_of([&] {
    need(t, "tokenizer");
    need(r, "request");
    if (prompt_kind(*r) != PromptKind::Chat) bad("messages", "a chat prompt needs messages (not text or ids)");
    copy_ids(waste::chat::encode_prompt(t->t, chat_request_of(*r), continuation != 0), ids, cap, n);
  });
}

waste_status waste_plan_container(const char* container_dir, uint64_t context, uint32_t sessions,
                                  uint64_t budget_bytes, waste_plan* out) {
  return status_of([&] {
    need(container_dir, "container_dir");
    need(out, "out");
    waste::plan::PlanRequest req = plan_request(container_dir);
    req.context = context > 0 ? context : 8192;
    req.sessions = sessions > 0 ? sessions : 1;
    if (budget_bytes > 0) req.budget = budget_bytes;
    try {
      fill_plan(waste::plan::make_plan(req, waste::platform::usable_memory()), out);
    } catch (const Error& e) {
      // The one way a plan fails (memory_plan.h): a budget under the floor, which the caller gave.
      if (budget_bytes > 0) throw ArgumentError("budget_bytes", e.what());
      throw;
    }
  });
}

}  // extern "C"
