#include "shared/ipc/shm_segment.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "shared/container/format.h"
#include "shared/platform/memory.h"
#include "shared/util/error.h"

namespace bip = boost::interprocess;

namespace waste::ipc {

struct ShmSegment::Impl {
  bip::mapped_region region;
  int private_fd = -1;  // iod's private huge-page file: kept open for the clients' /proc path
  ~Impl() {
    region = bip::mapped_region();  // unmap before the descriptor goes
    if (private_fd >= 0) ::close(private_fd);
  }
};

const char* backing_name(SegmentBacking b) {
  switch (b) {
    case SegmentBacking::Auto: return "auto";
    case SegmentBacking::PrivateHuge: return "huge-file";
    case SegmentBacking::Named: return "named";
  }
  return "?";
}

namespace {

std::optional<SegmentBacking> find_backing(const std::string& text) {
  for (SegmentBacking b : {SegmentBacking::Auto, SegmentBacking::PrivateHuge, SegmentBacking::Named})
    if (text == backing_name(b)) return b;
  return std::nullopt;
}

}  // namespace

std::string segment_backing_problem(const std::string& text) {
  return find_backing(text) ? "" : "unknown segment backing '" + text + "' (auto, huge-file or named)";
}

SegmentBacking parse_segment_backing(const std::string& text) {
  if (const auto b = find_backing(text)) return *b;
  throw Error("--shm: " + segment_backing_problem(text), ErrorKind::InvalidRequest, "--shm");
}

ShmSegment::ShmSegment() = default;
ShmSegment::ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }
ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    reset();
    impl_ = std::move(o.impl_);
    name_ = std::move(o.name_);
    base_ = o.base_;
    bytes_ = o.bytes_;
    owner_ = o.owner_;
    iod_pid_ = o.iod_pid_;
    o.base_ = nullptr;
    o.bytes_ = 0;
    o.owner_ = false;
  }
  return *this;
}

ShmSegment::~ShmSegment() { reset(); }

void ShmSegment::reset() {
  impl_.reset();  // unmap first
  if (owner_ && !name_.empty() && !private_file()) bip::shared_memory_object::remove(name_.c_str());
  owner_ = false;
  base_ = nullptr;
  bytes_ = 0;
}

void ShmSegment::unlink() {
  if (!name_.empty() && !private_file()) bip::shared_memory_object::remove(name_.c_str());
  owner_ = false;
}

bool ShmSegment::remove(const std::string& name) { return bip::shared_memory_object::remove(name.c_str()); }

bool ShmSegment::map_private_huge(uint64_t bytes, std::string& why) {
  auto impl = std::make_unique<Impl>();  // before the file: nothing after it may throw unowned
  impl->private_fd = platform::create_private_huge_shm(bytes, why);
  if (impl->private_fd < 0) return false;
  try {
    // Mapped through Boost by the path of iod's own descriptor (kept open in Impl: the clients
    // open the same path under iod's pid).
    const std::string self = "/proc/self/fd/" + std::to_string(impl->private_fd);
    bip::file_mapping file(self.c_str(), bip::read_write);
    impl->region = bip::mapped_region(file, bip::read_write, 0, bytes);
  } catch (const bip::interprocess_exception& e) {
    why = std::string("mapping it: ") + e.what();
    return false;  // impl closes the descriptor
  }
  name_ = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(impl->private_fd);
  impl_ = std::move(impl);
  owner_ = true;
  return true;
}

void ShmSegment::map_named(const std::string& name, uint64_t bytes) {
  try {
    bip::permissions perm(0600);
    bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write, perm);
    name_ = name;
    owner_ = true;  // from here on the destructor removes it
    shm.truncate(bip::offset_t(bytes));
    impl_ = std::make_unique<Impl>();
    impl_->region = bip::mapped_region(shm, bip::read_write, 0, bytes);
  } catch (const bip::interprocess_exception& e) {
    if (owner_) bip::shared_memory_object::remove(name.c_str());
    owner_ = false;
    throw Error("shared memory segment " + name + ": cannot create " + std::to_string(bytes) + " bytes: " + e.what());
  }
}

