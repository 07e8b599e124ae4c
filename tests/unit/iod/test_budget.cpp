// iod/budget.h plan_cache: --budget goes through the memory planner; --slots sets the cache
// exactly but is refused beside --budget (two ways to size one cache: neither is dropped
// unsaid), and with --slots the planner's floor for the compute shape still gives the
// instance's total, with a warning when that is over usable RAM.
#include <doctest/doctest.h>

#include <string>

#include "iod/budget.h"
#include "shared/container/reader.h"
#include "shared/ipc/segment_layout.h"
#include "shared/plan/container_plan.h"
#include "shared/plan/memory_plan.h"
#include "shared/platform/memory.h"
#include "shared/util/error.h"
#include "tests/support/temp_dir.h"
#include "tools/synth/synth.h"

using namespace waste;
using namespace waste::iod;

TEST_CASE("plan_cache: --slots beside --budget is refused; alone it logs the planner's total for the compute shape") {
  waste::test::TempDir tmp{"waste-unit-budget"};
  SynthOptions o;
  o.preset = "tiny-kimi-linear";
  o.out = tmp.path() + "/tiny.waste";
  o.progress = false;
  synthesize(o);
  const Container c = Container::open(o.out);
  uint64_t stride = 0;
  uint32_t keys = 0;
  for (const auto& l : c.expert_layers()) {
    stride = std::max<uint64_t>(stride, l.layout.stride);
    keys += l.expert_count;
  }
  const uint64_t slot = ipc::segment_layout(1, stride).slot_bytes;
  const uint32_t top_k = uint32_t(c.config().top_k);
  ComputeShape shape;
  shape.context = 512;
  shape.sessions = 2;

  try {
    plan_cache(c, "4G", 8, slot, top_k, keys, shape);
    FAIL("--slots with --budget was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("--slots and --budget both given") != std::string::npos);
    CHECK(e.param() == "--slots");
    CHECK(e.kind() == ErrorKind::InvalidRequest);
  }

  const CacheBudget b = plan_cache(c, "auto", 8, slot, top_k, keys, shape);
  CHECK_EQ(b.slots, 8u);
  CHECK(b.breakdown.find("8 slots x") != std::string::npos);
  CHECK(b.breakdown.find("floor for context 512 x 2 sessions") != std::string::npos);
  // The total is the planner's floor with these 8 slots in place of its top_k in flight.
  plan::PlanRequest req = plan::plan_request_of(c, shape.image_patches);
  req.record_stride = slot;
  req.context = 512;
  req.sessions = 2;
  const plan::MemoryPlan p = plan::make_plan(req, platform::usable_memory());
  const uint64_t total = p.floor - p.experts_in_flight + 8 * slot;
  CHECK(b.breakdown.find("holds " + plan::format_bytes(total) + " of") != std::string::npos);
  CHECK(b.warning.empty());  // a tiny model fits any machine that runs this test
  // Under one layer's experts in flight: refused as before.
  CHECK_THROWS_WITH_AS(plan_cache(c, "auto", top_k - 1, slot, top_k, keys, shape),
                       doctest::Contains("is under the floor of"), Error);
}
