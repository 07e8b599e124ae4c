#include "shared/container/manifest_io.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

#include "manifest.capnp.h"
#include "shared/util/error.h"

namespace waste {

std::vector<uint8_t> encode_manifest(const ManifestData& m) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<proto::Manifest>();
  root.setFormatVersion(m.format_version);
  root.setArch(m.arch);
  root.setConfigJson(m.config_json);
  root.setTensorPrefix(m.tensor_prefix);
  root.setCreatedBy(m.created_by);
  root.setContainerId(m.container_id);
  root.setTrunkFile(m.trunk_file);
  root.setTrunkBytes(m.trunk_bytes);
  auto tensors = root.initTensors(unsigned(m.tensors.size()));
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorInfo& t = m.tensors[i];
    auto out = tensors[unsigned(i)];
    out.setName(t.name);
    out.setFormat(proto::TensorFormat(uint16_t(t.format)));
    auto shape = out.initShape(unsigned(t.shape.size()));
    for (size_t d = 0; d < t.shape.size(); ++d) shape.set(unsigned(d), t.shape[d]);
    out.setOffset(t.offset);
    out.setBytes(t.bytes);
    out.setGroupSize(t.group);
    out.setScalesOffset(t.scales_offset);
    out.setChecksum(t.checksum);
  }
  auto layers = root.initLayers(unsigned(m.layers.size()));
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const ExpertLayerInfo& l = m.layers[i];
    auto out = layers[unsigned(i)];
    out.setLayer(uint32_t(l.layer));
    out.setBankFile(l.bank_path);
    out.setExpertCount(l.expert_count);
    out.setStride(l.layout.stride);
    out.setFormat(proto::TensorFormat(uint16_t(l.layout.format)));
    out.setHidden(l.layout.hidden);
    out.setIntermediate(l.layout.intermediate);
    out.setPayloadBytes(l.layout.payload_bytes);
    out.setGateOffset(l.layout.gate_offset);
    out.setUpOffset(l.layout.up_offset);
    out.setDownOffset(l.layout.down_offset);
    out.setScalesOffset(l.layout.scales_offset);
    out.setCodebookOffset(l.codebook_offset);
    out.setCodebookChecksum(l.codebook_checksum);
    auto err = out.initRelativeError(unsigned(l.relative_error.size()));
    for (size_t k = 0; k < l.relative_error.size(); ++k) err.set(unsigned(k), l.relative_error[k]);
  }
  root.setCodebooksFile(m.codebooks_file);
  root.setCodebooksBytes(m.codebooks_bytes);
  root.setTokenizerFile(m.tokenizer_file);
  root.setTokenizerConfigFile(m.tokenizer_config_file);
  root.setSynthetic(m.synthetic);
  // Left null when there is no vision tower: reads back as "", as in containers written
  // before the field existed.
  if (!m.preprocessor_config_json.empty()) root.setPreprocessorConfigJson(m.preprocessor_config_json);
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

ManifestData decode_manifest(const std::vector<uint8_t>& bytes, const std::string& source) {
  require(bytes.size() >= 8 && bytes.size() % sizeof(capnp::word) == 0,
          source + ": not a manifest (size " + std::to_string(bytes.size()) + " is not a whole number of words)");
  require(bytes.size() <= kMaxManifestBytes, source + ": manifest larger than 256 MiB");
  // Cap'n Proto wants word-aligned memory.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  capnp::ReaderOptions options;
  options.traversalLimitInWords = bytes.size() / sizeof(capnp::word) * 4 + 1024;
  options.nestingLimit = 16;
  ManifestData m;
  try {
    capnp::FlatArrayMessageReader reader(words, options);
    auto root = reader.getRoot<proto::Manifest>();
    m.format_version = root.getFormatVersion();
    if (m.format_version != kFormatVersion)
      throw Error(source + ": container format version " + std::to_string(m.format_version) +
                  " is not supported (this build reads version " + std::to_string(kFormatVersion) + ")");
    m.arch = root.getArch();
    m.config_json = root.getConfigJson();
    m.tensor_prefix = root.getTensorPrefix();
    m.created_by = root.getCreatedBy();
    m.container_id = root.getContainerId();
    m.trunk_file = root.getTrunkFile();
    m.trunk_bytes = root.getTrunkBytes();
    for (auto t : root.getTensors()) {
      TensorInfo info;
      info.name = t.getName();
      info.format = TensorFormat(uint16_t(t.getFormat()));
      require(t.getShape().size() <= 8, source + ": tensor " + info.name + " has more than 8 dimensions");
      for (auto d : t.getShape()) info.shape.push_back(d);
      info.offset = t.getOffset();
      info.bytes = t.getBytes();
      info.group = t.getGroupSize();
      info.scales_offset = t.getScalesOffset();
      info.checksum = t.getChecksum();
      m.tensors.push_back(std::move(info));
    }
    for (auto l : root.getLayers()) {
      ExpertLayerInfo info;
      info.layer = int(l.getLayer());
      info.bank_path = l.getBankFile();
      info.expert_count = l.getExpertCount();
      RecordLayout& r = info.layout;
      r.format = TensorFormat(uint16_t(l.getFormat()));
      r.hidden = l.getHidden();
      r.intermediate = l.getIntermediate();
      r.stride = l.getStride();
      r.payload_bytes = l.getPayloadBytes();
      r.gate_offset = l.getGateOffset();
      r.up_offset = l.getUpOffset();
      r.down_offset = l.getDownOffset();
      r.scales_offset = l.getScalesOffset();
      info.codebook_offset = l.getCodebookOffset();
      info.codebook_checksum = l.getCodebookChecksum();
      for (float e : l.getRelativeError()) info.relative_error.push_back(e);
      m.layers.push_back(std::move(info));
    }
    m.codebooks_file = root.getCodebooksFile();
    m.codebooks_bytes = root.getCodebooksBytes();
    m.tokenizer_file = root.getTokenizerFile();
    m.tokenizer_config_file = root.getTokenizerConfigFile();
    m.synthetic = root.getSynthetic();
    // Absent in containers written before the field existed: reads as "" (no vision).
    m.preprocessor_config_json = root.getPreprocessorConfigJson();
  } catch (const kj::Exception& e) {
    throw Error(source + ": damaged manifest: " + std::string(e.getDescription().cStr()));
  }
  return m;
}

}  // namespace waste
