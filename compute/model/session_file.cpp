#include "compute/model/session_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shared/container/format.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste {

namespace {

constexpr char kMagic[8] = {'W', 'A', 'S', 'T', 'E', 'S', 'E', 'S'};
constexpr uint32_t kNoLayer = 0xffffffffu;

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t container_id;
  uint32_t layers;
  uint32_t sections;
  int64_t vocab;
  int64_t position;
  int32_t unfed;  // -1: none
  uint32_t reserved0;
  uint64_t file_bytes;
  uint64_t table_checksum;  // xxh3-64 of the section table
  uint64_t reserved[6];
  uint64_t header_checksum;  // xxh3-64 of the bytes before this field
};
static_assert(sizeof(FileHeader) == 128, "session file header is 128 bytes");

enum class Kind : uint32_t { Ids = 1, MlaRows = 2, KdaState = 3, ConvQ = 4, ConvK = 5, ConvV = 6, MlaRowsBf16 = 7 };

struct SectionEntry {
  uint32_t layer;  // kNoLayer for the ids
  uint32_t kind;
  uint64_t bytes;
  uint64_t checksum;
};
static_assert(sizeof(SectionEntry) == 24, "session file section entry is 24 bytes");

std::string kind_name(uint32_t kind, uint32_t layer) {
  const std::string at = layer == kNoLayer ? std::string() : "layer " + std::to_string(layer) + " ";
  switch (Kind(kind)) {
    case Kind::Ids: return "token ids";
    case Kind::MlaRows: return at + "MLA latent cache (f32)";
    case Kind::MlaRowsBf16: return at + "MLA latent cache (bf16)";
    case Kind::KdaState: return at + "KDA recurrent state";
    case Kind::ConvQ: return at + "KDA q conv window";
    case Kind::ConvK: return at + "KDA k conv window";
    case Kind::ConvV: return at + "KDA v conv window";
  }
  return at + "section of kind " + std::to_string(kind);
}

// One section in the order both sides walk: where its bytes are in memory.
struct Section {
  uint32_t layer;
  Kind kind;
  void* data;
  uint64_t bytes;
};

// The sections of a state, in file order: the ids, then each layer's vectors. Built the same
// way for writing (from the live session) and reading (into a fresh one), so the two agree.
template <class Layers, class Ids>
std::vector<Section> sections_of(Layers& layers, Ids& ids) {
  std::vector<Section> out;
  out.push_back({kNoLayer, Kind::Ids, (void*)ids.data(), ids.size() * sizeof(int32_t)});
  for (size_t L = 0; L < layers.size(); ++L) {
    auto& l = layers[L];
    auto add = [&](Kind k, auto& v) {
      if (!v.empty()) out.push_back({uint32_t(L), k, (void*)v.data(), v.size() * sizeof(v[0])});
    };
    add(Kind::MlaRows, l.mla.rows);
    add(Kind::MlaRowsBf16, l.mla.rows_bf16);
    add(Kind::KdaState, l.kda.state);
    add(Kind::ConvQ, l.kda.conv_q);
    add(Kind::ConvK, l.kda.conv_k);
    add(Kind::ConvV, l.kda.conv_v);
  }
  return out;
}

}  // namespace

uint64_t write_session_file(const std::string& path, const Model& model, uint64_t container_id, const Session& s,
                            std::span<const int32_t> ids, std::optional<int32_t> unfed) {
  require(int64_t(ids.size()) == s.position(), "save: the session holds " + std::to_string(s.position()) +
                                                   " tokens of state but " + std::to_string(ids.size()) + " ids");
  const std::vector<LayerState>& layers = s.layers();
  require(int64_t(layers.size()) == model.config().n_layers, "save: the session was not made by this model");
  const std::vector<Section> secs = sections_of(layers, ids);
  std::vector<SectionEntry> table;
  uint64_t payload = 0;
  for (const Section& x : secs) {
    table.push_back({x.layer, uint32_t(x.kind), x.bytes, checksum64(x.data, x.bytes)});
    payload += x.bytes;
  }
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kSessionFileVersion;
  h.header_bytes = sizeof(FileHeader);
  h.container_id = container_id;
  h.layers = uint32_t(layers.size());
  h.sections = uint32_t(table.size());
  h.vocab = model.config().vocab;
  h.position = s.position();
  h.unfed = unfed ? *unfed : -1;
  h.file_bytes = sizeof(FileHeader) + table.size() * sizeof(SectionEntry) + payload;
  h.table_checksum = checksum64(table.data(), table.size() * sizeof(SectionEntry));
  h.header_checksum = checksum64(&h, offsetof(FileHeader, header_checksum));

  // A fresh temporary beside the target (never through a symlink, never over a file someone
  // else placed there), made durable, then renamed: a crash leaves the old file or the new one.
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());  // ours from an interrupted save, or refused below if it comes back
  try {
    File f(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    f.write_all(&h, sizeof h);
    f.write_all(table.data(), table.size() * sizeof(SectionEntry));
    for (const Section& x : secs) f.write_all(x.data, x.bytes);
    f.fsync();
    f.close();
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error("save: cannot rename " + tmp + " to " + path + ": " + std::strerror(e));
  }
  return h.file_bytes;
}

