// The ranges of the instance options people give on a command line (waste up, waste-compute):
// one definition, so that `waste up` refuses what waste-compute would, naming the flag, before
// anything starts. A zero or negative value is refused rather than taken as "the default".
#pragma once
#include <cstdint>

namespace waste::limits {

constexpr int64_t kMaxContextTokens = int64_t(1) << 24;  // far past any released model's context
// A session's context when none is given: waste-compute's --ctx, and so what the memory planner
// (waste plan, iod) counts unless told otherwise.
constexpr int64_t kDefaultContextTokens = 4096;
constexpr int kMaxThreads = 1024;
constexpr int kMaxSessions = 4096;       // each holds a session state: more is a typo, not a plan
constexpr int kMaxQueued = 65536;
constexpr int kMaxBatch = kMaxSessions;  // 0 means "every ready session"

}  // namespace waste::limits
