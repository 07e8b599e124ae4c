// libFuzzer target: an untrusted body of POST /v1/chat/completions through waste-serve's
// parse_request (JSON -> validated request, with the server's default limits), then the chat it
// yields rendered in both chat formats (K3, Kimi) and encoded with a real tokenizer, as compute
// renders a chat prompt. Contract checked: rendering a validated request never fails except with
// a waste::Error, and markup segments only name specials the tokenizer has.
#include <cstddef>
#include <cstdint>
#include <string>

#include "shared/chat/render.h"
#include "shared/util/error.h"
#include "tests/fuzz/fuzz_tokenizer.h"
#include "tools/serve/openai.h"

namespace {

void render_with(waste::tok::TokenizerFamily family, const waste::chat::ChatRequest& chat) {
  const waste::tok::Tokenizer& t = waste::fuzz::fuzz_tokenizer(family);
  try {
    const std::vector<uint32_t> ids = waste::chat::encode_prompt(t, chat, false);
    for (uint32_t id : ids)
      if (id >= t.vocab_size()) __builtin_trap();
    (void)waste::chat::encode_prompt(t, chat, true);
  } catch (const waste::Error&) {
    // a request the format cannot render (a tool message without a call to answer, ...)
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  const waste::serve::Limits limits;
  waste::serve::ApiError err;
  std::optional<waste::serve::ParsedRequest> parsed;
  try {
    parsed = waste::serve::parse_request(body, true, limits, &err);
  } catch (const waste::Error&) {
    return 0;
  }
  if (!parsed) {
    if (err.status < 400 || err.status > 499 || err.message.empty()) __builtin_trap();  // a refusal says why
    return 0;
  }
  const waste::chat::ChatRequest& chat = parsed->request.chat;
  if (chat.messages.empty()) return 0;
  render_with(waste::tok::TokenizerFamily::K3, chat);
  render_with(waste::tok::TokenizerFamily::KimiLinear, chat);
  return 0;
}
