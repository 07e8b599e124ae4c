// A fixed pool of worker threads for data-parallel loops (encoding, kernels over rows).
// Sized once at start-up; parallel_for blocks until every chunk is done, and the calling
// thread works too, so a pool of N threads uses N cores.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace waste {

class ThreadPool {
 public:
  // threads = total threads including the caller; 0 means hardware_concurrency().
  explicit ThreadPool(unsigned threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return unsigned(workers_.size()) + 1; }

  // Calls body(begin, end) over [0, n) cut into chunks of at least `grain` items.
  // Exceptions from a chunk are rethrown in the caller after all chunks finish.
  // Callers from several threads are served one loop at a time; a body must not call
  // parallel_for on the same pool (it would wait for itself).
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& body);

  // A process-wide pool sized to the machine (or WASTE_THREADS).
  static ThreadPool& global();
  // The threads global() has or would have, without making it (the memory planner counts
  // per-thread buffers in processes that never compute).
  static unsigned global_size();

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one loop at a time
  std::mutex mutex_;
  std::condition_variable work_ready_, work_done_;
  const std::function<void(size_t, size_t)>* body_ = nullptr;
  size_t n_ = 0, chunk_ = 0, next_ = 0;
  // Written under mutex_; atomic so that waiting threads can poll them without it.
  std::atomic<size_t> chunks_left_{0};
  std::atomic<uint64_t> generation_{0};
  std::exception_ptr error_;
  bool stopping_ = false;
  std::atomic<bool> stopping_flag_{false};  // stopping_, for polling workers
};

}  // namespace waste