ShmSegment ShmSegment::create(const std::string& name, const SegmentLayout& layout, uint64_t instance_id,
                              uint64_t container_id, SegmentBacking backing, std::string* why_not_huge) {
  remove(name);
  ShmSegment s;
  // Huge pages from /dev/shm itself where its mount gives them; else iod's private file.
  if (backing == SegmentBacking::Auto && platform::shm_huge_pages_enabled(platform::shm_huge_page_mode()))
    backing = SegmentBacking::Named;
  std::string why;
  if (backing == SegmentBacking::Named || !s.map_private_huge(layout.total_bytes, why)) {
    if (backing == SegmentBacking::PrivateHuge)
      throw Error("shared memory segment: cannot create a private huge-page file of " +
                  std::to_string(layout.total_bytes) + " bytes: " + why);
    if (why_not_huge) *why_not_huge = why;  // empty when Named was asked for
    s.map_named(name, layout.total_bytes);
  }
  s.base_ = static_cast<uint8_t*>(s.impl_->region.get_address());
  s.bytes_ = layout.total_bytes;
  // Huge pages where /dev/shm is mounted huge=advise (shared/platform/shm.h says why they
  // matter); elsewhere a no-op, and a refusal costs nothing.
  platform::advise_huge_pages(s.base_, s.bytes_);
  // The slot data is left to the kernel's zero pages: only the header and table are written.
  auto* h = new (s.base_) SegmentHeader{};
  h->magic = kSegmentMagic;
  h->version = kSegmentVersion;
  h->slot_entry_bytes = sizeof(SlotEntry);
  h->instance_id = instance_id;
  h->container_id = container_id;
  h->total_bytes = layout.total_bytes;
  h->slot_table_offset = layout.slot_table_offset;
  h->slots_offset = layout.slots_offset;
  h->slot_bytes = layout.slot_bytes;
  h->slot_count = layout.slot_count;
  h->iod_pid = uint32_t(::getpid());
  for (uint32_t i = 0; i < layout.slot_count; ++i) {
    auto* e = new (&s.entry(i)) SlotEntry{};
    e->word.store(make_state_word(SlotState::Free, 0), std::memory_order_relaxed);
  }
  h->ready.store(1, std::memory_order_release);
  return s;
}

