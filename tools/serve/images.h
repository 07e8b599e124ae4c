// The images of an HTTP chat request, made into what compute takes: each image part's reference
// (a data: URL, or with --image-dir a local file) becomes the encoded file itself, sent as the
// part's bytes (ContentPart.data), so compute decodes no base64 and opens no file of a client's
// choosing. The server fetches nothing over the network (openai.cpp refuses http(s) URLs).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tools/serve/openai.h"

namespace waste::serve {

// Compute refuses a request's images past 64 MiB together (compute/server/rpc_server.cpp): the
// server bounds what it reads from files by the same, so a request cannot make it read more.
constexpr uint64_t kMaxImageBytesPerRequest = 64ull << 20;

// --image-dir: the one directory local image files may come from. A reference is a file:// URL
// or a path, absolute (under the directory) or relative to it; refused, naming the field: a
// `..` component, a path outside the directory, a symbolic link anywhere on the way (the file
// opened is checked to be the one named, after opening, so no race swaps one in), anything but
// a regular file, a file over the size bound.
class ImageDir {
 public:
  ImageDir() = default;                       // off: every local reference is refused
  explicit ImageDir(const std::string& dir);  // throws Error when dir is not a directory
  bool enabled() const { return !root_.empty(); }
  const std::string& root() const { return root_; }  // canonical, no trailing '/'
  std::vector<uint8_t> read(const std::string& ref, const std::string& field, uint64_t max_bytes) const;

 private:
  std::string path_of(const std::string& ref, const std::string& field) const;
  std::string root_;
};

// Every image part of `p` becomes its file's bytes (the part's data; its text cleared). Throws
// chat::RequestError naming the part's field: a malformed data: URL, a local file refused by
// `dir`, the request's images over kMaxImageBytesPerRequest.
void load_images(ParsedRequest& p, const ImageDir& dir);

// Decodes every image of `p` as compute would (shared/image, the same limits), throwing
// chat::RequestError naming the part at the first that does not decode. For a streamed request,
// whose errors after the headers could only be an event of a 200 stream: a bad image gets its
// 400 before. (A plain request gets compute's own 400, and the image is decoded once.)
void check_images_decode(const ParsedRequest& p);

}  // namespace waste::serve
