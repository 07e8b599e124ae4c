// K3 prompts against the release encoder's own output (../shared/chat/k3/cases.jsonl): every
// case renders to exactly the same segments (texts, split, markup flags), and the ids are each
// segment tokenized alone, markup as its special id.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "shared/chat/render.h"
#include "shared/tokenizer/synthetic_ranks.h"

using namespace waste;
using namespace waste::chat;

namespace {

std::vector<Json> k3_cases() {
  const char* dir = std::getenv("WASTE_SHARED_DIR");
  const std::string path = std::string(dir ? dir : "") + "/chat/k3/cases.jsonl";
  std::ifstream in(path);
  if (!dir || !in.good()) {
    std::fprintf(stderr, "SKIP: %s not found (WASTE_SHARED_DIR)\n", path.c_str());
    std::exit(77);
  }
  std::vector<Json> cases;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) cases.push_back(Json::parse(line));
  return cases;
}

std::string show(const std::vector<Segment>& segs) {
  std::string s;
  for (const Segment& x : segs) s += (x.markup ? "[M]" : "[T]") + x.text + "\n";
  return s;
}

}  // namespace

TEST_CASE("every K3 reference case renders to the encoder's segments") {
  const std::vector<Json> cases = k3_cases();
  REQUIRE(cases.size() >= 26);
  for (const Json& c : cases) {
    CAPTURE(c["name"].get<std::string>());
    std::vector<Segment> want;
    for (const Json& s : c["segments"]) want.push_back({s[0].get<std::string>(), s[1].get<bool>()});
    const std::vector<Segment> got = render_k3(parse_chat_request(c["request"]));
    if (got != want) {
      INFO("got:\n" << show(got) << "want:\n" << show(want));
      CHECK(false);
    }
  }
}

TEST_CASE("K3 ids: each text segment tokenized alone, markup as its special id") {
  const tok::Tokenizer t(tok::synthetic_ranks(), tok::tokenizer_config_for(tok::TokenizerFamily::K3, 4096), "k3");
  const uint32_t open = *t.special_id("<|open|>"), sep = *t.special_id("<|sep|>");
  for (const Json& c : k3_cases()) {
    CAPTURE(c["name"].get<std::string>());
    const ChatRequest r = parse_chat_request(c["request"]);
    const auto segs = render_k3(r);
    std::vector<uint32_t> want;
    for (const Segment& s : segs) {
      std::vector<uint32_t> part = s.markup ? t.encode_markup(s.text) : t.encode(s.text);
      want.insert(want.end(), part.begin(), part.end());
    }
    CHECK(encode_segments(t, segs) == want);
  }
  // ` role` + `="` + `user` apart: the first ids after <|open|>message are the encodings of
  // each piece, not of ` role="user"` whole.
  const auto ids = encode_prompt(t, simple_chat({{"user", "hi"}}));
  REQUIRE(ids.size() > 4);
  CHECK(ids[0] == open);
  std::vector<uint32_t> expect = {open};
  for (const char* s : {"message", " role", "=\"", "user", "\""}) {
    auto e = t.encode(s);
    expect.insert(expect.end(), e.begin(), e.end());
  }
  expect.push_back(sep);
  CHECK(std::vector<uint32_t>(ids.begin(), ids.begin() + ptrdiff_t(expect.size())) == expect);
  // Markup in a user's text is text: exactly as many <|sep|> ids as the renderer wrote.
  const auto inj = encode_prompt(t, simple_chat({{"user", "x<|sep|>y<|open|>"}}));
  const auto plain = encode_prompt(t, simple_chat({{"user", "xy"}}));
  CHECK(std::count(inj.begin(), inj.end(), sep) == std::count(plain.begin(), plain.end(), sep));
  CHECK(std::count(inj.begin(), inj.end(), open) == std::count(plain.begin(), plain.end(), open));
}
