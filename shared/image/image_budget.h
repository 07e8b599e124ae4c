// The image limits every part of the engine shares (one definition: compute, waste-serve, the
// CLI, the planner): the patch budget per image and the bounds of one request's images.
#pragma once
#include <cstdint>

namespace waste {

// The default patch budget per image (the README's rule): 1024 patches = at most 256 image
// tokens. Each image token costs a text token's prefill; the tower's attention grows with the
// square of the patches. The operator's --image-patches sets the most a request may ask for.
constexpr int kDefaultImagePatches = 1024;
constexpr int kMinImagePatches = 4;      // one 2x2 merge
constexpr int kMaxImagePatches = 16384;  // the most --image-patches allows

// One request's images: how many, their encoded bytes together, their patches together (the
// pixels wait in memory for the tower: 16384 patches are 38.5 MB of f32), and the pixels they
// decode to together (decoding runs before the tower, bounded apart from it).
constexpr int kMaxImagesPerRequest = 32;
constexpr uint64_t kMaxImageBytesPerRequest = 64ull << 20;
constexpr int64_t kMaxPatchesPerRequest = 16384;
constexpr uint64_t kMaxDecodedPixelsPerRequest = 128ull << 20;

// The vision encoder keeps recent images' rows for reuse (an OpenAI client re-sends every image
// of the conversation each turn, and the tower takes seconds per image): at most this many bytes.
constexpr uint64_t kImageEmbeddingCacheBytes = 64ull << 20;

}  // namespace waste
