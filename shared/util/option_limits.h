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
// Session states compute holds in memory at once when none is given (waste-compute --sessions):
// what the memory planner (waste plan, iod) counts. Open sessions past it (--max-sessions) wait
// for a state, and idle ones are parked on disk to make room.
constexpr int kDefaultLiveSessions = 1;
constexpr int kMaxSessions = 4096;       // open sessions: more is a typo, not a plan
constexpr int kDefaultMaxSessions = 16;  // waste-compute --max-sessions when none is given
constexpr int kMaxQueued = 65536;
constexpr int kMaxBatch = kMaxSessions;  // 0 means "every ready session"

}  // namespace waste::limits
