// The parts of an Engine request (proto/engine.capnp) read out of a peer's Cap'n Proto message
// and checked before anything is computed: the chat (messages, tool calls, options), its images,
// and the sampling fields. Kept apart from the RPC server so the fuzzer
// (tests/fuzz/fuzz_engine_rpc.cpp) drives exactly the code a peer's message reaches. Every
// refusal is a waste::Error (chat::RequestError when a request field is at fault).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "compute/sampler.h"
#include "proto/engine.capnp.h"
#include "shared/chat/chat_request.h"

namespace waste::server {

// Hard bounds on request fields, whatever the session allows.
constexpr uint32_t kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 256;

// One image of a request: its encoded file and the field it came from (named in errors).
struct RequestImage {
  std::vector<uint8_t> bytes;
  std::string field;
};

// Appends an image, counting them as they are collected and refusing past the request's bounds
// (kMaxImagesPerRequest images, kMaxImageBytesPerRequest bytes in `total`).
void add_image(std::vector<RequestImage>& out, uint64_t& total, std::vector<uint8_t> bytes, std::string field);

std::vector<uint8_t> bytes_of(capnp::Data::Reader d);

// Text as sent, all of it: a U+0000 in a message is text like any other (cStr() would end it there).
std::string str(capnp::Text::Reader t);

// A chat's image parts (the file itself, or a data: URL decoded), in prompt order.
std::vector<RequestImage> chat_images(capnp::List<proto::ChatMessage>::Reader msgs);

// A JSON text field (tools, a schema): null when empty; RequestError(where) when it does not
// parse or nests deeper than chat::kMaxJsonDepth.
chat::Json json_field(capnp::Text::Reader t, const std::string& where);

// The chat request of an RPC, checked as parse_chat_request checks an HTTP body.
chat::ChatRequest chat_request_of(capnp::List<proto::ChatMessage>::Reader msgs, proto::ChatOptions::Reader o);

// The sampling fields, each checked against its range.
SamplingParams sampling_of(proto::GenerateRequest::Reader r);

}  // namespace waste::server
