// What an interrupted test run must still undo (tests/test_main.cpp). meson test sends SIGTERM
// on a timeout and passes on Ctrl-C; a doctest binary killed by it never runs its destructors,
// so an Instance's supervisor and its three processes would outlive the run. An owner of such
// an outside resource registers how to release it; on SIGINT, SIGTERM or SIGHUP the binary runs
// every registered teardown, then exits as the signal would have.
#pragma once
#include <cstdint>
#include <functional>

namespace waste::test {

// Returns a handle for unregister_teardown. `undo` runs on a watcher thread, at most once.
uint64_t register_teardown(std::function<void()> undo);
void unregister_teardown(uint64_t handle);

}  // namespace waste::test
