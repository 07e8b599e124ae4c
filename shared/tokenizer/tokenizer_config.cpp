#include "shared/tokenizer/tokenizer_config.h"

#include <nlohmann/json.hpp>

#include <set>

#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste::tok {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxConfigBytes = 1 << 20;
constexpr size_t kMaxSpecialTokens = 4096;
constexpr size_t kMaxSpecialNameBytes = 256;
constexpr size_t kMaxStopIds = 64;
constexpr uint32_t kMaxTokenId = 1u << 24;

// Release ids (MODELS.md section 5), before shifting to a vocabulary's base.
struct ReleaseSpecial {
  uint32_t id;
  const char* text;
};

constexpr ReleaseSpecial kKimiSpecials[] = {
    {163584, "[BOS]"},
    {163585, "[EOS]"},
    {163586, "<|im_end|>"},
    {163587, "<|im_user|>"},
    {163588, "<|im_assistant|>"},
    {163590, "<|start_header_id|>"},
    {163591, "<|end_header_id|>"},
    {163593, "[EOT]"},
    {163594, "<|im_system|>"},
    {163595, "<|tool_calls_section_begin|>"},
    {163596, "<|tool_calls_section_end|>"},
    {163597, "<|tool_call_begin|>"},
    {163598, "<|tool_call_argument_begin|>"},
    {163599, "<|tool_call_end|>"},
    {163601, "<|im_middle|>"},
    {163838, "[UNK]"},
    {163839, "[PAD]"},
};
// K2.5 / K2.6 additions; K2 releases treat these ids as reserved, naming them costs nothing
// (they never occur in K2 output) and lets one config serve the K2 line.
constexpr ReleaseSpecial kKimiK25Specials[] = {
    {163602, "<|media_begin|>"}, {163603, "<|media_content|>"}, {163604, "<|media_end|>"},
    {163605, "<|media_pad|>"},   {163606, "<think>"},           {163607, "</think>"},
};
// K3 [3rd-party, consistent across ports].
constexpr ReleaseSpecial kK3Specials[] = {
    {163584, "[BOS]"},
    {163585, "[EOS]"},
    {163586, "<|end_of_msg|>"},
    {163587, "<|open|>"},
    {163588, "<|close|>"},
    {163589, "<|sep|>"},
    {163590, "[start_header_id]"},
    {163591, "[end_header_id]"},
    {163593, "[EOT]"},
    {163602, "<|media_begin|>"},
    {163603, "<|media_content|>"},
    {163604, "<|media_end|>"},
    {163605, "<|media_pad|>"},
    {163649, "<osagent_mode>"},
    {163838, "[UNK]"},
    {163839, "[PAD]"},
};

const char* kKimiDefaultSystem = "You are Kimi, an AI assistant created by Moonshot AI.";

uint32_t read_id(const json& v, const std::string& where) {
  require(v.is_number_unsigned(), where + ": expected a non-negative integer token id");
  uint64_t id = v.get<uint64_t>();
  require(id < kMaxTokenId, where + ": token id " + std::to_string(id) + " too large");
  return static_cast<uint32_t>(id);
}

}  // namespace

ChatFormat parse_chat_format_name(std::string_view name, const std::string& what) {
  if (name == "none") return ChatFormat::None;
  if (name == "kimi") return ChatFormat::Kimi;
  if (name == "k3") return ChatFormat::K3;
  throw Error(what + ": unknown chat format '" + std::string(name) + "' (expected none, kimi or k3)");
}

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::None: return "none";
    case ChatFormat::Kimi: return "kimi";
    case ChatFormat::K3: return "k3";
  }
  return "?";
}

TokenizerFamily parse_tokenizer_family(std::string_view name, const std::string& what) {
  if (name == "kimi" || name == "k2" || name == "kimi-k2" || name == "kimi_k2") return TokenizerFamily::KimiK2;
  if (name == "kimi-linear" || name == "kimi_linear") return TokenizerFamily::KimiLinear;
  if (name == "k3" || name == "kimi-k3" || name == "kimi_k3") return TokenizerFamily::K3;
  throw Error(what + ": unknown tokenizer family '" + std::string(name) + "' (expected kimi, kimi-linear or k3)");
}

TokenizerConfig tokenizer_config_for(TokenizerFamily family, uint32_t n_base_tokens) {
  require(n_base_tokens >= 256 && n_base_tokens + kKimiReservedCount <= kMaxTokenId,
          "tokenizer config: base vocabulary of " + std::to_string(n_base_tokens) + " tokens out of range");
  TokenizerConfig c;
  c.pattern = Pattern::Kimi;
  c.reserved_begin = n_base_tokens;
  c.reserved_end = n_base_tokens + kKimiReservedCount;
  auto shift = [&](uint32_t release_id) { return release_id - kKimiBaseTokens + n_base_tokens; };
  auto add = [&](const ReleaseSpecial* b, const ReleaseSpecial* e) {
    for (; b != e; ++b) c.special_tokens.push_back({b->text, shift(b->id)});
  };
  c.bos_id = shift(163584);
  c.add_bos = false;  // the Kimi chat templates start with message markup, not [BOS]
  switch (family) {
    case TokenizerFamily::KimiK2:
      add(std::begin(kKimiSpecials), std::end(kKimiSpecials));
      add(std::begin(kKimiK25Specials), std::end(kKimiK25Specials));
      c.chat_format = ChatFormat::Kimi;
      c.default_system_message = kKimiDefaultSystem;
      c.stop_ids = {shift(163585), shift(163586)};
      break;
    case TokenizerFamily::KimiLinear:
      add(std::begin(kKimiSpecials), std::end(kKimiSpecials));
      c.chat_format = ChatFormat::Kimi;
      c.default_system_message = kKimiDefaultSystem;
      c.stop_ids = {shift(163586)};
      break;
    case TokenizerFamily::K3:
      add(std::begin(kK3Specials), std::end(kK3Specials));
      c.chat_format = ChatFormat::K3;
      c.stop_ids = {shift(163586)};
      break;
  }
  return c;
}

