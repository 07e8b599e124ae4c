// The images of an HTTP chat request, made into what compute takes: each image part's reference
// (a data: URL, or with --image-dir a local file) becomes the encoded file itself, sent as the
// part's bytes (ContentPart.data), so compute decodes no base64 and opens no file of a client's
// choosing. The server fetches nothing over the network (openai.cpp refuses http(s) URLs).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/image/image_budget.h"
#include "tools/serve/openai.h"

namespace waste::serve {

// --image-dir: the one directory local image files may come from. A reference is a file:// URL
// or a path, absolute (under the directory) or relative to it; refused, naming the field: a
// `..` component, a path outside the directory, a symbolic link anywhere on the way, anything
// but a regular file, a file over the size bound. The directory is opened once, at start; each
// file is opened beneath it by the kernel (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS, non-blocking), so no link in the directories on the way is followed and
// nothing outside is opened, even for a moment. A kernel without openat2 (before Linux 5.6, or a
// seccomp filter that refuses it) is refused at start rather than served with a weaker check.
class ImageDir {
 public:
  ImageDir() = default;                       // off: every local reference is refused
  explicit ImageDir(const std::string& dir);  // throws Error: not a directory, "/", no openat2
  bool enabled() const { return dir_fd_ != nullptr; }
  const std::string& root() const { return root_; }  // canonical, no trailing '/'
  std::vector<uint8_t> read(const std::string& ref, const std::string& field, uint64_t max_bytes) const;

 private:
  std::string relative_path(const std::string& ref, const std::string& field) const;
  std::string root_;
  std::shared_ptr<const int> dir_fd_;  // O_PATH | O_DIRECTORY descriptor of root_, closed with the last copy
};

// Every image part of `p` becomes its file's bytes (the part's data; its text cleared). Throws
// chat::RequestError naming the part's field: a malformed data: URL, a local file refused by
// `dir`, the request's images over kMaxImageBytesPerRequest (shared/image/image_budget.h, the
// bound compute applies too).
void load_images(ParsedRequest& p, const ImageDir& dir);

// Decodes every image of `p` as compute would (shared/image, the same limits), throwing
// chat::RequestError naming the part at the first that does not decode. For a streamed request,
// whose errors after the headers could only be an event of a 200 stream: a bad image gets its
// 400 before. (A plain request gets compute's own 400, and the image is decoded once.)
void check_images_decode(const ParsedRequest& p);

}  // namespace waste::serve
