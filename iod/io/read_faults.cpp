#include "iod/io/read_faults.h"

#include <algorithm>
#include <cerrno>
#include <sstream>

#include "shared/util/error.h"

namespace waste::iod {

ReadFaults parse_read_faults(const std::string& spec) {
  ReadFaults f;
  std::stringstream in(spec);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t colon = item.find(':');
    char* end = nullptr;
    const unsigned long layer = colon == std::string::npos ? 0 : std::strtoul(item.c_str(), &end, 10);
    const bool layer_ok = colon != std::string::npos && colon > 0 && end == item.c_str() + colon;
    const unsigned long expert = layer_ok ? std::strtoul(item.c_str() + colon + 1, &end, 10) : 0;
    require(layer_ok && colon + 1 < item.size() && *end == '\0' && layer <= UINT32_MAX && expert <= UINT32_MAX,
            "WASTE_IOD_TEST_EIO: '" + item + "' is not LAYER:EXPERT");
    f.eio.push_back({uint32_t(layer), uint32_t(expert)});
  }
  return f;
}

ReadDone with_read_faults(ReadDone done, ReadFaults faults) {
  return [done = std::move(done), faults = std::move(faults)](const ReadJob& job, int64_t result, uint64_t ns) {
    const bool faulty = std::find(faults.eio.begin(), faults.eio.end(), std::make_pair(job.layer, job.expert)) !=
                        faults.eio.end();
    done(job, faulty ? -int64_t(EIO) : result, ns);
  };
}

}  // namespace waste::iod
