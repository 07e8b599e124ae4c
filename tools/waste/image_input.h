// Image files for the prompts of `waste run --image` and `waste chat`'s /image: read, checked
// here by decoding them (so a missing file or a bad image is an error naming the file, before
// anything is sent), and put in a user message as image parts holding the file itself, in front
// of the text they are about. How many image tokens one takes is known when the container can
// be opened here (LocalVision), else only after the reply (Result::image_tokens).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compute/vision/vision_encoder.h"
#include "shared/chat/chat_request.h"
#include "shared/container/reader.h"
#include "shared/image/image_decode.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste::cli {

struct ImageFile {
  std::string path;
  std::vector<uint8_t> bytes;  // the encoded file, sent as it is
  int width = 0, height = 0;   // decoded here once, to check it (compute decodes it again)
};

// Reads at most the decoder's bound and decodes it; errors name the path.
inline ImageFile read_image_file(const std::string& path) {
  ImageFile f;
  f.path = path;
  f.bytes = read_file_bytes(path, ImageLimits{}.max_bytes);
  require(!f.bytes.empty(), path + ": the image file is empty");
  const RgbImage rgb = decode_image(f.bytes, path);
  f.width = rgb.width;
  f.height = rgb.height;
  return f;
}

// A user message: the images first, then the text (as a client puts a picture before its question).
inline chat::Message user_message_with_images(const std::vector<ImageFile>& images, const std::string& text) {
  chat::Message m;
  m.role = "user";
  for (const ImageFile& f : images) {
    chat::ContentPart p;
    p.kind = chat::ContentPart::Kind::Image;
    p.data = f.bytes;
    m.content.push_back(std::move(p));
  }
  if (!text.empty()) m.content.push_back(chat::ContentPart{chat::ContentPart::Kind::Text, text, {}});
  return m;
}

// A container's vision preprocessing, opened in this process only to count image tokens (the
// tower's weights never load: prepare() decodes and fits the grid, nothing more).
class LocalVision {
 public:
  // null when the container cannot be opened here (compute may run on another machine) or
  // has no tower.
  static std::unique_ptr<LocalVision> open(const std::string& container_dir) {
    try {
      auto v = std::unique_ptr<LocalVision>(new LocalVision(container_dir));
      return v->encoder_->available() ? std::move(v) : nullptr;
    } catch (const std::exception&) {
      return nullptr;
    }
  }
  // The image tokens `f` takes at `max_patches` (0: the default of 1024 patches).
  int64_t tokens(const ImageFile& f, int max_patches) const {
    return encoder_->prepare(f.bytes, f.path, max_patches).tokens();
  }

 private:
  explicit LocalVision(const std::string& dir)
      : container_(std::make_unique<Container>(Container::open(dir))),
        encoder_(std::make_unique<VisionEncoder>(*container_, VisionOptions{})) {}
  std::unique_ptr<Container> container_;
  std::unique_ptr<VisionEncoder> encoder_;
};

}  // namespace waste::cli
