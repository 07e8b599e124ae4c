// Every routed expert of a container read into RAM up front (`waste bench --resident`): the
// expert path then costs compute only, no I/O and no cache misses.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "compute/model/weights.h"
#include "shared/container/reader.h"

namespace waste {

class ResidentExperts : public ExpertSource {
 public:
  // Reads all records (checksums verified), with a progress bar when `progress`.
  ResidentExperts(const Container& container, bool progress);
  ExpertView expert(int layer, int expert) override;
  // Views into RAM that never move: as many as asked for, in the batch's order.
  size_t next_ready_group(std::span<Ready> out) override;
  ExpertSourceStats stats() override { return stats_; }
  uint64_t resident_bytes() const { return bytes_; }

 private:
  struct FreeAligned {
    void operator()(uint8_t* p) const;
  };
  struct Layer {
    const ExpertLayerInfo* info = nullptr;
    std::unique_ptr<uint8_t[], FreeAligned> records;  // expert_count x stride, kRecordAlign-aligned
    std::vector<float> codebooks;
  };
  std::map<int, Layer> layers_;
  uint64_t bytes_ = 0;
  ExpertSourceStats stats_;
};

}  // namespace waste
