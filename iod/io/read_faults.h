// A test hook for disk faults: records that read back as EIO, as from a failing disk. It wraps
// the engines' completion callback only when a fault is asked for (WASTE_IOD_TEST_EIO), so the
// read path of a normal run has no test code in it at all.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "iod/io/read_engine.h"

namespace waste::iod {

struct ReadFaults {
  std::vector<std::pair<uint32_t, uint32_t>> eio;  // (layer, expert): every read of it fails with -EIO
  bool empty() const { return eio.empty(); }
};

// "L:E,L:E" (e.g. "1:3,2:0"); throws Error naming the bad item.
ReadFaults parse_read_faults(const std::string& spec);

// `done`, with the faulty records' results replaced by -EIO.
ReadDone with_read_faults(ReadDone done, ReadFaults faults);

}  // namespace waste::iod
