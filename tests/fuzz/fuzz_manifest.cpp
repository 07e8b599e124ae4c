// libFuzzer target: untrusted bytes as a container's `manifest` (Cap'n Proto, proto/manifest.capnp)
// through decode_manifest, the one place its bytes are bounded, then its config.json through the
// model config parser, as Container::open takes them. Contract checked: a manifest that decodes
// encodes back to bytes that decode to the same manifest.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "shared/container/manifest_io.h"
#include "shared/model/config.h"
#include "shared/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  waste::ManifestData m;
  try {
    m = waste::decode_manifest(bytes, "fuzz manifest");
  } catch (const waste::Error&) {
    return 0;
  }
  const std::vector<uint8_t> again = waste::encode_manifest(m);
  try {
    if (waste::encode_manifest(waste::decode_manifest(again, "re-encoded")) != again) __builtin_trap();
  } catch (const waste::Error&) {
    __builtin_trap();  // what the codec wrote, the codec must read
  }
  try {
    (void)waste::ModelConfig::from_json(m.config_json, "fuzz manifest (config)");
  } catch (const waste::Error&) {
  }
  return 0;
}
