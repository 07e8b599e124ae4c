// `waste tokenize (MODEL_DIR | --ranks FILE --pattern kimi|cl100k|o200k) (TEXT | --jsonl IN.jsonl)`:
// prints the ids of TEXT as a JSON array, or for each `{"text": ...}` line of IN.jsonl one
// `{"ids": [...]}` line, in order. Special-token strings in the text are plain text.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "shared/tokenizer/tokenizer.h"
#include "shared/util/error.h"
#include "tools/waste/commands.h"

namespace waste::cli {

namespace {

// One JSONL line holds at most this much (a long document is fine; a runaway file is not).
constexpr size_t kMaxJsonlLineBytes = 256u << 20;

struct TokenizeOptions {
  // [MODEL_DIR] [TEXT] as two single strings: CLI11 reads a vector option's "[a,b]" as a list,
  // which turned a TEXT of "[BOS]" into "BOS".
  std::optional<std::string> first, second;  // absent vs "" (an empty TEXT is [])
  std::string ranks;
  std::string pattern;
  std::string jsonl;
};

void print_ids(const std::vector<uint32_t>& ids) {
  std::string line = nlohmann::json(ids).dump();
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
}

void run_tokenize(const TokenizeOptions& o) {
  std::vector<std::string> args;
  for (const std::optional<std::string>* a : {&o.first, &o.second})
    if (a->has_value()) args.push_back(**a);
  std::optional<tok::Tokenizer> tokenizer;
  if (!o.ranks.empty()) {
    require(!o.pattern.empty(), "tokenize: --ranks needs --pattern kimi|cl100k|o200k");
    tok::TokenizerConfig config;
    config.pattern = tok::parse_pattern_name(o.pattern, "tokenize: --pattern");
    tokenizer.emplace(tok::BpeRanks::load_file(o.ranks), config, o.ranks);
  } else {
    require(!o.pattern.empty() || !args.empty(), "tokenize: give MODEL_DIR or --ranks FILE --pattern NAME");
    require(o.pattern.empty(), "tokenize: --pattern goes with --ranks (a model directory names its own pattern)");
    require(!args.empty(), "tokenize: give MODEL_DIR or --ranks FILE --pattern NAME");
    const std::string dir = args.front();
    args.erase(args.begin());
    tokenizer.emplace(tok::Tokenizer::load(dir + "/tokenizer.model", dir + "/tokenizer_config.json"));
  }

  if (o.jsonl.empty()) {
    require(args.size() == 1, "tokenize: give exactly one TEXT argument, or --jsonl IN.jsonl");
    print_ids(tokenizer->encode(args.front()));
    return;
  }
  require(args.empty(), "tokenize: TEXT and --jsonl are exclusive");
  std::ifstream in(o.jsonl, std::ios::binary);
  require(in.good(), o.jsonl + ": cannot open");
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = o.jsonl + ":" + std::to_string(line_no);
    require(line.size() <= kMaxJsonlLineBytes, where + ": line longer than " + std::to_string(kMaxJsonlLineBytes) + " bytes");
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line: no record
    nlohmann::json obj;
    try {
      obj = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": not valid JSON: " + e.what());
    }
    require(obj.is_object() && obj.contains("text") && obj["text"].is_string(),
            where + ": expected an object with a string field \"text\"");
    std::vector<uint32_t> ids;
    try {
      ids = tokenizer->encode(obj["text"].get_ref<const std::string&>());
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    std::string out = nlohmann::json{{"ids", ids}}.dump();
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  require(!in.bad(), o.jsonl + ": read error");
}

}  // namespace

void register_tokenize_command(CLI::App& app) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Print the token ids of TEXT (or of each {\"text\": ...} line of --jsonl) as JSON; "
                  "special-token strings are plain text");
  cmd->add_option("model_or_text", opts->first,
                  "MODEL_DIR (tokenizer.model + tokenizer_config.json), or with --ranks the TEXT");
  cmd->add_option("text", opts->second, "TEXT, taken as it is (special-token strings are plain text)");
  cmd->add_option("--ranks", opts->ranks, "tiktoken rank file to use instead of a model directory");
  cmd->add_option("--pattern", opts->pattern, "pre-tokenisation pattern with --ranks: kimi, cl100k or o200k");
  cmd->add_option("--jsonl", opts->jsonl, "read objects with a \"text\" field, one per line; write {\"ids\": [...]} lines");
  cmd->callback([opts] { run_tokenize(*opts); });
}

}  // namespace waste::cli
