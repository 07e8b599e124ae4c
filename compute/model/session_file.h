// A session's state on disk (`/save PATH`, Session.save, waste_save): the state itself, so
// /load continues exactly where the session was, with no prefill. Little-endian, version 2:
//
//   header (128 B)   magic "WASTESES", version, the model's identity (the container id, which
//                    covers its config and every tensor checksum), layer count, vocabulary,
//                    position, the pending unfed id, the file's size, and an xxh3-64 of itself
//   section table    per section: layer, kind (ids, MLA rows, KDA state, conv q/k/v), bytes,
//                    xxh3-64 of the bytes; its own xxh3-64 is in the header
//   sections         the token ids, then per layer its state, in layer order
//
// Reading checks all of it before any state is used: a file of another model, another version,
// a size that does not match the model's shapes, or damaged bytes is refused with an Error
// naming the file and what is wrong (the section, for damaged bytes). Version 1 (JSON token
// ids, re-prefilled at load) is refused with a note to re-save.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/model/model.h"

namespace waste {

constexpr uint32_t kSessionFileVersion = 2;

struct SessionFileContents {
  Session state;
  std::vector<int32_t> ids;      // the ids in the state, in order (state.position() of them)
  std::optional<int32_t> unfed;  // sampled last and not yet fed (fed before the next prompt)
};

// Writes path.tmp (O_EXCL, O_NOFOLLOW), fsyncs and renames it over path. ids.size() must be
// s.position(). Returns the file's size in bytes.
uint64_t write_session_file(const std::string& path, const Model& model, uint64_t container_id, const Session& s,
                            std::span<const int32_t> ids, std::optional<int32_t> unfed);

// Reads a file written by write_session_file for this model into a session of max_ctx tokens
// (refused when the saved position does not leave room for one more token).
SessionFileContents read_session_file(const std::string& path, const Model& model, uint64_t container_id,
                                      int64_t max_ctx);

}  // namespace waste
