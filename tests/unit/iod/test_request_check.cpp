// iod's checks of a touch as decoded from the wire (layer_uses_of) and against the container's
// MoE layers (check_layer_uses), at K3's shape: a touch spans up to ipc::kTouchPasses passes.
#include <capnp/message.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "iod/request_check.h"
#include "shared/util/error.h"
#include "tests/support/error_of.h"

namespace {

using waste::iod::LayerUse;

// K3: a dense layer 0, then 92 MoE layers of 896 experts.
waste::iod::ServedExperts k3_served() {
  waste::iod::ServedExperts s;
  s.source = "k3.waste";
  s.expert_count.assign(93, 896);
  s.expert_count[0] = 0;
  return s;
}

// `passes` passes over every MoE layer, each entry naming `k` experts, through a Cap'n Proto list
// as compute sends it.
std::vector<LayerUse> decoded_touch(const waste::iod::ServedExperts& s, uint32_t passes, uint32_t extra = 0) {
  std::vector<std::pair<uint32_t, uint32_t>> keys;  // (layer, first expert)
  for (uint32_t p = 0; p < passes; ++p)
    for (uint32_t l = 0; l < s.expert_count.size(); ++l)
      if (s.expert_count[l] > 0) keys.push_back({l, p});
  for (uint32_t i = 0; i < extra; ++i) keys.push_back({1, i});
  capnp::MallocMessageBuilder msg;
  auto list = msg.initRoot<waste::proto::ExpertStore::TouchParams>().initUses(uint32_t(keys.size()));
  for (size_t i = 0; i < keys.size(); ++i) {
    list[uint32_t(i)].setLayer(keys[i].first);
    auto ex = list[uint32_t(i)].initExperts(16);
    for (uint32_t j = 0; j < 16; ++j) ex.set(j, (keys[i].second * 16 + j) % 896);
  }
  return waste::iod::layer_uses_of(list.asReader());
}

}  // namespace

TEST_CASE("iod request checks: a touch of kTouchPasses passes over K3's 92 MoE layers is taken; one entry more is refused") {
  const auto served = k3_served();
  const auto full = decoded_touch(served, waste::ipc::kTouchPasses);
  REQUIRE_EQ(full.size(), size_t(92) * waste::ipc::kTouchPasses);  // 1472: over the old bound of 1024
  CHECK_NOTHROW(waste::iod::check_layer_uses(served, full));
  const auto over = decoded_touch(served, waste::ipc::kTouchPasses, 1);
  const std::string why = waste::test::error_of([&] { waste::iod::check_layer_uses(served, over); });
  CHECK_MESSAGE(why.find("1473 entries for 92 MoE layers") != std::string::npos, why);
}

TEST_CASE("iod request checks: a touch list longer than any container's passes is refused before it is decoded") {
  capnp::MallocMessageBuilder msg;
  auto list = msg.initRoot<waste::proto::ExpertStore::TouchParams>().initUses(waste::iod::kMaxTouchEntries + 1);
  const std::string why = waste::test::error_of([&] { waste::iod::layer_uses_of(list.asReader()); });
  CHECK_MESSAGE(why.find("entries (at most " + std::to_string(waste::iod::kMaxTouchEntries) + ")") != std::string::npos, why);
}
