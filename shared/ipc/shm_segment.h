// A Boost.Interprocess shared-memory segment holding the layout of segment_layout.h. iod
// creates it (mode 0600, removed again when the owner is destroyed); clients open it
// read-only and check the header against what attach said.
//
// Two backings. A named object in /dev/shm ("waste-iod-..."), on 4 KiB pages unless /dev/shm is
// mounted with huge=; or, where /dev/shm gives no huge pages, iod's private file on 2 MiB pages
// (platform::create_private_huge_shm), named for clients by the path of iod's descriptor,
// "/proc/<pid>/fd/<n>": with every expert cached, decode through iod on 4 KiB pages ran at 0.62
// of resident here, and the same pages as huge pages at resident speed (docs/MEASUREMENTS.md).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "shared/ipc/segment_layout.h"
#include "shared/platform/shm.h"

namespace waste::ipc {

// Where iod's segment lives (iod --shm).
enum class SegmentBacking {
  Auto,         // /dev/shm when it gives huge pages, else a private huge-page file, else /dev/shm
  PrivateHuge,  // the private huge-page file, or an error saying why not
  Named,        // /dev/shm, whatever its pages
};
// "auto", "huge-file", "named"; parse_segment_backing throws an Error naming the value, and
// segment_backing_problem says what is wrong with it ("" when nothing: a CLI11 check).
const char* backing_name(SegmentBacking b);
SegmentBacking parse_segment_backing(const std::string& text);
std::string segment_backing_problem(const std::string& text);

class ShmSegment {
 public:
  // Creates the segment (a named one as `name`, removing a stale segment of the same name
  // first: the caller has made sure no live owner uses it) and writes the header and a FREE
  // slot table. `why_not_huge` (optional) receives why Auto fell back to 4 KiB pages.
  static ShmSegment create(const std::string& name, const SegmentLayout& layout, uint64_t instance_id,
                           uint64_t container_id, SegmentBacking backing = SegmentBacking::Named,
                           std::string* why_not_huge = nullptr);
  // Maps an existing segment read-only and validates the header against `expect`. A name that
  // is a path (iod's private file, "/proc/<pid>/fd/<n>") must be a file of this user.
  static ShmSegment open_read_only(const std::string& name, const SegmentLayout& expect, uint64_t container_id);
  static bool remove(const std::string& name);  // true when a segment was removed

  ShmSegment();
  ShmSegment(ShmSegment&&) noexcept;
  ShmSegment& operator=(ShmSegment&&) noexcept;
  ~ShmSegment();

  const std::string& name() const { return name_; }
  // True for iod's private huge-page file (no name in /dev/shm).
  bool private_file() const { return !name_.empty() && name_[0] == '/'; }
  uint8_t* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  const SegmentHeader& header() const { return *reinterpret_cast<const SegmentHeader*>(base_); }
  SlotEntry& entry(uint32_t slot) const {
    return reinterpret_cast<SlotEntry*>(base_ + header().slot_table_offset)[slot];
  }
  uint8_t* slot_data(uint32_t slot) const {
    return base_ + header().slots_offset + uint64_t(slot) * header().slot_bytes;
  }
  uint32_t slot_count() const { return header().slot_count; }
  uint64_t slot_bytes() const { return header().slot_bytes; }
  // Removes the segment name now (the mapping stays valid until destruction).
  void unlink();

 private:
  void reset();
  // create's two backings: each maps the segment into *this (impl_, name_, owner_); the private
  // file returns false with `why` where the system refuses it.
  bool map_private_huge(uint64_t bytes, std::string& why);
  void map_named(const std::string& name, uint64_t bytes);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string name_;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  bool owner_ = false;
  uint32_t iod_pid_ = 0;  // the pid in a private file's descriptor path (checked against the header)
};

// The segment name of an iod instance: "waste-iod-<instance hex>-<container hex>", the instance
// part first so that one prefix finds every segment of an instance (segment_prefix).
std::string segment_name(uint64_t instance_id, uint64_t container_id);
// "waste-iod-<instance hex>-": the start of every segment name of that instance.
std::string segment_prefix(uint64_t instance_id);
constexpr size_t kSegmentNameLength = 10 + 16 + 1 + 16;
// A system whose names are shorter (macOS: PSHMNAMLEN, 31 with the '/') needs a shorter form of
// the name: docs/PORTING.md, "shm".
static_assert(kSegmentNameLength <= platform::kShmNameMax, "iod's segment names do not fit this system's limit");
// Removes every segment of the instance, of any container, that an iod which did not exit
// cleanly left behind; returns the names removed.
std::vector<std::string> remove_instance_segments(uint64_t instance_id);
// Instance id of a run directory: xxh3 of its canonical path.
uint64_t instance_id_for(const std::string& run_dir);

}  // namespace waste::ipc