ShmSegment ShmSegment::open_read_only(const std::string& name, const SegmentLayout& expect, uint64_t container_id) {
  // The layout comes from the peer: it must be the one segment_layout() gives for its slot
  // count and size, so every slot and table entry lies inside the mapping.
  require(expect.slot_bytes > 0 && expect.slot_bytes % kSlotAlign == 0 && expect.slot_bytes <= kMaxSlotBytes,
          "shared memory segment " + name + ": slot size " + std::to_string(expect.slot_bytes) + " is not usable");
  const SegmentLayout consistent = segment_layout(expect.slot_count, expect.slot_bytes);
  require(consistent.slot_table_offset == expect.slot_table_offset && consistent.slots_offset == expect.slots_offset &&
              consistent.total_bytes == expect.total_bytes,
          "shared memory segment " + name + ": announced layout is inconsistent (offsets or size)");
  ShmSegment s;
  try {
    if (!name.empty() && name[0] == '/') {
      // iod's private file through its descriptor: only "/proc/<pid>/fd/<n>", opened so that
      // nothing but a regular file can do anything on open (no FIFO to block on, no terminal to
      // acquire), and mapped only when it is a regular file of this user (whatever the peer
      // says); Boost then maps that same open file through this process's own descriptor.
      unsigned long pid = 0, fdn = 0;
      int used = 0;
      require(std::sscanf(name.c_str(), "/proc/%lu/fd/%lu%n", &pid, &fdn, &used) == 2 && size_t(used) == name.size() &&
                  name == "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fdn),
              "shared memory segment " + name + ": not a name and not an iod descriptor path");
      s.iod_pid_ = uint32_t(pid);
      const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
      if (fd < 0)
        throw Error("shared memory segment " + name + ": cannot open iod's private file (" + std::strerror(errno) +
                    "): a client must run as iod's user in its pid namespace; else start iod with --shm named");
      struct stat st {};
      const bool own_regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid();
      const uint64_t size = uint64_t(st.st_size);
      try {
        require(own_regular, "shared memory segment " + name + ": not a regular file of this user");
        require(size >= expect.total_bytes, "shared memory segment " + name + ": smaller than the layout iod announced");
        const std::string own = "/proc/self/fd/" + std::to_string(fd);
        bip::file_mapping file(own.c_str(), bip::read_only);
        s.impl_ = std::make_unique<Impl>();
        s.impl_->region = bip::mapped_region(file, bip::read_only, 0, expect.total_bytes);
      } catch (...) {
        ::close(fd);
        throw;
      }
      ::close(fd);  // the mapping keeps the file
    } else {
      bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_only);
      bip::offset_t size = 0;
      require(shm.get_size(size) && uint64_t(size) >= expect.total_bytes,
              "shared memory segment " + name + ": smaller than the layout iod announced");
      s.impl_ = std::make_unique<Impl>();
      s.impl_->region = bip::mapped_region(shm, bip::read_only, 0, expect.total_bytes);
    }
  } catch (const bip::interprocess_exception& e) {
    throw Error("shared memory segment " + name + ": cannot open read-only: " + e.what());
  }
  s.name_ = name;
  s.base_ = static_cast<uint8_t*>(s.impl_->region.get_address());
  s.bytes_ = expect.total_bytes;
  // Map every page now rather than fault on first read: a fresh compute otherwise takes a fault
  // per 64 KiB of each record the first time it reads it, ~10% of the expert phase of a
  // decode with every expert cached (docs/LEARNED.md, 2026-12-05). The pages exist: iod
  // registers its slots with io_uring, which allocates them (4.6 GB mapped in 0.1-0.13 s); with
  // its pread pool this call allocates them, which the budget counts anyway (every slot). Where
  // the call is refused, reads fault as before. Huge pages asked for first: pages this call
  // allocates then come as 2 MiB ones where the file system allows them.
  platform::advise_huge_pages(s.base_, s.bytes_);
  (void)platform::populate_for_read(s.base_, s.bytes_);
  const SegmentHeader& h = s.header();
  require(h.magic == kSegmentMagic, "shared memory segment " + name + ": bad magic");
  require(h.version == kSegmentVersion, "shared memory segment " + name + ": layout version " +
                                            std::to_string(h.version) + ", this build reads " +
                                            std::to_string(kSegmentVersion));
  require(h.ready.load(std::memory_order_acquire) == 1, "shared memory segment " + name + ": not initialised");
  require(h.slot_entry_bytes == sizeof(SlotEntry) && h.slot_count == expect.slot_count &&
              h.slot_bytes == expect.slot_bytes && h.slot_table_offset == expect.slot_table_offset &&
              h.slots_offset == expect.slots_offset && h.total_bytes == expect.total_bytes,
          "shared memory segment " + name + ": layout differs from what iod announced");
  require(container_id == 0 || h.container_id == container_id,
          "shared memory segment " + name + ": holds another container's experts");
  // A descriptor path names the iod that wrote the header: another process's file is refused.
  require(s.iod_pid_ == 0 || h.iod_pid == s.iod_pid_,
          "shared memory segment " + name + ": written by iod pid " + std::to_string(h.iod_pid) + ", not " +
              std::to_string(s.iod_pid_));
  return s;
}

std::string segment_name(uint64_t instance_id, uint64_t container_id) {
  char buf[kSegmentNameLength + 1];
  std::snprintf(buf, sizeof buf, "waste-iod-%016llx-%016llx", (unsigned long long)instance_id,
                (unsigned long long)container_id);
  return buf;
}

std::string segment_prefix(uint64_t instance_id) {
  std::string name = segment_name(instance_id, 0);
  return name.substr(0, name.size() - 16);  // without the container's 16 hex digits
}

std::vector<std::string> remove_instance_segments(uint64_t instance_id) {
  std::vector<std::string> removed;
  for (const std::string& name : platform::shm_names_with_prefix(segment_prefix(instance_id)))
    if (ShmSegment::remove(name)) removed.push_back(name);
  return removed;
}

uint64_t instance_id_for(const std::string& run_dir) {
  std::error_code ec;
  std::string canon = std::filesystem::weakly_canonical(run_dir, ec).string();
  if (ec) canon = run_dir;
  return checksum64(canon.data(), canon.size());
}

}  // namespace waste::ipc
