// Which sanitizer this test binary (and so the whole build: scripts/test.sh --sanitize builds
// everything with the same flags) runs under. Tests whose assertion measures memory (RSS) or a
// time bound that a sanitizer makes meaningless relax only that assertion when `active` holds,
// and say so in their output (MESSAGE); the test itself still runs.
#pragma once

namespace waste::test::sanitizer {

#if defined(__has_feature)  // clang
#if __has_feature(address_sanitizer)
#define WASTE_TEST_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define WASTE_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)  // gcc
#define WASTE_TEST_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define WASTE_TEST_TSAN 1
#endif

#if defined(WASTE_TEST_ASAN)
inline constexpr bool active = true;
inline constexpr const char* name = "AddressSanitizer";
#elif defined(WASTE_TEST_TSAN)
inline constexpr bool active = true;
inline constexpr const char* name = "ThreadSanitizer";
#else
inline constexpr bool active = false;
inline constexpr const char* name = "";
#endif

}  // namespace waste::test::sanitizer
