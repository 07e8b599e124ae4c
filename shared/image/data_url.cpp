#include "shared/image/data_url.h"

#include <cctype>

#include "shared/chat/chat_request.h"
#include "shared/tokenizer/bpe_ranks.h"

namespace waste {

std::vector<uint8_t> decode_image_data_url(std::string_view url, const std::string& field, uint64_t max_bytes) {
  auto starts = [&](std::string_view p) {
    if (url.size() < p.size()) return false;
    for (size_t i = 0; i < p.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(url[i])) != p[i]) return false;
    return true;
  };
  if (starts("http://") || starts("https://"))
    throw chat::RequestError(field, "image URLs are not fetched (the server fetches nothing): send the image as a "
                                    "data: URL, data:image/png;base64,...");
  if (!starts("data:")) throw chat::RequestError(field, "an image must be a data: URL (data:image/png;base64,...)");
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) throw chat::RequestError(field, "the data: URL has no ',' before its data");
  const std::string_view header = url.substr(5, comma - 5);
  if (header.size() < 7 || header.substr(header.size() - 7) != ";base64")
    throw chat::RequestError(field, "the data: URL must be base64 (data:image/png;base64,...)");
  const std::string_view type = header.substr(0, header.find(';'));
  if (!type.empty() && type.substr(0, 6) != "image/")
    throw chat::RequestError(field, "the data: URL's media type '" + std::string(type) + "' is not an image");
  const std::string_view payload = url.substr(comma + 1);
  // Base64 holds 3 bytes per 4 characters: refuse an oversized payload before decoding it.
  if (payload.size() / 4 * 3 > max_bytes + 2)
    throw chat::RequestError(field, "the image is more than " + std::to_string(max_bytes) + " bytes");
  std::string bytes;
  if (!tok::base64_decode(payload, bytes)) throw chat::RequestError(field, "the data: URL's base64 is malformed");
  if (bytes.size() > max_bytes)
    throw chat::RequestError(field, "the image is more than " + std::to_string(max_bytes) + " bytes");
  return {bytes.begin(), bytes.end()};
}

}  // namespace waste
