// `waste prompt (--format k3|kimi | MODEL_DIR) --request REQ.json [--json]`: renders a chat
// request (OpenAI chat fields plus K3's thinking, thinking_effort, add_generation_prompt,
// image_prompts) into the prompt the engine would feed. --json prints
// {"segments": [[text, is_markup], ...]} and, with a model, "ids"; without it, the prompt text
// with markup written as its token names.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

#include "shared/chat/render.h"
#include "shared/util/error.h"
#include "tools/waste/commands.h"

namespace waste::cli {

namespace {

constexpr size_t kMaxRequestBytes = 64u << 20;

struct PromptOptions {
  std::string model, format, request;
  bool json = false;
};

std::string read_request(const std::string& path) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    std::ifstream in(path, std::ios::binary);
    require(in.good(), path + ": cannot open");
    text.assign(std::istreambuf_iterator<char>(in), {});
    require(!in.bad(), path + ": read error");
  }
  require(text.size() <= kMaxRequestBytes, path + ": larger than " + std::to_string(kMaxRequestBytes) + " bytes");
  return text;
}

void run_prompt(const PromptOptions& o) {
  require(o.model.empty() != o.format.empty(), "prompt: give either --format k3|kimi or MODEL_DIR");
  require(!o.request.empty(), "prompt: --request REQ.json is required (- reads standard input)");
  std::optional<tok::Tokenizer> tokenizer;
  tok::ChatFormat format = tok::ChatFormat::None;
  chat::RenderOptions ro;
  if (!o.model.empty()) {
    tokenizer.emplace(tok::Tokenizer::load(o.model + "/tokenizer.model", o.model + "/tokenizer_config.json"));
    format = tokenizer->config().chat_format;
    ro.default_system_message = tokenizer->config().default_system_message;
  } else {
    format = tok::parse_chat_format_name(o.format, "prompt: --format");
    require(format != tok::ChatFormat::None, "prompt: --format must be k3 or kimi");
    // The Kimi families (K2, Kimi-Linear) open with the same default system message.
    if (format == tok::ChatFormat::Kimi)
      ro.default_system_message = tok::tokenizer_config_for(tok::TokenizerFamily::KimiLinear).default_system_message;
  }
  const chat::Json j = chat::Json::parse(read_request(o.request), nullptr, false);
  require(!j.is_discarded(), o.request + ": not valid JSON");
  require(j.is_object(), o.request + ": expected a JSON object (a chat request)");
  const auto& known = chat::chat_request_fields();
  for (auto it = j.begin(); it != j.end(); ++it)
    require(std::find(known.begin(), known.end(), it.key()) != known.end(),
            o.request + ": " + it.key() + ": unsupported field");
  std::vector<chat::Segment> segs;
  try {
    segs = chat::render_prompt(format, chat::parse_chat_request(j), ro);
  } catch (const chat::RequestError& e) {
    throw Error(o.request + ": " + e.what());
  }
  if (!o.json) {
    std::string text = chat::segments_text(segs) + "\n";
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  nlohmann::ordered_json out;
  out["segments"] = nlohmann::ordered_json::array();
  for (const chat::Segment& s : segs) out["segments"].push_back({s.text, s.markup});
  if (tokenizer) {
    std::vector<uint32_t> ids;
    if (tokenizer->config().add_bos && tokenizer->config().bos_id) ids.push_back(*tokenizer->config().bos_id);
    const auto body = chat::encode_segments(*tokenizer, segs);
    ids.insert(ids.end(), body.begin(), body.end());
    out["ids"] = ids;
  }
  std::string line = out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict) + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
}

}  // namespace

void register_prompt_command(CLI::App& app) {
  auto opts = std::make_shared<PromptOptions>();
  CLI::App* cmd = app.add_subcommand("prompt", "Render a chat request into the model's prompt (segments, and ids with a model)");
  cmd->add_option("model", opts->model, "model directory (tokenizer.model + tokenizer_config.json): its chat format, and ids");
  cmd->add_option("--format", opts->format, "chat format without a model: k3 or kimi");
  cmd->add_option("--request", opts->request,
                  "the request: a JSON object with messages and optionally tools, tool_choice, response_format, "
                  "thinking, thinking_effort, reasoning_effort, add_generation_prompt, image_prompts (- = stdin)");
  cmd->add_flag("--json", opts->json, "print {\"segments\": [[text, is_markup], ...]} (and \"ids\" with a model)");
  cmd->callback([opts] { run_prompt(*opts); });
}

}  // namespace waste::cli