SessionFileContents read_session_file(const std::string& path, const Model& model, uint64_t container_id,
                                      int64_t max_ctx) {
  const ModelConfig& c = model.config();
  const std::string what = "load: " + path;
  // O_NOFOLLOW: the file itself, never what a symlink planted in its place points to.
  File f(path, O_RDONLY | O_NOFOLLOW);
  {
    struct stat st {};
    require(::fstat(f.fd(), &st) == 0 && S_ISREG(st.st_mode), what + ": not a regular file");
  }
  const uint64_t size = f.size();
  char first = 0;
  if (size > 0) f.pread_exact(&first, 1, 0);
  // Version 1 was JSON: {"format": "waste-session-1", ...}.
  require(first != '{', what + ": a version 1 session file (token ids only); this build reads version " +
                            std::to_string(kSessionFileVersion) +
                            ": load it with the build that wrote it, or re-create the session and /save it again");
  require(size >= sizeof(FileHeader), what + ": " + std::to_string(size) + " bytes, too short for a session file");
  FileHeader h{};
  f.pread_exact(&h, sizeof h, 0);
  require(std::memcmp(h.magic, kMagic, sizeof kMagic) == 0, what + ": not a waste session file (bad magic)");
  require(h.header_checksum == checksum64(&h, offsetof(FileHeader, header_checksum)),
          what + ": the header is damaged (checksum mismatch)");
  require(h.version == kSessionFileVersion, what + ": session file version " + std::to_string(h.version) +
                                                ", this build reads version " + std::to_string(kSessionFileVersion));
  require(h.header_bytes == sizeof(FileHeader), what + ": header of " + std::to_string(h.header_bytes) + " bytes, expected " +
                                                    std::to_string(sizeof(FileHeader)));
  require(h.container_id == container_id, what + ": saved from another model (container id " + std::to_string(h.container_id) +
                                              ", this model is " + std::to_string(container_id) + ")");
  require(h.layers == uint32_t(c.n_layers) && h.vocab == c.vocab,
          what + ": saved from a model of " + std::to_string(h.layers) + " layers and vocabulary " + std::to_string(h.vocab) +
              ", this one has " + std::to_string(c.n_layers) + " and " + std::to_string(c.vocab));
  require(h.file_bytes == size, what + ": " + std::to_string(size) + " bytes, the header says " + std::to_string(h.file_bytes) +
                                    " (truncated or appended to)");
  // Room for what the file holds (and its pending token) plus one more token. Compared without
  // adding to the file's position, which may be anything up to INT64_MAX (signed overflow).
  require(h.position >= 0 && h.position < max_ctx - (h.unfed >= 0 ? 1 : 0),
          what + ": holds " + std::to_string(h.position) + " tokens, more than fit the session's context of " +
              std::to_string(max_ctx) + " (open the session with a larger context)");
  require(h.unfed >= -1 && h.unfed < c.vocab, what + ": the pending token " + std::to_string(h.unfed) + " is outside the vocabulary");

  // The state this model's sessions have at that position: every size is known before a byte
  // of the payload is read, so the file sizes nothing.
  std::vector<int32_t> ids(size_t(h.position));
  std::vector<LayerState> layers = model.new_session(max_ctx).layers();
  for (LayerState& l : layers) {
    const size_t values = size_t(h.position) * size_t(l.mla.width);
    if (l.mla.format == MlaCacheFormat::BF16)
      l.mla.rows_bf16.resize(values);
    else
      l.mla.rows.resize(values);
  }
  const std::vector<Section> secs = sections_of(layers, ids);
  require(h.sections == secs.size(), what + ": " + std::to_string(h.sections) + " sections, this model's state has " +
                                         std::to_string(secs.size()));
  std::vector<SectionEntry> table(secs.size());
  f.pread_exact(table.data(), table.size() * sizeof(SectionEntry), sizeof(FileHeader));
  require(h.table_checksum == checksum64(table.data(), table.size() * sizeof(SectionEntry)),
          what + ": the section table is damaged (checksum mismatch)");
  uint64_t at = sizeof(FileHeader) + table.size() * sizeof(SectionEntry);
  for (size_t i = 0; i < secs.size(); ++i) {
    const Section& x = secs[i];
    const SectionEntry& e = table[i];
    require(e.layer == x.layer && e.kind == uint32_t(x.kind) && e.bytes == x.bytes,
            what + ": section " + std::to_string(i) + " is the " + kind_name(e.kind, e.layer) + " of " +
                std::to_string(e.bytes) + " bytes, this model needs the " + kind_name(uint32_t(x.kind), x.layer) + " of " +
                std::to_string(x.bytes) + " bytes");
    f.pread_exact(x.data, x.bytes, at);
    require(checksum64(x.data, x.bytes) == e.checksum, what + ": the " + kind_name(e.kind, e.layer) + " is damaged (checksum mismatch)");
    at += x.bytes;
  }
  for (size_t i = 0; i < ids.size(); ++i)
    require(ids[i] >= 0 && ids[i] < c.vocab, what + ": token " + std::to_string(i) + " = " + std::to_string(ids[i]) +
                                                 " is outside the vocabulary");
  SessionFileContents out{model.restore_session(max_ctx, h.position, std::move(layers)), std::move(ids), std::nullopt};
  if (h.unfed >= 0) out.unfed = h.unfed;
  return out;
}

}  // namespace waste