void write_tokenizer_config(const std::string& path, TokenizerFamily family, uint32_t n_base_tokens) {
  tokenizer_config_for(family, n_base_tokens).save(path);
}

std::string TokenizerConfig::to_json() const {
  json j;
  j["waste_tokenizer"] = kTokenizerConfigVersion;
  j["pattern"] = pattern_name(pattern);
  json specials = json::object();
  for (const SpecialToken& s : special_tokens) specials[s.text] = s.id;
  j["special_tokens"] = specials;
  j["reserved_tokens"] = {{"begin", reserved_begin}, {"end", reserved_end}};
  j["chat_format"] = chat_format_name(chat_format);
  j["default_system_message"] = default_system_message;
  j["stop_ids"] = stop_ids;
  j["bos_id"] = bos_id ? json(*bos_id) : json(nullptr);
  j["add_bos"] = add_bos;
  return j.dump(1) + "\n";
}

void TokenizerConfig::save(const std::string& path) const {
  const std::string text = to_json();
  write_file_atomic(path, text.data(), text.size());
}

TokenizerConfig TokenizerConfig::parse(std::string_view json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(source + ": not valid JSON: " + e.what());
  }
  require(root.is_object(), source + ": expected a JSON object");
  require(root.contains("waste_tokenizer"),
          source + ": no \"waste_tokenizer\" key (is this a Hugging Face tokenizer_config.json? WASTE needs its own, "
                   "see docs/TOKENIZER.md)");
  const json& ver = root["waste_tokenizer"];
  require(ver.is_number_integer() && ver.get<int64_t>() == kTokenizerConfigVersion,
          source + ": waste_tokenizer: unsupported version " + ver.dump() + " (this build reads " +
              std::to_string(kTokenizerConfigVersion) + ")");
  auto field = [&](const char* name) -> const json& {
    require(root.contains(name), source + ": missing field \"" + name + "\"");
    return root[name];
  };
  TokenizerConfig c;
  const json& pat = field("pattern");
  require(pat.is_string(), source + ": pattern: expected a string");
  c.pattern = parse_pattern_name(pat.get<std::string>(), source + ": pattern");

  const json& specials = field("special_tokens");
  require(specials.is_object(), source + ": special_tokens: expected an object of name -> id");
  require(specials.size() <= kMaxSpecialTokens, source + ": special_tokens: more than " +
                                                     std::to_string(kMaxSpecialTokens) + " entries");
  std::set<uint32_t> seen;
  for (auto it = specials.begin(); it != specials.end(); ++it) {
    const std::string where = source + ": special_tokens[\"" + it.key() + "\"]";
    require(!it.key().empty() && it.key().size() <= kMaxSpecialNameBytes, where + ": name empty or too long");
    uint32_t id = read_id(it.value(), where);
    require(seen.insert(id).second, where + ": id " + std::to_string(id) + " used twice");
    c.special_tokens.push_back({it.key(), id});
  }

  const json& reserved = field("reserved_tokens");
  require(reserved.is_object() && reserved.contains("begin") && reserved.contains("end"),
          source + ": reserved_tokens: expected {\"begin\": id, \"end\": id}");
  c.reserved_begin = read_id(reserved["begin"], source + ": reserved_tokens.begin");
  c.reserved_end = read_id(reserved["end"], source + ": reserved_tokens.end");
  require(c.reserved_begin <= c.reserved_end, source + ": reserved_tokens: begin after end");
  require(c.reserved_end - c.reserved_begin <= kMaxSpecialTokens,
          source + ": reserved_tokens: more than " + std::to_string(kMaxSpecialTokens) + " ids");

  const json& chat = field("chat_format");
  require(chat.is_string(), source + ": chat_format: expected a string");
  c.chat_format = parse_chat_format_name(chat.get<std::string>(), source + ": chat_format");

  if (root.contains("default_system_message")) {
    const json& sys = root["default_system_message"];
    require(sys.is_string(), source + ": default_system_message: expected a string");
    c.default_system_message = sys.get<std::string>();
  }

  const json& stops = field("stop_ids");
  require(stops.is_array() && stops.size() <= kMaxStopIds,
          source + ": stop_ids: expected an array of at most " + std::to_string(kMaxStopIds) + " ids");
  for (size_t i = 0; i < stops.size(); ++i)
    c.stop_ids.push_back(read_id(stops[i], source + ": stop_ids[" + std::to_string(i) + "]"));

  if (root.contains("bos_id") && !root["bos_id"].is_null()) c.bos_id = read_id(root["bos_id"], source + ": bos_id");
  if (root.contains("add_bos")) {
    require(root["add_bos"].is_boolean(), source + ": add_bos: expected true or false");
    c.add_bos = root["add_bos"].get<bool>();
  }
  require(!c.add_bos || c.bos_id, source + ": add_bos is true but bos_id is null");
  return c;
}

TokenizerConfig TokenizerConfig::load_file(const std::string& path) {
  return parse(read_file_text(path, kMaxConfigBytes), path);
}

}  // namespace waste::tok
