// An image reference of a chat request (OpenAI's image_url.url) to the file's bytes. Only
// `data:` URLs with base64 are taken: the engine fetches nothing, so an http(s) URL is refused
// with a message that says what to send instead.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace waste {

// Throws chat::RequestError(field) for anything but data:[image/...][;...];base64,<payload>,
// a payload that is not strict base64, or one over max_bytes once decoded.
std::vector<uint8_t> decode_image_data_url(std::string_view url, const std::string& field, uint64_t max_bytes);

}  // namespace waste
