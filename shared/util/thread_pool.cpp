#include "shared/util/thread_pool.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "shared/util/error.h"
#include "shared/util/option_limits.h"

namespace waste {

namespace {

// How long a thread polls before it blocks on a condition variable: a worker after its last
// chunk, and the caller waiting for the workers' chunks. A decode step hands the pool hundreds
// of loops of 10-300 us each (every expert matrix, every trunk matmul) separated by short
// serial stretches; waking a blocked thread costs 10-15 us on this VM, which made a loop of
// 30 us no faster on two threads than on one. Polling a little longer than the typical gap
// keeps the worker awake through a step, and it still sleeps when compute waits on the disk.
// WASTE_POLL_US overrides it (0: block at once, as on a machine shared with other work).
std::chrono::microseconds poll_for() {
  static const std::chrono::microseconds value = [] {
    const char* env = std::getenv("WASTE_POLL_US");
    if (!env || !*env) return std::chrono::microseconds(150);
    char* end = nullptr;
    const long us = std::strtol(env, &end, 10);
    if (*end != '\0' || us < 0 || us > 100000)
      throw Error(std::string("WASTE_POLL_US: expected microseconds 0..100000, got '") + env + "'");
    return std::chrono::microseconds(us);
  }();
  return value;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls `done` until it holds or poll_for() has passed; true if it held.
template <typename Done>
bool poll_until(Done done) {
  if (poll_for().count() == 0) return done();
  const auto deadline = std::chrono::steady_clock::now() + poll_for();
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    // Reading the clock costs ~20 ns; every 64 polls is often enough.
    if ((i & 63) == 63 && std::chrono::steady_clock::now() >= deadline) return false;
  }
}

}  // namespace

ThreadPool::ThreadPool(unsigned threads) {
  poll_for();  // a bad WASTE_POLL_US is refused here, in the creating thread, not in a worker
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    stopping_flag_.store(true, std::memory_order_relaxed);
  }
  work_ready_.notify_all();
  for (auto& t : workers_) t.join();
}

unsigned ThreadPool::global_size() {
  const char* env = std::getenv("WASTE_THREADS");
  if (!env || !*env) return std::max(1u, std::thread::hardware_concurrency());
  // A value that is not a whole number in range is refused by name, not read as "all cores".
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(env, &end, 10);
  if (errno != 0 || *end != '\0' || n < 1 || n > limits::kMaxThreads)
    throw Error("WASTE_THREADS must be a whole number in 1.." + std::to_string(limits::kMaxThreads) + ", not '" +
                    std::string(env) + "'",
                ErrorKind::InvalidRequest, "WASTE_THREADS");
  return unsigned(n);
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(global_size());
  return pool;
}

// Takes chunks until none are left; called by workers and by the caller of parallel_for.
void ThreadPool::run_chunks() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (body_ && next_ < n_) {
    size_t begin = next_;
    size_t end = std::min(n_, begin + chunk_);
    next_ = end;
    const auto* body = body_;
    lock.unlock();
    try {
      (*body)(begin, end);
    } catch (...) {
      lock.lock();
      if (!error_) error_ = std::current_exception();
      lock.unlock();
    }
    lock.lock();
    if (chunks_left_.fetch_sub(1, std::memory_order_acq_rel) == 1) work_done_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    // The generation is published under mutex_ (with the loop's state); polling it without the
    // lock only decides when to take the lock, and run_chunks reads the state under it.
    poll_until([&] {
      return generation_.load(std::memory_order_acquire) != seen || stopping_flag_.load(std::memory_order_relaxed);
    });
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_.load(std::memory_order_relaxed) != seen; });
      if (stopping_) return;
      seen = generation_.load(std::memory_order_relaxed);
    }
    run_chunks();
  }
}

void ThreadPool::parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& body) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  if (workers_.empty() || n <= grain) {
    body(0, n);
    return;
  }
  std::lock_guard<std::mutex> one_loop(call_mutex_);
  // Four chunks per thread balances uneven chunks without much locking.
  size_t chunk = std::max(grain, (n + size() * 4 - 1) / (size() * 4));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    n_ = n;
    chunk_ = chunk;
    next_ = 0;
    chunks_left_.store((n + chunk - 1) / chunk, std::memory_order_relaxed);
    error_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);
  }
  // Cheap when every worker is polling (no waiter: no system call).
  work_ready_.notify_all();
  run_chunks();
  poll_until([&] { return chunks_left_.load(std::memory_order_acquire) == 0; });
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait(lock, [&] { return chunks_left_.load(std::memory_order_relaxed) == 0; });
    body_ = nullptr;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace waste
