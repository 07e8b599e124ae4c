// libFuzzer target: a malformed Session.generate request from a peer of compute
// (proto/engine.capnp GenerateRequest, the Cap'n Proto message as the bytes) through the code
// compute's RPC server runs on it before any model work (compute/server/request_decode.h): the
// images of a token prompt, a chat's images (data: URLs decoded) and messages and options, the
// sampling fields; then the chat rendered and encoded as compute would, with a real K3 or Kimi
// tokenizer. Contract checked: what is accepted is in range.
#include <kj/exception.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "compute/server/request_decode.h"
#include "proto/engine.capnp.h"
#include "shared/chat/render.h"
#include "shared/image/image_budget.h"
#include "shared/util/error.h"
#include "tests/fuzz/fuzz_capnp_message.h"
#include "tests/fuzz/fuzz_tokenizer.h"

namespace {

void decode(waste::proto::GenerateRequest::Reader req) {
  using waste::proto::GenerateRequest;
  auto p = req.getPrompt();
  std::vector<waste::server::RequestImage> images;
  uint64_t total = 0;
  for (uint32_t i = 0; i < req.getImages().size(); ++i)
    waste::server::add_image(images, total, waste::server::bytes_of(req.getImages()[i]), "images[" + std::to_string(i) + "]");
  if (p.which() == GenerateRequest::Prompt::CHAT) {
    images = waste::server::chat_images(p.getChat());
    const waste::chat::ChatRequest chat = waste::server::chat_request_of(p.getChat(), req.getChatOptions());
    const auto family = req.getSeed() & 1 ? waste::tok::TokenizerFamily::KimiLinear : waste::tok::TokenizerFamily::K3;
    const waste::tok::Tokenizer& t = waste::fuzz::fuzz_tokenizer(family);
    for (uint32_t id : waste::chat::encode_prompt(t, chat, req.getTopK() & 1))
      if (id >= t.vocab_size()) __builtin_trap();
  }
  if (images.size() > size_t(waste::kMaxImagesPerRequest)) __builtin_trap();
  const waste::SamplingParams s = waste::server::sampling_of(req);
  if (!std::isfinite(s.temperature) || !(s.top_p > 0 && s.top_p <= 1) || s.stop.size() > waste::server::kMaxStopStrings)
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    waste::fuzz::FuzzMessage msg(data, size);
    decode(msg.root<waste::proto::GenerateRequest>());
  } catch (const waste::Error&) {
  } catch (const kj::Exception&) {
  }
  return 0;
}
